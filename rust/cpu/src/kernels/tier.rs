//! Kernel tiers: which SIMD level the kernels use, chosen once per process from the detected
//! CPU features (or forced by `TESSERA_CPU_TIER` / [`force_tier`]).
//!
//! A tier is only ever used after checking, at run time, that the CPU has its features: the
//! crate is never compiled with `-C target-feature`, every SIMD function is a
//! `#[target_feature]` `unsafe fn`, and forcing a tier the CPU lacks is refused with
//! [`CpuError::TierUnsupported`] (as tessera-core's `Error::Unsupported`).

use crate::error::CpuError;
use crate::features::CpuFeatures;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;
use tessera_core::{DType, Error, Result};

/// Name of the environment variable that forces a tier (`scalar`, `neon`, `dotprod`, `i8mm`,
/// `avx2`, `avx512_vnni`).
pub const TIER_ENV: &str = "TESSERA_CPU_TIER";

/// A level of SIMD kernels.
///
/// ARM tiers build on each other (`I8mm` > `Dotprod` > `Neon` > `Scalar`), as do the x86 ones
/// (`Avx512Vnni` > `Avx2` > `Scalar`): a weight type that a tier has no kernel for uses the best
/// lower tier that has one (see [`tier_for`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// Portable Rust, the reference for every other tier.
    Scalar = 0,
    /// ARMv8.0 AdvSIMD.
    Neon = 1,
    /// NEON + `sdot` (ARMv8.2 dotprod).
    Dotprod = 2,
    /// NEON + dotprod + `smmla` (ARMv8.6 i8mm).
    I8mm = 3,
    /// x86_64 AVX2 + FMA + F16C.
    Avx2 = 4,
    /// x86_64 AVX2 tier plus AVX-512 F/BW/VL and VNNI (`vpdpbusd`).
    Avx512Vnni = 5,
}

impl Tier {
    /// Every tier, lowest first within each architecture.
    pub const ALL: [Tier; 6] =
        [Tier::Scalar, Tier::Neon, Tier::Dotprod, Tier::I8mm, Tier::Avx2, Tier::Avx512Vnni];

    /// The tier's name, as accepted by [`Tier::parse`] and `TESSERA_CPU_TIER`.
    pub const fn name(self) -> &'static str {
        match self {
            Tier::Scalar => "scalar",
            Tier::Neon => "neon",
            Tier::Dotprod => "dotprod",
            Tier::I8mm => "i8mm",
            Tier::Avx2 => "avx2",
            Tier::Avx512Vnni => "avx512_vnni",
        }
    }

    /// The tier named `s` (case-insensitive; `avx512` and `avx512vnni` are accepted too).
    pub fn parse(s: &str) -> Result<Tier> {
        let s = s.trim().to_ascii_lowercase();
        let s = match s.as_str() {
            "avx512" | "avx512vnni" | "avx512-vnni" => "avx512_vnni",
            other => other,
        };
        Tier::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| Error::InvalidArgument(format!("unknown CPU kernel tier {s:?}")))
    }

    /// The next lower tier whose kernels this one falls back to, `None` for scalar.
    pub const fn fallback(self) -> Option<Tier> {
        match self {
            Tier::Scalar => None,
            Tier::Neon | Tier::Avx2 => Some(Tier::Scalar),
            Tier::Dotprod => Some(Tier::Neon),
            Tier::I8mm => Some(Tier::Dotprod),
            Tier::Avx512Vnni => Some(Tier::Avx2),
        }
    }

    /// Whether the running CPU can execute this tier's kernels (checked with both the crate's
    /// [`CpuFeatures::detect`] and the standard library's detection macros).
    pub fn is_supported(self) -> bool {
        self.supported_by(CpuFeatures::detect()) && std_detects(self)
    }

    /// Whether a CPU with features `f` can execute this tier's kernels (on the architecture this
    /// crate was compiled for).
    pub fn supported_by(self, f: &CpuFeatures) -> bool {
        let arm = cfg!(target_arch = "aarch64");
        let x86 = cfg!(target_arch = "x86_64");
        match self {
            Tier::Scalar => true,
            Tier::Neon => arm && f.neon(),
            Tier::Dotprod => arm && f.neon() && f.dotprod(),
            Tier::I8mm => arm && f.neon() && f.dotprod() && f.i8mm(),
            Tier::Avx2 => x86 && f.avx2() && f.fma() && f.f16c(),
            Tier::Avx512Vnni => {
                x86 && f.avx2()
                    && f.fma()
                    && f.f16c()
                    && f.avx512f()
                    && f.avx512bw()
                    && f.avx512vl()
                    && f.avx512_vnni()
            }
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The standard library's view of the tier's features (a second, independent check: a tier
/// runs only when both agree).
#[allow(unreachable_code)]
fn std_detects(tier: Tier) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c");
        return match tier {
            Tier::Scalar => true,
            Tier::Avx2 => avx2,
            Tier::Avx512Vnni => {
                avx2 && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
            }
            _ => false,
        };
    }
    #[cfg(target_arch = "aarch64")]
    {
        use std::arch::is_aarch64_feature_detected as has;
        return match tier {
            Tier::Scalar => true,
            Tier::Neon => has!("neon"),
            Tier::Dotprod => has!("neon") && has!("dotprod"),
            Tier::I8mm => has!("neon") && has!("dotprod") && has!("i8mm"),
            _ => false,
        };
    }
    tier == Tier::Scalar
}

/// The best tier the running CPU supports.
pub fn detected_tier() -> Tier {
    static DETECTED: OnceLock<Tier> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        Tier::ALL.into_iter().rev().find(|t| t.is_supported()).unwrap_or(Tier::Scalar)
    })
}

