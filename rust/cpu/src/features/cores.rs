//! Performance-core count from CPU capacities (Linux / Android sysfs).

/// The number of performance cores given each CPU's relative capacity (the Linux
/// `cpu_capacity` sysfs value, 1024 for the fastest core): the cores faster than the slowest
/// cluster, or all of them when every capacity is equal. `None` for an empty list.
///
/// For example 4x A55 (160) + 2x A76 (498) + 2x X1 (1024) gives 4, and eight cores at 1024
/// give 8.
pub fn performance_cores_from_capacities(capacities: &[u32]) -> Option<usize> {
    let min = *capacities.iter().min()?;
    let above = capacities.iter().filter(|&&c| c > min).count();
    Some(if above == 0 { capacities.len() } else { above })
}

/// Reads `cpu_capacity` of every `cpuN` in `/sys/devices/system/cpu`; `None` unless all have it.
#[cfg(all(
    any(target_arch = "aarch64", target_arch = "arm"),
    any(target_os = "linux", target_os = "android")
))]
fn sysfs_capacities() -> Option<Vec<u32>> {
    let mut capacities = Vec::new();
    for entry in std::fs::read_dir("/sys/devices/system/cpu").ok()?.flatten() {
        let name = entry.file_name();
        let Some(number) = name.to_str().and_then(|n| n.strip_prefix("cpu")) else { continue };
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path().join("cpu_capacity")).ok()?;
        capacities.push(text.trim().parse().ok()?);
    }
    (!capacities.is_empty()).then_some(capacities)
}

/// The performance-core count on ARM Linux / Android: sysfs capacities, else `/proc/cpuinfo`.
#[cfg(all(
    any(target_arch = "aarch64", target_arch = "arm"),
    any(target_os = "linux", target_os = "android")
))]
pub(super) fn linux_performance_cores() -> Option<usize> {
    if let Some(count) = sysfs_capacities().and_then(|c| performance_cores_from_capacities(&c)) {
        return Some(count);
    }
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    super::cpuinfo::performance_core_count(&text)
}
