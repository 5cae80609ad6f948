//! Android only: `JNI_OnLoad`, run when the app loads the library with
//! `System.loadLibrary("tessera_ffi")`, sets logging up (logcat, tag "Tessera") before any
//! other call. (JNA, which the uniffi bindings use, loads the library with `dlopen` and does not
//! run it; logging is then set up on the first API call instead.)

use jni::sys::{jint, JavaVM, JNI_VERSION_1_6};
use std::ffi::c_void;

/// Called by the JVM when the library is loaded through `System.loadLibrary`.
#[no_mangle]
pub extern "system" fn JNI_OnLoad(_vm: *mut JavaVM, _reserved: *mut c_void) -> jint {
    // Nothing may unwind into the JVM.
    let _ = std::panic::catch_unwind(|| {
        crate::logging::ensure_installed();
        log::debug!("tessera_ffi loaded (JNI_OnLoad)");
    });
    JNI_VERSION_1_6
}