/// The tier asked for by `TESSERA_CPU_TIER`: `Ok(None)` when unset or empty, an error when the
/// name is unknown or the CPU lacks the tier.
pub fn tier_from_env() -> Result<Option<Tier>> {
    match std::env::var(TIER_ENV) {
        Ok(v) if !v.trim().is_empty() => {
            let t = Tier::parse(&v)?;
            if t.is_supported() {
                Ok(Some(t))
            } else {
                Err(unsupported(t))
            }
        }
        _ => Ok(None),
    }
}

fn unsupported(t: Tier) -> Error {
    let best = detected_tier().name();
    CpuError::TierUnsupported(format!("{} (best on this CPU: {best})", t.name())).into()
}

/// The tier chosen at start-up: `TESSERA_CPU_TIER` when set to a supported tier, else the
/// detected one (an unsupported or unknown forced tier is logged and ignored, never run).
fn initial_tier() -> Tier {
    static INITIAL: OnceLock<Tier> = OnceLock::new();
    *INITIAL.get_or_init(|| match tier_from_env() {
        Ok(Some(t)) => t,
        Ok(None) => detected_tier(),
        Err(e) => {
            log::warn!("{TIER_ENV} ignored: {e}");
            detected_tier()
        }
    })
}

const NOT_FORCED: u8 = u8::MAX;
static FORCED: AtomicU8 = AtomicU8::new(NOT_FORCED);

fn from_u8(v: u8) -> Option<Tier> {
    Tier::ALL.into_iter().find(|t| *t as u8 == v)
}

/// The tier the kernels use now: the one forced by [`force_tier`], else the start-up choice
/// (`TESSERA_CPU_TIER` or the detected tier).
pub fn active_tier() -> Tier {
    from_u8(FORCED.load(Ordering::Relaxed)).unwrap_or_else(initial_tier)
}

/// Forces the kernels to `tier` for the rest of the process (until forced again).
///
/// Refused with [`CpuError::TierUnsupported`] (as tessera-core's `Error::Unsupported`) when the
/// running CPU lacks the tier's features; the previous tier stays in use.
pub fn force_tier(tier: Tier) -> Result<()> {
    if !tier.is_supported() {
        return Err(unsupported(tier));
    }
    FORCED.store(tier as u8, Ordering::Relaxed);
    Ok(())
}

/// Undoes [`force_tier`]: back to the start-up choice.
pub fn reset_tier() {
    FORCED.store(NOT_FORCED, Ordering::Relaxed);
}

/// The tier whose matmul kernel serves weights of `dtype` under the active tier: the active
/// tier when it has a kernel for the type, else the best lower tier that has one.
pub fn tier_for(dtype: DType) -> Tier {
    tier_for_in(active_tier(), dtype)
}

/// As [`tier_for`] under `tier` instead of the active tier.
pub fn tier_for_in(tier: Tier, dtype: DType) -> Tier {
    let mut t = tier;
    loop {
        if super::has_matmul_kernel(t, dtype) {
            return t;
        }
        match t.fallback() {
            Some(lower) => t = lower,
            None => return Tier::Scalar,
        }
    }
}

/// Name of the tier used for weights of `dtype` ([`tier_for`]), e.g. `"avx512_vnni"`.
pub fn tier_name(dtype: DType) -> &'static str {
    tier_for(dtype).name()
}

/// The weight types and the tier used for each, as `("Q4_0", "avx512_vnni")` pairs (for the
/// CPU feature list and `tessera info`).
pub fn tiers_by_type() -> Vec<(&'static str, &'static str)> {
    [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::IQ4_NL,
        DType::IQ4_XS,
    ]
    .into_iter()
    .map(|t| (t.name(), tier_name(t)))
    .collect()
}

static USED: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];
static LAST_USED: AtomicU8 = AtomicU8::new(NOT_FORCED);

/// Records that a kernel of `tier` ran (one count per matmul or kernel call, not per block).
pub(crate) fn note_used(tier: Tier) {
    USED[tier as usize].fetch_add(1, Ordering::Relaxed);
    LAST_USED.store(tier as u8, Ordering::Relaxed);
}

/// The tier of the last kernel that ran in this process, if any.
pub fn last_tier_used() -> Option<Tier> {
    from_u8(LAST_USED.load(Ordering::Relaxed))
}

/// How many kernel calls of `tier` ran in this process.
pub fn tier_use_count(tier: Tier) -> u64 {
    USED[tier as usize].load(Ordering::Relaxed)
}
