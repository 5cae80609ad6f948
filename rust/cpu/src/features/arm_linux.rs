//! Linux / Android aarch64 feature detection: `getauxval(AT_HWCAP / AT_HWCAP2)` and
//! `prctl(PR_SVE_GET_VL)`.

use super::hwcap::{features_from_hwcaps, HWCAP_SVE};
use super::CpuFeatures;

// From the Linux uapi header `include/uapi/linux/prctl.h`.
const PR_SVE_GET_VL: libc::c_int = 51;
const PR_SVE_VL_LEN_MASK: libc::c_int = 0xffff;

/// Detects the running CPU's features.
pub(super) fn detect() -> CpuFeatures {
    // SAFETY: getauxval takes an integer key and reads the process's auxiliary vector; it
    // returns 0 for a missing entry and touches no caller memory.
    let hwcap = unsafe { libc::getauxval(libc::AT_HWCAP) } as u64;
    // SAFETY: as above.
    let hwcap2 = unsafe { libc::getauxval(libc::AT_HWCAP2) } as u64;
    let mut sve_cnt = 0;
    if hwcap & HWCAP_SVE != 0 {
        // SAFETY: PR_SVE_GET_VL takes no pointer arguments (the unused ones are passed as 0)
        // and only returns the calling thread's vector length configuration, or -1 on error.
        let vl = unsafe { libc::prctl(PR_SVE_GET_VL, 0 as libc::c_ulong, 0 as libc::c_ulong) };
        if vl > 0 {
            sve_cnt = (vl & PR_SVE_VL_LEN_MASK) as u32;
        }
    }
    features_from_hwcaps(hwcap, hwcap2, sve_cnt)
}
