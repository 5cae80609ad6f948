//! Linux arm64 hwcap bits (`getauxval(AT_HWCAP / AT_HWCAP2)`) and their decoding, pure so it
//! is testable on any host.
//!
//! Bit values from the Linux uapi header `arch/arm64/include/uapi/asm/hwcap.h` (the NDK's
//! `asm/hwcap.h` has the same values).

use super::CpuFeatures;

/// `AT_HWCAP` bit: floating point.
pub const HWCAP_FP: u64 = 1 << 0;
/// `AT_HWCAP` bit: AdvSIMD (NEON).
pub const HWCAP_ASIMD: u64 = 1 << 1;
/// `AT_HWCAP` bit: half-precision scalar floating point.
pub const HWCAP_FPHP: u64 = 1 << 9;
/// `AT_HWCAP` bit: half-precision AdvSIMD arithmetic.
pub const HWCAP_ASIMDHP: u64 = 1 << 10;
/// `AT_HWCAP` bit: AdvSIMD dot product (SDOT / UDOT).
pub const HWCAP_ASIMDDP: u64 = 1 << 20;
/// `AT_HWCAP` bit: Scalable Vector Extension.
pub const HWCAP_SVE: u64 = 1 << 22;
/// `AT_HWCAP2` bit: int8 matrix multiply (SMMLA / UMMLA).
pub const HWCAP2_I8MM: u64 = 1 << 13;
/// `AT_HWCAP2` bit: Scalable Matrix Extension.
pub const HWCAP2_SME: u64 = 1 << 23;

/// The ggml features named by `AT_HWCAP` / `AT_HWCAP2` values; `sve_cnt` is the SVE vector
/// length in bytes (ignored without SVE). The same mapping as [`super::cpuinfo::features`]:
/// ASIMD -> NEON (and ARM_FMA with FP), ASIMDHP -> FP16_VA, ASIMDDP -> DOTPROD,
/// I8MM -> MATMUL_INT8, SVE -> SVE, SME -> SME.
pub fn features_from_hwcaps(hwcap: u64, hwcap2: u64, sve_cnt: u32) -> CpuFeatures {
    let mut f = CpuFeatures::empty("aarch64");
    f.neon = hwcap & HWCAP_ASIMD != 0;
    f.arm_fma = f.neon && hwcap & HWCAP_FP != 0;
    f.fp16_va = hwcap & HWCAP_ASIMDHP != 0;
    f.dotprod = hwcap & HWCAP_ASIMDDP != 0;
    f.sve = hwcap & HWCAP_SVE != 0;
    f.sve_cnt = if f.sve { sve_cnt } else { 0 };
    f.i8mm = hwcap2 & HWCAP2_I8MM != 0;
    f.sme = hwcap2 & HWCAP2_SME != 0;
    f
}
