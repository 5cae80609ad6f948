//! The GPU registration: enumerating adapters lazily and fallibly, one device per usable
//! adapter.

use crate::context::{panic_message, Context};
use crate::device::GpuDevice;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use tessera_core::backend::{BackendReg, Device};
use tessera_core::registry::Registry;
use tessera_core::{Error, Result};

/// The graphics API this build uses: "Metal" on Apple platforms, "Vulkan" elsewhere.
pub fn api_name() -> &'static str {
    if cfg!(target_vendor = "apple") {
        "Metal"
    } else {
        "Vulkan"
    }
}

/// The backends this build enables (Metal on Apple platforms, Vulkan elsewhere), narrowed by
/// the `WGPU_BACKEND` environment variable when it is set (e.g. `WGPU_BACKEND=gl` leaves none).
pub fn default_backends() -> wgpu::Backends {
    let enabled = wgpu::Instance::enabled_backend_features();
    match wgpu::Backends::from_env() {
        Some(env) => env & enabled,
        None => enabled,
    }
}

/// The GPU registration ("Vulkan" or "Metal"): one device per usable adapter.
pub struct GpuReg {
    name: String,
    devices: Vec<GpuDevice>,
}

impl GpuReg {
    /// The devices with their concrete type.
    pub fn gpu_devices(&self) -> &[GpuDevice] {
        &self.devices
    }
}

impl BackendReg for GpuReg {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        self.devices.iter().map(|d| Arc::new(d.clone()) as Arc<dyn Device>).collect()
    }

    /// Per device: `<device>.SHADER_F16` and `<device>.SOFTWARE` (0 or 1), and
    /// `<device>.DRIVER` (the driver's name and version).
    fn features(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for d in &self.devices {
            let name = d.context().name.clone();
            let info = d.adapter_info();
            out.push((format!("{name}.SHADER_F16"), (d.has_shader_f16() as u8).to_string()));
            out.push((format!("{name}.SOFTWARE"), (d.is_software() as u8).to_string()));
            out.push((format!("{name}.DRIVER"), format!("{} {}", info.driver, info.driver_info)));
        }
        out
    }
}

/// Registers the GPU with [`default_backends`]. See [`register_with`].
pub fn register() -> Result<Option<Arc<dyn BackendReg>>> {
    register_with(default_backends())
}

/// The environment variable that leaves the GPU out of the apps' registries (`1`, or any value
/// but empty and `0`): for running on the CPU alone, e.g. from the `tessera` command line.
pub const NO_GPU_ENV: &str = "TESSERA_NO_GPU";

