//! The `tessera` command writes nothing to stderr when nothing failed: no false error lines from
//! the Vulkan stack (Mesa's device-select layer probing Wayland without `XDG_RUNTIME_DIR`), and
//! `--help` does not open the GPU at all.

use std::process::Command;

/// Runs `tessera ARGS` as CI does (no `XDG_RUNTIME_DIR`, no Wayland, no device choice) and
/// returns its exit status and stderr.
fn run_headless(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("WAYLAND_SOCKET")
        .env_remove("NODEVICE_SELECT")
        .env_remove("MESA_VK_DEVICE_SELECT")
        .env_remove("DRI_PRIME")
        .env_remove("RUST_LOG")
        .output()
        .expect("tessera runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `tessera info` opens every device (lavapipe in CI, where Mesa's device-select layer is
/// installed with it) and passes with an empty stderr.
#[test]
fn info_writes_no_error_lines() {
    let (ok, stderr) = run_headless(&["info"]);
    assert!(ok, "tessera info failed:\n{stderr}");
    assert_eq!(stderr, "", "tessera info wrote to stderr");
}

/// `tessera --help` prints the usage and writes nothing to stderr.
#[test]
fn help_writes_no_error_lines() {
    let (ok, stderr) = run_headless(&["--help"]);
    assert!(ok);
    assert_eq!(stderr, "");
}
