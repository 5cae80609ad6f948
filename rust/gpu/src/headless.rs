//! Keeping Mesa's Vulkan device-selection layer from probing a Wayland compositor that cannot
//! exist.
//!
//! wgpu enables every window-system surface extension the Vulkan loader offers
//! (`VK_KHR_wayland_surface`, `_xcb_surface`, `_xlib_surface`) on every instance, and its
//! instance callback may not remove them. Mesa's implicit layer `VK_LAYER_MESA_device_select`
//! (installed with `mesa-vulkan-drivers`, which brings lavapipe) sees the Wayland extension and
//! calls `wl_display_connect` while it orders the physical devices; without `XDG_RUNTIME_DIR`
//! (CI, containers, ssh, services) libwayland then prints
//! `error: XDG_RUNTIME_DIR is invalid or not set in the environment.` on stderr, twice per
//! instance, although nothing failed. Tessera computes only and orders the adapters itself
//! (real GPUs first, see `registry`), so the layer's choice is not needed; its manifest's
//! `disable_environment` (`NODEVICE_SELECT=1`) switches it off for this process.

/// Disables Mesa's device-selection layer (sets `NODEVICE_SELECT=1`) when it could only print
/// a false error: on Linux and the BSDs (not Android), when `XDG_RUNTIME_DIR` is not an
/// absolute path, no absolute `WAYLAND_DISPLAY` or `WAYLAND_SOCKET` could reach a compositor,
/// and the user has not asked the layer for a device (`MESA_VK_DEVICE_SELECT`, `DRI_PRIME`) or
/// set `NODEVICE_SELECT`. Returns whether it set the variable.
///
/// Called once by the registration before its first Vulkan instance (no Vulkan call runs
/// concurrently with it there); a program may also call it first thing in `main`.
pub fn quiet_device_select() -> bool {
    if !cfg!(all(unix, not(target_os = "android"), not(target_vendor = "apple"))) {
        return false;
    }
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let absolute = |name: &str| var(name).is_some_and(|v| v.to_string_lossy().starts_with('/'));
    let wayland_reachable = absolute("XDG_RUNTIME_DIR")
        || absolute("WAYLAND_DISPLAY")
        || var("WAYLAND_SOCKET").is_some();
    let user_choice = ["NODEVICE_SELECT", "MESA_VK_DEVICE_SELECT", "DRI_PRIME"]
        .iter()
        .any(|name| var(name).is_some());
    if wayland_reachable || user_choice {
        return false;
    }
    std::env::set_var("NODEVICE_SELECT", "1");
    true
}