/// Whether [`NO_GPU_ENV`] leaves the GPU out.
pub fn disabled_by_env() -> bool {
    std::env::var_os(NO_GPU_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Adds the GPU to `registry` (fallibly and lazily, [`Registry::register_with`]: a broken
/// driver only logs) unless [`NO_GPU_ENV`] leaves it out. The apps (the FFI's default registry
/// and the command line) register the GPU this way, before the CPU.
pub fn register_unless_disabled(registry: &mut Registry) {
    if !disabled_by_env() {
        registry.register_with("GPU", register);
    }
}

fn type_rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

fn device_name(api: &str, index: usize, count: usize) -> String {
    if api == "Metal" && count == 1 {
        api.to_string()
    } else {
        format!("{api}{index}")
    }
}

/// How the devices of a registration are opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuOptions {
    /// Use the adapter's `shader-f16` where it offers it (the kernels are then compiled from
    /// their f16 sources); `false` keeps the integer F16 decoding everywhere.
    pub shader_f16: bool,
    /// Bind at most this many bytes of a tensor at once (at least 1 KiB; `None`: the adapter's
    /// limit). Tests use it to run the paths for weights larger than one binding on small
    /// tensors.
    pub binding_limit: Option<u64>,
}

impl Default for GpuOptions {
    /// `shader_f16` unless the environment variable `TESSERA_GPU_F16` is `0`; the adapter's
    /// binding limit.
    fn default() -> Self {
        GpuOptions {
            shader_f16: std::env::var("TESSERA_GPU_F16").map_or(true, |v| v != "0"),
            binding_limit: None,
        }
    }
}

/// Creates the logical device of `adapter`, with `shader-f16` when the adapter offers it and
/// `options` allow it.
fn open(
    adapter: &wgpu::Adapter,
    options: GpuOptions,
) -> std::result::Result<(wgpu::Device, wgpu::Queue), String> {
    let mut features = wgpu::Features::empty();
    if options.shader_f16 {
        features |= adapter.features() & wgpu::Features::SHADER_F16;
    }
    let desc = wgpu::DeviceDescriptor {
        label: Some("tessera"),
        required_features: features,
        required_limits: adapter.limits(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    };
    match catch_unwind(AssertUnwindSafe(|| pollster::block_on(adapter.request_device(&desc)))) {
        Ok(Ok(dq)) => Ok(dq),
        Ok(Err(e)) => Err(format!("device creation failed: {e}")),
        Err(p) => Err(format!("device creation panicked: {}", panic_message(p.as_ref()))),
    }
}

/// Registers the GPU with only `backends` enabled: enumerates their adapters (real GPUs
/// first, software rasterizers such as lavapipe last) and creates a device on each one that
/// can run compute shaders.
///
/// Returns `Ok(None)` when there is no adapter at all (no driver, or `backends` empty), and an
/// error when adapters exist but none could be opened; both are logged with `log::warn`.
/// wgpu panics (some drivers make it panic) are caught and reported as errors.
pub fn register_with(backends: wgpu::Backends) -> Result<Option<Arc<dyn BackendReg>>> {
    Ok(GpuReg::new(backends)?.map(|r| Arc::new(r) as Arc<dyn BackendReg>))
}

impl GpuReg {
    /// The registration with only `backends` enabled, as its concrete type (see
    /// [`register_with`], which returns it as a trait object).
    pub fn new(backends: wgpu::Backends) -> Result<Option<GpuReg>> {
        GpuReg::with_options(backends, GpuOptions::default())
    }

    /// [`GpuReg::new`] with the devices opened as `options` say.
    pub fn with_options(backends: wgpu::Backends, options: GpuOptions) -> Result<Option<GpuReg>> {
        let api = api_name();
        let fail = |message: String| {
            log::warn!("{api}: {message}");
            Error::Backend { backend: api.to_string(), message }
        };
        if backends.contains(wgpu::Backends::VULKAN) {
            static QUIET: std::sync::Once = std::sync::Once::new();
            QUIET.call_once(|| {
                if crate::headless::quiet_device_select() {
                    log::debug!("{api}: no Wayland session; Mesa's device-select layer disabled (NODEVICE_SELECT=1)");
                }
            });
        }
        let enumerated = catch_unwind(AssertUnwindSafe(|| {
            let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
                backends,
                flags: wgpu::InstanceFlags::empty().with_env(),
                ..wgpu::InstanceDescriptor::new_without_display_handle()
            });
            pollster::block_on(instance.enumerate_adapters(backends))
        }));
        let mut adapters = match enumerated {
            Ok(a) => a,
            Err(p) => {
                return Err(fail(format!(
                    "adapter enumeration panicked: {}",
                    panic_message(p.as_ref())
                )))
            }
        };
        adapters.retain(|a| {
            let caps = a.get_downlevel_capabilities();
            let ok = caps.flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS);
            if !ok {
                log::warn!("{api}: skipping adapter {:?}: no compute shaders", a.get_info().name);
            }
            ok
        });
        if adapters.is_empty() {
            log::warn!("{api}: no GPU adapter found (backends {backends:?}); the GPU device is not available");
            return Ok(None);
        }
        adapters.sort_by_key(|a| type_rank(a.get_info().device_type));
        let count = adapters.len();
        let mut devices = Vec::new();
        let mut errors = Vec::new();
        for adapter in adapters {
            let info = adapter.get_info();
            match open(&adapter, options) {
                Ok((device, queue)) => {
                    let name = device_name(api, devices.len(), count);
                    log::info!(
                        "{api}: {name} is {:?} ({:?}, {:?})",
                        info.name,
                        info.device_type,
                        info.backend
                    );
                    let ctx = Context::new(
                        name,
                        device,
                        queue,
                        info,
                        adapter.features(),
                        options.binding_limit,
                    );
                    devices.push(GpuDevice::new(Arc::new(ctx)));
                }
                Err(e) => {
                    log::warn!("{api}: skipping adapter {:?}: {e}", info.name);
                    errors.push(format!("{}: {e}", info.name));
                }
            }
        }
        if devices.is_empty() {
            return Err(fail(format!("no adapter could be opened: {}", errors.join("; "))));
        }
        Ok(Some(GpuReg { name: api.to_string(), devices }))
    }
}
