//! CPU feature detection, CPU description, memory and performance-core count.
//!
//! - [`CpuFeatures::detect`] finds the SIMD features once per process: `cpuid` on x86
//!   (`is_x86_feature_detected!`), `getauxval(AT_HWCAP / AT_HWCAP2)` and `prctl(PR_SVE_GET_VL)`
//!   on Linux / Android aarch64, `sysctlbyname("hw.optional.arm.FEAT_*")` on Apple.
//! - [`cpu_description`] names the CPU: the `model name` on x86 Linux, the `Hardware` line (or
//!   the Android SoC properties) and the decoded core IDs on ARM Linux / Android
//!   (format in [`cpuinfo`]), `machdep.cpu.brand_string` on Apple.
//! - [`memory_info`] reports free and total memory; [`performance_core_count`] the number of
//!   cores outside the slowest cluster of a big.LITTLE CPU.
//!
//! The parsers are pure functions ([`cpuinfo`], [`hwcap::features_from_hwcaps`],
//! [`memory::parse_meminfo`], [`performance_cores_from_capacities`]), tested on recorded dumps.

pub mod cpuinfo;
pub mod hwcap;
pub mod memory;

mod cores;

#[cfg(target_vendor = "apple")]
mod apple;
#[cfg(all(target_arch = "aarch64", any(target_os = "linux", target_os = "android")))]
mod arm_linux;
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod x86;

use std::sync::OnceLock;

pub use cores::performance_cores_from_capacities;
pub use memory::{memory_info, MemoryInfo};

/// The CPU features that matter for kernel selection, named after ggml's CPU backend features.
///
/// Fields of the other architecture are always false. Obtain the running CPU's set with
/// [`CpuFeatures::detect`]; [`cpuinfo::features`] builds one from a `/proc/cpuinfo` text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuFeatures {
    arch: &'static str,
    // arm / aarch64
    neon: bool,
    arm_fma: bool,
    fp16_va: bool,
    dotprod: bool,
    i8mm: bool,
    sve: bool,
    sve_cnt: u32,
    sme: bool,
    // x86 / x86_64
    sse3: bool,
    ssse3: bool,
    avx: bool,
    avx_vnni: bool,
    avx2: bool,
    f16c: bool,
    fma: bool,
    bmi2: bool,
    avx512f: bool,
    avx512bw: bool,
    avx512vl: bool,
    avx512_vbmi: bool,
    avx512_vnni: bool,
    avx512_bf16: bool,
    amx_int8: bool,
}

impl Default for CpuFeatures {
    /// No features, on the architecture this crate was compiled for (the scalar tier).
    fn default() -> Self {
        Self::empty(std::env::consts::ARCH)
    }
}

fn flag(value: bool) -> String {
    if value { "1" } else { "0" }.to_string()
}

impl CpuFeatures {
    /// A set without any feature for `arch`.
    pub(crate) fn empty(arch: &'static str) -> Self {
        CpuFeatures {
            arch,
            neon: false,
            arm_fma: false,
            fp16_va: false,
            dotprod: false,
            i8mm: false,
            sve: false,
            sve_cnt: 0,
            sme: false,
            sse3: false,
            ssse3: false,
            avx: false,
            avx_vnni: false,
            avx2: false,
            f16c: false,
            fma: false,
            bmi2: false,
            avx512f: false,
            avx512bw: false,
            avx512vl: false,
            avx512_vbmi: false,
            avx512_vnni: false,
            avx512_bf16: false,
            amx_int8: false,
        }
    }

