//! The registry of backend registrations and their devices (ggml's `ggml_backend_reg_*` and
//! `ggml_backend_dev_*` lookups, and `ggml_backend_init_by_name / by_type / best`).

use crate::backend::{Backend, BackendParams, BackendReg, BufferType, Device, DeviceType};
use crate::error::{Error, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Which device to use, as an app or a command line names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DeviceChoice {
    /// The best device: the first of [`Registry::devices_by_preference`] (a hardware GPU when
    /// there is one, else the CPU; a software GPU such as lavapipe is never preferred to the
    /// CPU).
    #[default]
    Auto,
    /// The device of this name (case-insensitive), e.g. "CPU" or "Vulkan0".
    Named(String),
}

impl DeviceChoice {
    /// `"auto"` (any case, or empty) is [`DeviceChoice::Auto`], anything else a device name.
    pub fn parse(s: &str) -> DeviceChoice {
        let s = s.trim();
        if s.is_empty() || s.eq_ignore_ascii_case("auto") {
            DeviceChoice::Auto
        } else {
            DeviceChoice::Named(s.to_string())
        }
    }
}

/// Registered backends and their devices, in registration order.
#[derive(Default, Clone)]
pub struct Registry {
    regs: Vec<Arc<dyn BackendReg>>,
    devices: Vec<Arc<dyn Device>>,
    skipped: Vec<String>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.devices.iter().map(|d| d.name()).collect();
        f.debug_struct("Registry").field("devices", &names).field("skipped", &self.skipped).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds a registration and its devices.
    pub fn register(&mut self, reg: Arc<dyn BackendReg>) {
        self.devices.extend(reg.devices());
        self.regs.push(reg);
    }

    /// Runs a fallible registration (e.g. a GPU driver probe). An error, a panic or `None`
    /// (nothing to offer) is logged and skipped: the registry is never left broken by a
    /// failing backend. Returns whether something was registered.
    pub fn register_with<F>(&mut self, what: &str, init: F) -> bool
    where
        F: FnOnce() -> Result<Option<Arc<dyn BackendReg>>>,
    {
        let outcome = catch_unwind(AssertUnwindSafe(init));
        let reason = match outcome {
            Ok(Ok(Some(reg))) => match catch_unwind(AssertUnwindSafe(|| reg.devices())) {
                Ok(devices) => {
                    self.devices.extend(devices);
                    self.regs.push(reg);
                    return true;
                }
                Err(p) => format!("panicked while listing devices: {}", panic_message(&p)),
            },
            Ok(Ok(None)) => "no device available".to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(p) => format!("panicked: {}", panic_message(&p)),
        };
        log::warn!("backend {what} skipped: {reason}");
        self.skipped.push(format!("{what}: {reason}"));
        false
    }

    /// Registrations that were skipped, with the reason.
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    /// The registrations, in order.
    pub fn regs(&self) -> &[Arc<dyn BackendReg>] {
        &self.regs
    }

    /// The registration named `name` (case-insensitive).
    pub fn reg_by_name(&self, name: &str) -> Option<Arc<dyn BackendReg>> {
        self.regs.iter().find(|r| r.name().eq_ignore_ascii_case(name)).cloned()
    }

    /// Every device, in registration order.
    pub fn devices(&self) -> &[Arc<dyn Device>] {
        &self.devices
    }

    /// The device at `index`.
    pub fn device(&self, index: usize) -> Option<Arc<dyn Device>> {
        self.devices.get(index).cloned()
    }

    /// The device named `name` (case-insensitive).
    pub fn device_by_name(&self, name: &str) -> Option<Arc<dyn Device>> {
        self.devices.iter().find(|d| d.name().eq_ignore_ascii_case(name)).cloned()
    }

    /// The first device of type `t`.
    pub fn device_by_type(&self, t: DeviceType) -> Option<Arc<dyn Device>> {
        self.devices.iter().find(|d| d.device_type() == t).cloned()
    }

    /// A backend on the device named `name`.
    pub fn init_by_name(&self, name: &str, params: &BackendParams) -> Result<Box<dyn Backend>> {
        self.device_by_name(name)
            .ok_or_else(|| Error::UnknownDevice(name.to_string()))?
            .init_backend(params)
    }

    /// A backend on the first device of type `t`.
    pub fn init_by_type(&self, t: DeviceType, params: &BackendParams) -> Result<Box<dyn Backend>> {
        self.device_by_type(t)
            .ok_or_else(|| Error::UnknownDevice(format!("no device of type {}", t.short_name())))?
            .init_backend(params)
    }

    /// The devices in order of preference: GPUs, then integrated GPUs, accelerators, the CPU,
    /// and software emulations of a GPU last.
    pub fn devices_by_preference(&self) -> Vec<Arc<dyn Device>> {
        let rank = |d: &Arc<dyn Device>| match d.device_type() {
            _ if d.is_software() => 4,
            DeviceType::Gpu => 0,
            DeviceType::IntegratedGpu => 1,
            DeviceType::Accelerator => 2,
            DeviceType::Cpu => 3,
        };
        let mut devices = self.devices.clone();
        devices.sort_by_key(rank);
        devices
    }

    /// The extra buffer types the registration of `device` offers for it
    /// ([`BackendReg::extra_buffer_types`], e.g. "CPU_REPACK"); none for a device not here.
    pub fn extra_buffer_types(&self, device: &dyn Device) -> Vec<Arc<dyn BufferType>> {
        let name = device.name();
        self.regs
            .iter()
            .find(|r| r.devices().iter().any(|d| d.name() == name))
            .map(|r| r.extra_buffer_types(device))
            .unwrap_or_default()
    }

    /// The device `choice` names: the first by preference for [`DeviceChoice::Auto`] (the one
    /// meaning of "auto"), else the device of that name. [`Error::UnknownDevice`] when there is
    /// none.
    pub fn choose(&self, choice: &DeviceChoice) -> Result<Arc<dyn Device>> {
        match choice {
            DeviceChoice::Auto => self
                .devices_by_preference()
                .into_iter()
                .next()
                .ok_or_else(|| Error::UnknownDevice("no device registered".into())),
            DeviceChoice::Named(name) => {
                self.device_by_name(name).ok_or_else(|| Error::UnknownDevice(name.clone()))
            }
        }
    }

    /// A backend on the device `choice` names; for [`DeviceChoice::Auto`] a device whose
    /// backend fails to start is logged and the next by preference is tried.
    pub fn init_choice(
        &self,
        choice: &DeviceChoice,
        params: &BackendParams,
    ) -> Result<Box<dyn Backend>> {
        match choice {
            DeviceChoice::Auto => self.init_best(params),
            DeviceChoice::Named(_) => self.choose(choice)?.init_backend(params),
        }
    }

    /// A backend on the best device ([`DeviceChoice::Auto`]): a GPU first, the CPU last. A
    /// device whose backend fails to start is logged and the next one is tried.
    pub fn init_best(&self, params: &BackendParams) -> Result<Box<dyn Backend>> {
        let mut last = None;
        for d in self.devices_by_preference() {
            match d.init_backend(params) {
                Ok(b) => return Ok(b),
                Err(e) => {
                    log::warn!("device {} failed to start: {e}", d.name());
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::UnknownDevice("no device registered".into())))
    }
}

/// The text of a caught panic payload.
pub fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}
