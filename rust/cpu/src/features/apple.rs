//! Apple platforms (macOS, iOS): `sysctlbyname` and the Mach host VM statistics.

use std::ffi::CStr;

extern "C" {
    /// `mach_port_deallocate` from `<mach/mach_port.h>` (libsystem_kernel), not in `libc`.
    fn mach_port_deallocate(
        task: libc::mach_port_t,
        name: libc::mach_port_t,
    ) -> libc::kern_return_t;
}

/// Reads an integer sysctl of 4 or 8 bytes.
fn sysctl_int(name: &CStr) -> Option<i64> {
    let mut buf = [0u8; 8];
    let mut len: libc::size_t = buf.len();
    // SAFETY: `name` is NUL-terminated; `buf` is writable for `len` bytes and the kernel writes
    // at most `len` bytes, updating `len`; no new value is set (null, 0).
    let rc = unsafe {
        libc::sysctlbyname(
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        return None;
    }
    match len {
        4 => Some(i64::from(i32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]))),
        8 => Some(i64::from_ne_bytes(buf)),
        _ => None,
    }
}

/// Reads a string sysctl, `None` when missing or empty.
fn sysctl_string(name: &CStr) -> Option<String> {
    let mut len: libc::size_t = 0;
    // SAFETY: a null output buffer asks only for the size, written to `len`.
    let rc = unsafe {
        libc::sysctlbyname(name.as_ptr(), std::ptr::null_mut(), &mut len, std::ptr::null_mut(), 0)
    };
    if rc != 0 || len == 0 {
        return None;
    }
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` is writable for `len` bytes; the kernel writes at most `len` and updates it.
    let rc = unsafe {
        libc::sysctlbyname(
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        return None;
    }
    buf.truncate(len);
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let text = String::from_utf8_lossy(&buf[..end]).trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// Whether a `hw.optional.*` flag sysctl is present and non-zero.
#[cfg(target_arch = "aarch64")]
fn sysctl_flag(name: &CStr) -> Option<bool> {
    sysctl_int(name).map(|v| v != 0)
}

/// Detects the features of an Apple ARM CPU. Apple cores have no SVE (and SME only in
/// streaming mode, reported as SME), so SVE_CNT is 0, as in ggml.
#[cfg(target_arch = "aarch64")]
pub(super) fn detect_arm() -> super::CpuFeatures {
    let mut f = super::CpuFeatures::empty(std::env::consts::ARCH);
    // AdvSIMD is mandatory on arm64; the sysctl is only a confirmation.
    f.neon = sysctl_flag(c"hw.optional.neon")
        .or_else(|| sysctl_flag(c"hw.optional.AdvSIMD"))
        .unwrap_or(true);
    f.arm_fma = f.neon;
    f.fp16_va = sysctl_flag(c"hw.optional.arm.FEAT_FP16")
        .or_else(|| sysctl_flag(c"hw.optional.neon_fp16"))
        .unwrap_or(false);
    f.dotprod = sysctl_flag(c"hw.optional.arm.FEAT_DotProd").unwrap_or(false);
    f.i8mm = sysctl_flag(c"hw.optional.arm.FEAT_I8MM").unwrap_or(false);
    f.sme = sysctl_flag(c"hw.optional.arm.FEAT_SME").unwrap_or(false);
    f
}

/// `machdep.cpu.brand_string` (`Apple M2`), else `hw.machine` (`iPhone15,2` on iOS).
pub(super) fn description() -> Option<String> {
    sysctl_string(c"machdep.cpu.brand_string").or_else(|| sysctl_string(c"hw.machine"))
}

/// The performance-core count: `hw.perflevel0.physicalcpu`, else `hw.physicalcpu`.
#[cfg(target_arch = "aarch64")]
pub(super) fn performance_cores() -> Option<usize> {
    sysctl_int(c"hw.perflevel0.physicalcpu")
        .or_else(|| sysctl_int(c"hw.physicalcpu"))
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n > 0)
}

/// Free (free + inactive pages) and total (`hw.memsize`) memory.
pub(super) fn memory_info() -> super::MemoryInfo {
    let total = sysctl_int(c"hw.memsize").and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
    let free = vm_free_bytes().unwrap_or(0);
    super::MemoryInfo { free: if total > 0 { free.min(total) } else { free }, total }
}

/// Free plus inactive pages from `host_statistics64(HOST_VM_INFO64)`, in bytes; falls back to
/// `vm.page_free_count` when the Mach call fails.
fn vm_free_bytes() -> Option<u64> {
    // SAFETY: reads a constant exported by libsystem_kernel (the VM page size).
    let page_size = unsafe { libc::vm_page_size } as u64;
    // vm_statistics64: free_count is integer 0, inactive_count integer 2. A generous buffer
    // lets the kernel fill whatever revision of the struct it has.
    let mut buf = [0 as libc::integer_t; 64];
    let mut count = buf.len() as libc::mach_msg_type_number_t;
    // SAFETY: mach_host_self returns a send right to the host port; it has no preconditions.
    #[allow(deprecated)]
    let host = unsafe { libc::mach_host_self() };
    // SAFETY: `buf` holds `count` integers and the kernel writes at most `count`, updating it.
    let rc = unsafe {
        libc::host_statistics64(host, libc::HOST_VM_INFO64, buf.as_mut_ptr(), &mut count)
    };
    // SAFETY: releases the send right obtained above from our own task's port space;
    // mach_task_self only reads the task port name the runtime stored at startup.
    #[allow(deprecated)]
    unsafe {
        mach_port_deallocate(libc::mach_task_self(), host);
    }
    if rc == libc::KERN_SUCCESS && count >= 3 {
        let free = u64::from(buf[0] as u32);
        let inactive = u64::from(buf[2] as u32);
        return Some((free + inactive) * page_size);
    }
    sysctl_int(c"vm.page_free_count")
        .and_then(|n| u64::try_from(n).ok())
        .map(|pages| pages * page_size)
}