    /// The features of the running CPU, detected on the first call and cached for the process.
    pub fn detect() -> &'static CpuFeatures {
        static DETECTED: OnceLock<CpuFeatures> = OnceLock::new();
        DETECTED.get_or_init(detect_now)
    }

    /// The architecture: `"aarch64"`, `"x86_64"`, `"arm"`, ... (`std::env::consts::ARCH` for
    /// the detected set).
    pub fn arch(&self) -> &'static str {
        self.arch
    }

    /// The features as ggml names and values, for display.
    ///
    /// Every feature known for the architecture is listed, present or not, so a UI can show
    /// the absent ones too: the value is `"1"` or `"0"`, and a number for `SVE_CNT` (the SVE
    /// vector length in bytes, `"0"` without SVE). Order follows ggml.
    /// - arm / aarch64: NEON, ARM_FMA, FP16_VA, DOTPROD, MATMUL_INT8, SVE, SVE_CNT, SME.
    /// - x86 / x86_64: SSE3, SSSE3, AVX, AVX_VNNI, AVX2, F16C, FMA, BMI2, AVX512, AVX512_VBMI,
    ///   AVX512_VNNI, AVX512_BF16, AMX_INT8.
    /// - other architectures: empty.
    pub fn pairs(&self) -> Vec<(String, String)> {
        let list: Vec<(&str, String)> = match self.arch {
            "aarch64" | "arm" | "arm64ec" => vec![
                ("NEON", flag(self.neon)),
                ("ARM_FMA", flag(self.arm_fma)),
                ("FP16_VA", flag(self.fp16_va)),
                ("DOTPROD", flag(self.dotprod)),
                ("MATMUL_INT8", flag(self.i8mm)),
                ("SVE", flag(self.sve)),
                ("SVE_CNT", self.sve_cnt.to_string()),
                ("SME", flag(self.sme)),
            ],
            "x86_64" | "x86" => vec![
                ("SSE3", flag(self.sse3)),
                ("SSSE3", flag(self.ssse3)),
                ("AVX", flag(self.avx)),
                ("AVX_VNNI", flag(self.avx_vnni)),
                ("AVX2", flag(self.avx2)),
                ("F16C", flag(self.f16c)),
                ("FMA", flag(self.fma)),
                ("BMI2", flag(self.bmi2)),
                ("AVX512", flag(self.avx512f)),
                ("AVX512_VBMI", flag(self.avx512_vbmi)),
                ("AVX512_VNNI", flag(self.avx512_vnni)),
                ("AVX512_BF16", flag(self.avx512_bf16)),
                ("AMX_INT8", flag(self.amx_int8)),
            ],
            _ => Vec::new(),
        };
        list.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// AdvSIMD (NEON), ggml `NEON`.
    pub fn neon(&self) -> bool {
        self.neon
    }
    /// Fused multiply-add in NEON, ggml `ARM_FMA` (always with AdvSIMD on aarch64).
    pub fn arm_fma(&self) -> bool {
        self.arm_fma
    }
    /// Half-precision vector arithmetic (`asimdhp`, FEAT_FP16), ggml `FP16_VA`.
    pub fn fp16_va(&self) -> bool {
        self.fp16_va
    }
    /// SDOT / UDOT (`asimddp`, FEAT_DotProd), ggml `DOTPROD`.
    pub fn dotprod(&self) -> bool {
        self.dotprod
    }
    /// SMMLA / UMMLA int8 matrix multiply (FEAT_I8MM), ggml `MATMUL_INT8`.
    pub fn i8mm(&self) -> bool {
        self.i8mm
    }
    /// Scalable Vector Extension, ggml `SVE`.
    pub fn sve(&self) -> bool {
        self.sve
    }
    /// The SVE vector length in bytes (`prctl(PR_SVE_GET_VL)`), 0 without SVE; ggml `SVE_CNT`.
    pub fn sve_cnt(&self) -> u32 {
        self.sve_cnt
    }
    /// Scalable Matrix Extension, ggml `SME`.
    pub fn sme(&self) -> bool {
        self.sme
    }
    /// SSE3, ggml `SSE3`.
    pub fn sse3(&self) -> bool {
        self.sse3
    }
    /// SSSE3, ggml `SSSE3`.
    pub fn ssse3(&self) -> bool {
        self.ssse3
    }
    /// AVX (with OS support for the YMM state), ggml `AVX`.
    pub fn avx(&self) -> bool {
        self.avx
    }
    /// AVX-VNNI (VEX-encoded int8 dot products), ggml `AVX_VNNI`.
    pub fn avx_vnni(&self) -> bool {
        self.avx_vnni
    }
    /// AVX2, ggml `AVX2`.
    pub fn avx2(&self) -> bool {
        self.avx2
    }
    /// F16C half-precision conversions, ggml `F16C`.
    pub fn f16c(&self) -> bool {
        self.f16c
    }
    /// FMA3, ggml `FMA`.
    pub fn fma(&self) -> bool {
        self.fma
    }
    /// BMI2, ggml `BMI2`.
    pub fn bmi2(&self) -> bool {
        self.bmi2
    }
    /// AVX-512 Foundation (with OS support for the ZMM state), ggml `AVX512`.
    pub fn avx512f(&self) -> bool {
        self.avx512f
    }
    /// AVX-512 BW (byte and word instructions).
    pub fn avx512bw(&self) -> bool {
        self.avx512bw
    }
    /// AVX-512 VL (128- and 256-bit forms).
    pub fn avx512vl(&self) -> bool {
        self.avx512vl
    }
    /// AVX-512 VBMI, ggml `AVX512_VBMI`.
    pub fn avx512_vbmi(&self) -> bool {
        self.avx512_vbmi
    }
    /// AVX-512 VNNI, ggml `AVX512_VNNI`.
    pub fn avx512_vnni(&self) -> bool {
        self.avx512_vnni
    }
    /// AVX-512 BF16, ggml `AVX512_BF16`.
    pub fn avx512_bf16(&self) -> bool {
        self.avx512_bf16
    }
    /// AMX-INT8 as reported by cpuid, ggml `AMX_INT8`. Using it on Linux still needs the tile
    /// state granted by `arch_prctl(ARCH_REQ_XCOMP_PERM)`.
    pub fn amx_int8(&self) -> bool {
        self.amx_int8
    }
}

