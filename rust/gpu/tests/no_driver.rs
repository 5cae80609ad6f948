//! Without a usable driver, registration gives no device and never panics. Runs in its own
//! test binary because it changes the process environment.

use tessera_gpu::{default_backends, register};

#[test]
fn no_driver_gives_no_device() {
    // No backend allowed by WGPU_BACKEND (GL is not built in).
    std::env::set_var("WGPU_BACKEND", "gl");
    assert!(default_backends().is_empty());
    assert!(register().expect("no error without adapters").is_none());
    std::env::remove_var("WGPU_BACKEND");

    // No Vulkan driver installed: point the Vulkan loader at a driver list that does not exist.
    if !cfg!(target_vendor = "apple") {
        std::env::set_var("VK_ICD_FILENAMES", "/nonexistent/tessera_icd.json");
        std::env::set_var("VK_DRIVER_FILES", "/nonexistent/tessera_icd.json");
        match register() {
            Ok(None) => {}
            Ok(Some(reg)) => panic!("found {} devices without a driver", reg.devices().len()),
            Err(e) => eprintln!("registration failed cleanly: {e}"),
        }
    }
}
