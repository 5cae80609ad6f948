//! x86 / x86_64 feature detection (`is_x86_feature_detected!` and `cpuid`).

use super::CpuFeatures;

#[cfg(target_arch = "x86")]
use std::arch::x86::{__cpuid_count, CpuidResult};
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__cpuid_count, CpuidResult};

/// Executes `cpuid` for `leaf` / `sub_leaf`.
#[allow(unused_unsafe)]
fn cpuid(leaf: u32, sub_leaf: u32) -> CpuidResult {
    // SAFETY: `cpuid` exists on every x86_64 CPU and on every x86 CPU Rust targets (i586 and
    // later); it only reads identification registers. The intrinsic is a safe function on
    // current toolchains; the block keeps the crate building on the MSRV, where it is unsafe.
    unsafe { __cpuid_count(leaf, sub_leaf) }
}

fn bit(register: u32, n: u32) -> bool {
    register & (1 << n) != 0
}

/// Detects the x86 features. The std macro covers the features it knows on the MSRV (and checks
/// that the OS saves the YMM / ZMM state); the newer ones are read from cpuid leaf 7 and gated
/// on the AVX / AVX-512 state being enabled.
pub(super) fn detect() -> CpuFeatures {
    let mut f = CpuFeatures::empty(std::env::consts::ARCH);
    f.sse3 = is_x86_feature_detected!("sse3");
    f.ssse3 = is_x86_feature_detected!("ssse3");
    f.avx = is_x86_feature_detected!("avx");
    f.avx2 = is_x86_feature_detected!("avx2");
    f.f16c = is_x86_feature_detected!("f16c");
    f.fma = is_x86_feature_detected!("fma");
    f.bmi2 = is_x86_feature_detected!("bmi2");
    f.avx512f = is_x86_feature_detected!("avx512f");
    f.avx512bw = is_x86_feature_detected!("avx512bw");
    f.avx512vl = is_x86_feature_detected!("avx512vl");
    f.avx512_vbmi = is_x86_feature_detected!("avx512vbmi");

    if cpuid(0, 0).eax >= 7 {
        let leaf7 = cpuid(7, 0);
        let leaf7_1 = if leaf7.eax >= 1 { cpuid(7, 1).eax } else { 0 };
        f.avx512_vnni = f.avx512f && bit(leaf7.ecx, 11);
        f.amx_int8 = bit(leaf7.edx, 25);
        f.avx_vnni = f.avx && bit(leaf7_1, 4);
        f.avx512_bf16 = f.avx512f && bit(leaf7_1, 5);
    }
    f
}

/// The processor brand string from cpuid leaves 0x8000_0002..=0x8000_0004, trimmed.
pub(super) fn brand_string() -> Option<String> {
    if cpuid(0x8000_0000, 0).eax < 0x8000_0004 {
        return None;
    }
    let mut bytes = Vec::with_capacity(48);
    for leaf in 0x8000_0002..=0x8000_0004 {
        let r = cpuid(leaf, 0);
        for register in [r.eax, r.ebx, r.ecx, r.edx] {
            bytes.extend_from_slice(&register.to_le_bytes());
        }
    }
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let text = String::from_utf8_lossy(&bytes[..end]);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then_some(text)
}

/// The display family of cpuid leaf 1 (the base family, plus the extended family where the base
/// is 15: AMD Zen 4 is 25, Zen 5 26).
pub(super) fn family() -> u32 {
    let eax = cpuid(1, 0).eax;
    let base = (eax >> 8) & 0xf;
    if base == 0xf {
        base + ((eax >> 20) & 0xff)
    } else {
        base
    }
}

/// The vendor string of cpuid leaf 0 (`GenuineIntel`, `AuthenticAMD`, ...), `None` when it is
/// not printable ASCII.
pub(super) fn vendor_string() -> Option<String> {
    let r = cpuid(0, 0);
    let mut bytes = Vec::with_capacity(12);
    for register in [r.ebx, r.edx, r.ecx] {
        bytes.extend_from_slice(&register.to_le_bytes());
    }
    let ok = bytes.iter().all(|b| b.is_ascii_graphic());
    ok.then(|| String::from_utf8_lossy(&bytes).into_owned())
}