fn detect_now() -> CpuFeatures {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        x86::detect()
    }
    #[cfg(all(target_arch = "aarch64", any(target_os = "linux", target_os = "android")))]
    {
        arm_linux::detect()
    }
    #[cfg(all(target_arch = "aarch64", target_vendor = "apple"))]
    {
        apple::detect_arm()
    }
    #[cfg(all(
        target_arch = "aarch64",
        not(any(target_os = "linux", target_os = "android", target_vendor = "apple"))
    ))]
    {
        // Windows, BSDs: std's detection.
        let mut f = CpuFeatures::empty(std::env::consts::ARCH);
        f.neon = std::arch::is_aarch64_feature_detected!("neon");
        f.arm_fma = f.neon;
        f.fp16_va = std::arch::is_aarch64_feature_detected!("fp16");
        f.dotprod = std::arch::is_aarch64_feature_detected!("dotprod");
        f.i8mm = std::arch::is_aarch64_feature_detected!("i8mm");
        f.sve = std::arch::is_aarch64_feature_detected!("sve");
        f
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")))]
    {
        CpuFeatures::default()
    }
}

/// A human-readable name of the CPU, never empty.
///
/// - Linux / Android: from `/proc/cpuinfo` with [`cpuinfo::describe`]'s rules (the `model name`
///   on x86; on ARM the `Model` / `Hardware` line, on Android without them
///   `ro.soc.manufacturer ro.soc.model`, followed by the decoded cores, e.g.
///   `Qualcomm Technologies, Inc SM8150 (4x Kryo 4XX Silver + 4x Kryo 4XX Gold)`).
/// - Apple: `machdep.cpu.brand_string` (`Apple M2`), else `hw.machine` (`iPhone15,2`).
/// - x86 elsewhere, or when the above is missing: the cpuid brand string.
/// - Fallback: `"<arch> CPU"`.
pub fn cpu_description() -> String {
    #[allow(unused_mut)]
    let mut found: Option<String> = None;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        if let Ok(text) = std::fs::read_to_string("/proc/cpuinfo") {
            let soc = android_soc_name();
            found = cpuinfo::parse(&text).description(soc.as_deref());
        }
    }
    #[cfg(target_vendor = "apple")]
    {
        found = found.or_else(apple::description);
    }
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        found = found.or_else(x86::brand_string);
    }
    found
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("{} CPU", std::env::consts::ARCH))
}

