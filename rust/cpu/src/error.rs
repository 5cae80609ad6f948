//! Errors of the CPU crate that tessera-core has no notion of (its kernel tiers), converted into
//! tessera-core's [`Error`] where they cross the backend traits or a function that also returns
//! core errors.

use tessera_core::Error;

/// The name of the CPU device in converted errors.
const DEVICE: &str = "CPU";

/// What only the CPU backend can get wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CpuError {
    /// A kernel tier that the running CPU lacks was asked for (the text names it, and the best
    /// tier this CPU has where that helps).
    TierUnsupported(String),
}

impl std::fmt::Display for CpuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CpuError::TierUnsupported(tier) => {
                write!(f, "kernel tier {tier} is not supported by this CPU")
            }
        }
    }
}

impl std::error::Error for CpuError {}

impl From<CpuError> for Error {
    /// A tier the CPU lacks is something the device does not support:
    /// [`Error::Unsupported`] for the CPU device, with the same text.
    fn from(e: CpuError) -> Error {
        match e {
            CpuError::TierUnsupported(tier) => {
                Error::Unsupported { device: DEVICE.into(), what: format!("kernel tier {tier}") }
            }
        }
    }
}
