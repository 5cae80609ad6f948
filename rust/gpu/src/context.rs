//! The state shared by a GPU device, its buffers and its backends: the wgpu device and queue,
//! what the adapter reported, the pipeline cache and the lost-device flag.

use crate::kernels::{Kernel, Pipeline};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tessera_core::{Error, Result};

/// A wgpu device with everything Tessera keeps about it.
pub(crate) struct Context {
    /// Device name, e.g. "Vulkan0".
    pub name: String,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub adapter_features: wgpu::Features,
    /// Whether the kernels are compiled with native f16 (`shader-f16` enabled on the device).
    pub f16: bool,
    /// The largest storage binding the kernels use, in bytes (the device's limit, within 32
    /// bits, or less when asked for).
    pub max_binding: u64,
    /// Set when the device is lost (driver reset, `destroy`), with the reason.
    lost: Arc<Mutex<Option<String>>>,
    /// Bytes currently allocated in buffers of this device.
    pub allocated: AtomicU64,
    /// Compiled pipelines by kernel and weight type code.
    pipelines: Mutex<HashMap<(Kernel, u32), Arc<Pipeline>>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Context({}: {})", self.name, self.info.name)
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

impl Context {
    /// Wraps a freshly created device, installing handlers so that wgpu errors outside error
    /// scopes are logged instead of panicking, and device loss is recorded.
    pub fn new(
        name: String,
        device: wgpu::Device,
        queue: wgpu::Queue,
        info: wgpu::AdapterInfo,
        adapter_features: wgpu::Features,
        binding_limit: Option<u64>,
    ) -> Context {
        let lost = Arc::new(Mutex::new(None::<String>));
        let lost_cb = lost.clone();
        let dev_name = name.clone();
        device.set_device_lost_callback(move |reason, message| {
            log::warn!("{dev_name}: device lost ({reason:?}): {message}");
            if let Ok(mut l) = lost_cb.lock() {
                *l = Some(format!("device lost ({reason:?}): {message}"));
            }
        });
        let dev_name = name.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            log::warn!("{dev_name}: uncaptured wgpu error: {e}");
        }));
        let limits = device.limits();
        let f16 = device.features().contains(wgpu::Features::SHADER_F16);
        let mut max_binding = limits.max_storage_buffer_binding_size.min(u64::from(u32::MAX));
        if let Some(l) = binding_limit {
            max_binding = max_binding.min(l.max(1024));
        }
        Context {
            name,
            device,
            queue,
            info,
            limits,
            adapter_features,
            f16,
            max_binding,
            lost,
            allocated: AtomicU64::new(0),
            pipelines: Mutex::new(HashMap::new()),
        }
    }

    /// An [`Error::Backend`] of this device.
    pub fn error(&self, message: impl Into<String>) -> Error {
        Error::Backend { backend: self.name.clone(), message: message.into() }
    }

    /// Marks the device as lost.
    pub fn mark_lost(&self, why: &str) {
        if let Ok(mut l) = self.lost.lock() {
            if l.is_none() {
                *l = Some(why.to_string());
            }
        }
    }

    /// Whether the device was lost.
    pub fn is_lost(&self) -> bool {
        self.lost.lock().map(|l| l.is_some()).unwrap_or(true)
    }

    /// Fails with [`Error::Backend`] once the device is lost.
    pub fn check(&self) -> Result<()> {
        match self.lost.lock() {
            Ok(l) => match l.as_ref() {
                Some(why) => Err(self.error(why.clone())),
                None => Ok(()),
            },
            Err(_) => Err(self.error("device state poisoned")),
        }
    }

    /// Runs `f` (which uses wgpu) with validation, out-of-memory and internal errors captured
    /// and panics caught, turning each into [`Error::Backend`] (or `oom` for out of memory).
    pub fn guarded<T>(
        &self,
        oom: impl FnOnce() -> Error,
        f: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        self.check()?;
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let memory = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let out = catch_unwind(AssertUnwindSafe(f));
        let e_mem = pollster::block_on(memory.pop());
        let e_val = pollster::block_on(validation.pop());
        let e_int = pollster::block_on(internal.pop());
        let out = match out {
            Ok(r) => r,
            Err(p) => {
                let msg = format!("wgpu panicked: {}", panic_message(p.as_ref()));
                log::warn!("{}: {msg}", self.name);
                return Err(self.error(msg));
            }
        };
        if e_mem.is_some() {
            return Err(oom());
        }
        if let Some(e) = e_val.or(e_int) {
            return Err(self.error(format!("wgpu error: {e}")));
        }
        self.check()?;
        out
    }

    /// Blocks until all submitted work has finished.
    pub fn wait(&self) -> Result<()> {
        self.check()?;
        match catch_unwind(AssertUnwindSafe(|| {
            self.device.poll(wgpu::PollType::wait_indefinitely())
        })) {
            Ok(Ok(_)) => self.check(),
            Ok(Err(e)) => {
                let msg = format!("waiting for the GPU failed: {e}");
                self.mark_lost(&msg);
                Err(self.error(msg))
            }
            Err(p) => {
                let msg = format!("wgpu panicked while waiting: {}", panic_message(p.as_ref()));
                self.mark_lost(&msg);
                Err(self.error(msg))
            }
        }
    }

    /// The compute pipeline of `kernel` for weight type code `wtype`, compiled on first use.
    pub fn pipeline(&self, kernel: Kernel, wtype: u32) -> Result<Arc<Pipeline>> {
        let key = (kernel, if kernel.weight_specialized() { wtype } else { 0 });
        if let Some(p) =
            self.pipelines.lock().map_err(|_| self.error("pipeline cache poisoned"))?.get(&key)
        {
            return Ok(p.clone());
        }
        let p = Arc::new(self.guarded(
            || self.error(format!("out of memory compiling {kernel:?}")),
            || Ok(Pipeline::new(&self.device, kernel, self.f16, key.1)),
        )?);
        self.pipelines
            .lock()
            .map_err(|_| self.error("pipeline cache poisoned"))?
            .insert(key, p.clone());
        Ok(p)
    }

    /// Adds `n` bytes to the allocation count.
    pub fn add_allocated(&self, n: u64) {
        self.allocated.fetch_add(n, Ordering::Relaxed);
    }

    /// Removes `n` bytes from the allocation count.
    pub fn sub_allocated(&self, n: u64) {
        self.allocated.fetch_sub(n, Ordering::Relaxed);
    }
}