/// The x86 CPU vendor from cpuid (`GenuineIntel`, `AuthenticAMD`, ...), read once per process;
/// `None` on other architectures.
pub fn x86_vendor() -> Option<&'static str> {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        static VENDOR: OnceLock<Option<String>> = OnceLock::new();
        VENDOR.get_or_init(x86::vendor_string).as_deref()
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        None
    }
}

/// The x86 CPU's display family from cpuid (AMD Zen 4: 25, Zen 5: 26), read once per process;
/// `None` on other architectures.
pub fn x86_family() -> Option<u32> {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        static FAMILY: OnceLock<u32> = OnceLock::new();
        Some(*FAMILY.get_or_init(x86::family))
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        None
    }
}

/// Whether `vendor` (an [`x86_vendor`] string) names AMD's cores (AMD's, or Hygon's, which are
/// Zen cores), whose prefetchers and caches some kernel choices are tuned for apart.
pub fn is_amd_vendor(vendor: Option<&str>) -> bool {
    matches!(vendor, Some("AuthenticAMD" | "HygonGenuine"))
}

/// `"<ro.soc.manufacturer> <ro.soc.model>"` (Android 12+), e.g. `QTI SM8550`.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn android_soc_name() -> Option<String> {
    #[cfg(target_os = "android")]
    {
        let model = android_property(c"ro.soc.model")?;
        Some(match android_property(c"ro.soc.manufacturer") {
            Some(maker) => format!("{maker} {model}"),
            None => model,
        })
    }
    #[cfg(not(target_os = "android"))]
    {
        None
    }
}

/// An Android system property, `None` when unset or empty.
#[cfg(target_os = "android")]
fn android_property(name: &std::ffi::CStr) -> Option<String> {
    let mut buf = [0u8; libc::PROP_VALUE_MAX as usize];
    // SAFETY: `name` is NUL-terminated and `buf` holds PROP_VALUE_MAX bytes, the most
    // `__system_property_get` writes (value plus NUL).
    let len = unsafe { libc::__system_property_get(name.as_ptr(), buf.as_mut_ptr().cast()) };
    let len = usize::try_from(len).ok()?.min(buf.len());
    let value = String::from_utf8_lossy(&buf[..len]).trim().to_string();
    (!value.is_empty()).then_some(value)
}

/// The number of performance cores, for sizing the thread pool on big.LITTLE CPUs.
///
/// - ARM Linux / Android: the cores outside the slowest cluster, from
///   `/sys/devices/system/cpu/cpu*/cpu_capacity` when every CPU has it
///   ([`performance_cores_from_capacities`]), else from the `/proc/cpuinfo` core IDs (cores not
///   in the little-core list, [`cpuinfo::performance_core_count`]). All cores when they are
///   all alike.
/// - Apple: `hw.perflevel0.physicalcpu` (falls back to `hw.physicalcpu`).
/// - x86 and others: `None`.
pub fn performance_core_count() -> Option<usize> {
    #[cfg(all(
        any(target_arch = "aarch64", target_arch = "arm"),
        any(target_os = "linux", target_os = "android")
    ))]
    {
        cores::linux_performance_cores()
    }
    #[cfg(all(target_arch = "aarch64", target_vendor = "apple"))]
    {
        apple::performance_cores()
    }
    #[cfg(not(any(
        all(
            any(target_arch = "aarch64", target_arch = "arm"),
            any(target_os = "linux", target_os = "android")
        ),
        all(target_arch = "aarch64", target_vendor = "apple")
    )))]
    {
        None
    }
}
