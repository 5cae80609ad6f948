//! Free and total physical memory.

/// Physical memory in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Memory available to new allocations without swapping: `MemAvailable` on Linux /
    /// Android, free plus inactive pages on Apple. 0 when unknown.
    pub free: u64,
    /// Total physical memory: `MemTotal` on Linux / Android, `hw.memsize` on Apple. 0 when
    /// unknown.
    pub total: u64,
}

/// The current free and total memory of the machine.
///
/// Linux / Android read `/proc/meminfo` ([`parse_meminfo`]); Apple reads `hw.memsize` and the
/// host VM statistics. Other platforms, or a failure, give 0 for the unknown values.
pub fn memory_info() -> MemoryInfo {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| parse_meminfo(&text))
            .unwrap_or_default()
    }
    #[cfg(target_vendor = "apple")]
    {
        super::apple::memory_info()
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
    {
        MemoryInfo::default()
    }
}

/// Parses a `/proc/meminfo` text: `total` from `MemTotal`, `free` from `MemAvailable` (kernels
/// before 3.14 lack it: then `MemFree + Buffers + Cached`), clamped to `total`. `None` without
/// `MemTotal`.
pub fn parse_meminfo(text: &str) -> Option<MemoryInfo> {
    let field = |name: &str| -> Option<u64> {
        text.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            if key.trim() != name {
                return None;
            }
            let mut words = value.split_whitespace();
            let number: u64 = words.next()?.parse().ok()?;
            let scale = match words.next() {
                Some("kB") | Some("KB") | Some("kb") => 1024,
                Some("mB") | Some("MB") => 1024 * 1024,
                Some("gB") | Some("GB") => 1024 * 1024 * 1024,
                _ => 1,
            };
            number.checked_mul(scale)
        })
    };
    let total = field("MemTotal")?;
    let free = field("MemAvailable").unwrap_or_else(|| {
        field("MemFree").unwrap_or(0) + field("Buffers").unwrap_or(0) + field("Cached").unwrap_or(0)
    });
    Some(MemoryInfo { free: free.min(total), total })
}
