//! The default registry: every backend this build offers, GPU first when one is available, the
//! CPU last. Built once, on first use.

use std::collections::HashMap;
use std::sync::OnceLock;
use tessera_core::registry::Registry;

/// The registry every session and `devices()` use, with the registration each device came
/// from.
pub(crate) struct Loaded {
    /// The registry.
    pub(crate) registry: Registry,
    /// Device name -> name of the backend registration that provides it.
    pub(crate) backend_of: HashMap<String, String>,
}

/// Builds the default registry: every device this build can use, the one the app's sessions
/// use.
///
/// Registration order is priority order: a GPU backend first when one is available (and
/// `TESSERA_NO_GPU` is not set, [`tessera_gpu::register_unless_disabled`]), then the CPU. GPU
/// registration is fallible and lazy (`Registry::register_with` catches errors and panics and
/// logs them), so a broken driver never prevents the CPU from being used.
pub fn default_registry() -> Registry {
    let mut registry = Registry::new();
    #[cfg(feature = "gpu")]
    tessera_gpu::register_unless_disabled(&mut registry);
    registry.register(tessera_cpu::CpuBackendReg::shared());
    registry
}

/// The default registry, built on first use.
pub(crate) fn loaded() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    LOADED.get_or_init(|| {
        crate::logging::ensure_installed();
        let registry = default_registry();
        let mut backend_of = HashMap::new();
        for reg in registry.regs() {
            let reg_name = reg.name();
            for device in reg.devices() {
                backend_of.entry(device.name()).or_insert_with(|| reg_name.clone());
            }
        }
        for skipped in registry.skipped() {
            log::info!("backend skipped: {skipped}");
        }
        log::debug!("default registry: {registry:?}");
        Loaded { registry, backend_of }
    })
}

/// The default registry, built on first use.
pub fn registry() -> &'static Registry {
    &loaded().registry
}
