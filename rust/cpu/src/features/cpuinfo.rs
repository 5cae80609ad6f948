//! Pure parsers for Linux / Android `/proc/cpuinfo` text.
//!
//! Everything here works on a string, so it is tested on recorded dumps from real devices
//! (`rust/cpu/tests/data/cpuinfo/`). The parser tolerates the quirks seen in that corpus:
//!
//! - `key<TAB>: value` as printed by the kernel, and `key    : value` where tabs became spaces;
//! - the legacy layouts where all `processor : N` lines come first and one shared ID block
//!   (`CPU implementer`, `CPU part`, ...) follows for all CPUs (old 32-bit and early arm64
//!   Android kernels);
//! - only the online CPUs being listed;
//! - a missing final newline, extra blank lines, `\r\n` line ends;
//! - several implementers in one SoC (Arm cores next to Samsung or HiSilicon ones).
//!
//! # Description format
//!
//! [`describe`] builds one line for the UI:
//!
//! 1. a `model name` line wins when it is a real name (x86: `Intel(R) Core(TM) i7-...`). The
//!    generic `AArch64 Processor rev 2 (aarch64)` / `ARMv7 Processor rev 4 (v7l)` kind is skipped.
//! 2. Otherwise the name is the `Model` line (Raspberry Pi boards, whose `Hardware` line says
//!    `BCM2835` on every model), else the `Hardware` line, followed by the cores in parentheses:
//!    `Qualcomm Technologies, Inc SM8150 (4x Kryo 4XX Silver + 4x Kryo 4XX Gold)`.
//! 3. Without either line, the cores alone: `4x Cortex-A55 + 2x Cortex-A78 + 2x Cortex-X1`.
//!
//! Cores are grouped by decoded name, in order of first appearance by CPU number (which on
//! phones is the ascending order of performance), with the count of listed CPUs per group.
//! Offline CPUs are not listed by the kernel, so they are not counted. When the file has one
//! shared ID block for several CPUs (legacy layout) the core mix is unknown: the description is
//! then the `Hardware` name alone, or the bare core name without a count.

use super::CpuFeatures;

/// The MIDR identification of one core, as printed in `/proc/cpuinfo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoreId {
    /// `CPU implementer` (MIDR bits 31:24), e.g. 0x41 for Arm.
    pub implementer: u32,
    /// `CPU variant` (MIDR bits 23:20), the N in rNpM.
    pub variant: u32,
    /// `CPU part` (MIDR bits 15:4), e.g. 0xd05 for Cortex-A55.
    pub part: u32,
    /// `CPU revision` (MIDR bits 3:0, printed in decimal), the M in rNpM.
    pub revision: u32,
}

impl CoreId {
    /// The core's marketing name (see [`core_name`]), or a readable fallback for unknown
    /// parts: `Arm part 0xd99`, or `implementer 0x12 part 0x345` for unknown vendors.
    pub fn name(&self) -> String {
        if let Some(name) = core_name_with_variant(self.implementer, self.variant, self.part) {
            return name.to_string();
        }
        match implementer_name(self.implementer) {
            Some(vendor) => format!("{vendor} part 0x{:03x}", self.part),
            None => format!("implementer 0x{:02x} part 0x{:03x}", self.implementer, self.part),
        }
    }

    /// Whether this is a small, efficiency-class core (see [`is_little_core`]).
    pub fn is_little(&self) -> bool {
        is_little_core(self.implementer, self.part)
    }
}

/// The parts of a `/proc/cpuinfo` text that name and identify the CPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuInfo {
    /// The first non-empty `model name` value (x86; some arm64 kernels print a generic one).
    pub model_name: Option<String>,
    /// The `Hardware` value (vendor and Android kernels, Raspberry Pi kernels).
    pub hardware: Option<String>,
    /// The `Model` value (board name printed by Raspberry Pi kernels).
    pub board_model: Option<String>,
    /// The number of `processor : N` lines, i.e. the listed (online) CPUs.
    pub processors: usize,
    /// One ID per listed CPU in CPU order; in the legacy layout (see `shared_id_block`) the
    /// single shared ID block.
    pub cores: Vec<CoreId>,
    /// True when one ID block stands for several CPUs (legacy layout): the core mix is unknown.
    pub shared_id_block: bool,
    /// The flags present on every `Features` line (arm hwcap names such as `asimddp`), in the
    /// order of the first such line. Empty when there is no `Features` line (x86 has `flags`).
    pub features: Vec<String>,
}

#[derive(Default)]
struct RawEntry {
    implementer: Option<u32>,
    variant: Option<u32>,
    part: Option<u32>,
    revision: Option<u32>,
}

impl RawEntry {
    fn is_empty(&self) -> bool {
        self.implementer.is_none()
            && self.variant.is_none()
            && self.part.is_none()
            && self.revision.is_none()
    }

    fn id(&self) -> Option<CoreId> {
        Some(CoreId {
            implementer: self.implementer?,
            variant: self.variant.unwrap_or(0),
            part: self.part?,
            revision: self.revision.unwrap_or(0),
        })
    }
}

fn parse_hex(value: &str) -> Option<u32> {
    let digits = value.strip_prefix("0x").or_else(|| value.strip_prefix("0X")).unwrap_or(value);
    u32::from_str_radix(digits, 16).ok()
}

/// Parses a `/proc/cpuinfo` text. Never fails: missing parts stay `None` / empty.
pub fn parse(text: &str) -> CpuInfo {
    let mut info = CpuInfo::default();
    // ID fields of `processor` blocks; `open` while no blank line followed the `processor` line.
    let mut entries: Vec<RawEntry> = Vec::new();
    let mut open = false;
    // ID blocks that stand outside any processor block (legacy 32-bit layout).
    let mut loose: Vec<RawEntry> = Vec::new();
    let mut loose_current = RawEntry::default();
    let mut feature_lines: Vec<Vec<&str>> = Vec::new();

    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            open = false;
            if !loose_current.is_empty() {
                loose.push(std::mem::take(&mut loose_current));
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else { continue };
        let key = key.trim();
        let value = value.trim();
        let set = |slot: &mut Option<String>| {
            if slot.is_none() && !value.is_empty() {
                *slot = Some(value.to_string());
            }
        };
        match key {
            "processor" => {
                if !loose_current.is_empty() {
                    loose.push(std::mem::take(&mut loose_current));
                }
                entries.push(RawEntry::default());
                open = true;
            }
            "model name" => set(&mut info.model_name),
            "Hardware" => set(&mut info.hardware),
            "Model" => set(&mut info.board_model),
            "Features" => feature_lines.push(value.split_whitespace().collect()),
            "CPU implementer" | "CPU variant" | "CPU part" | "CPU revision" => {
                let target = match entries.last_mut() {
                    Some(entry) if open => entry,
                    _ => &mut loose_current,
                };
                let parsed = if key == "CPU revision" {
                    value.parse().ok().or_else(|| parse_hex(value))
                } else {
                    parse_hex(value)
                };
                let slot = match key {
                    "CPU implementer" => &mut target.implementer,
                    "CPU variant" => &mut target.variant,
                    "CPU part" => &mut target.part,
                    _ => &mut target.revision,
                };
                *slot = parsed;
            }
            _ => {}
        }
    }
    if !loose_current.is_empty() {
        loose.push(loose_current);
    }

    info.processors = entries.len();
    let own: Vec<CoreId> = entries.iter().filter_map(RawEntry::id).collect();
    if !entries.is_empty() && own.len() == entries.len() {
        info.cores = own;
    } else {
        let all: Vec<CoreId> =
            own.into_iter().chain(loose.iter().filter_map(RawEntry::id)).collect();
        if all.len() == 1 {
            info.shared_id_block = entries.len() > 1;
        }
        info.cores = all;
    }

    if let Some((first, rest)) = feature_lines.split_first() {
        info.features = first
            .iter()
            .filter(|flag| rest.iter().all(|line| line.contains(flag)))
            .map(|flag| flag.to_string())
            .collect();
    }
    info
}

/// Whether a `model name` value is a real name rather than the generic
/// `AArch64 Processor rev N (aarch64)` / `ARMv7 Processor rev N (v7l)` kind.
fn is_useful_model_name(name: &str) -> bool {
    !name.is_empty() && !name.contains("Processor rev")
}

impl CpuInfo {
    /// The cores grouped by name in order of first appearance: `4x Cortex-A55 + 4x Cortex-A78`.
    /// In the legacy shared-ID layout, the bare core name. `None` without any core ID.
    pub fn cores_summary(&self) -> Option<String> {
        if self.shared_id_block {
            return self.cores.first().map(CoreId::name);
        }
        let mut groups: Vec<(String, usize)> = Vec::new();
        for core in &self.cores {
            let name = core.name();
            match groups.iter_mut().find(|(n, _)| *n == name) {
                Some((_, count)) => *count += 1,
                None => groups.push((name, 1)),
            }
        }
        if groups.is_empty() {
            return None;
        }
        let parts: Vec<String> = groups.iter().map(|(name, n)| format!("{n}x {name}")).collect();
        Some(parts.join(" + "))
    }

    /// The one-line description (see the module documentation for the rules). `soc_name` is
    /// used as the name when the text has neither a `Model` nor a `Hardware` line (on Android,
    /// the `ro.soc.manufacturer` and `ro.soc.model` properties).
    pub fn description(&self, soc_name: Option<&str>) -> Option<String> {
        if let Some(model) = self.model_name.as_deref().filter(|m| is_useful_model_name(m)) {
            return Some(model.to_string());
        }
        let name = self
            .board_model
            .as_deref()
            .or(self.hardware.as_deref())
            .or(soc_name.map(str::trim).filter(|s| !s.is_empty()));
        let cores = self.cores_summary();
        match (name, cores) {
            (Some(name), Some(cores)) if !self.shared_id_block => Some(format!("{name} ({cores})")),
            (Some(name), _) => Some(name.to_string()),
            (None, cores) => cores,
        }
    }

    /// The number of performance cores among the listed CPUs: every core that is not a little
    /// core ([`is_little_core`]); all of them when every core is little (an A53-only SoC).
    /// `None` without core IDs or in the legacy shared-ID layout, where the mix is unknown.
    pub fn performance_core_count(&self) -> Option<usize> {
        if self.cores.is_empty() || self.shared_id_block {
            return None;
        }
        let big = self.cores.iter().filter(|c| !c.is_little()).count();
        Some(if big == 0 { self.cores.len() } else { big })
    }

    /// The ggml feature flags named by the `Features` lines (see [`features`]).
    pub fn cpu_features(&self) -> CpuFeatures {
        let has = |name: &str| self.features.iter().any(|f| f == name);
        // `fp` and `asimd` are arm64 hwcap names; an AArch32 view prints `neon`, `vfpv4`, ...
        let arch = if has("asimd") || has("fp") { "aarch64" } else { "arm" };
        let mut f = CpuFeatures::empty(arch);
        f.neon = has("asimd") || has("neon");
        // FMLA is part of AdvSIMD on arm64; 32-bit cores have it with VFPv4.
        f.arm_fma = has("asimd") || (has("neon") && has("vfpv4"));
        f.fp16_va = has("asimdhp");
        f.dotprod = has("asimddp");
        f.i8mm = has("i8mm");
        f.sve = has("sve");
        f.sme = has("sme");
        // The vector length is not in /proc/cpuinfo.
        f.sve_cnt = 0;
        f
    }
}

/// Describes the CPU of a `/proc/cpuinfo` text (rules in the module documentation), e.g.
/// `Qualcomm Technologies, Inc SM8150 (4x Kryo 4XX Silver + 4x Kryo 4XX Gold)` or
/// `4x Cortex-A55 + 2x Cortex-A78 + 2x Cortex-X1`. `None` when the text names nothing.
pub fn describe(cpuinfo_text: &str) -> Option<String> {
    parse(cpuinfo_text).description(None)
}

/// The number of performance cores in a `/proc/cpuinfo` text, from the core IDs (see
/// [`CpuInfo::performance_core_count`]): `Some(4)` for 4x Cortex-A55 + 3x Cortex-A78 + 1x X1.
pub fn performance_core_count(cpuinfo_text: &str) -> Option<usize> {
    parse(cpuinfo_text).performance_core_count()
}

/// The ggml feature flags named by the `Features` line(s) of a `/proc/cpuinfo` text (the flags
/// present on every CPU): `asimd` -> NEON and ARM_FMA, `asimdhp` -> FP16_VA, `asimddp` ->
/// DOTPROD, `i8mm` -> MATMUL_INT8, `sve` -> SVE, `sme` -> SME. SVE_CNT is 0 (not in the text).
/// The arch is `aarch64` for arm64 hwcap names, `arm` for an AArch32 view.
pub fn features(cpuinfo_text: &str) -> CpuFeatures {
    parse(cpuinfo_text).cpu_features()
}

/// The vendor name of a MIDR implementer code (`0x41` -> `Arm`, `0x51` -> `Qualcomm`, ...).
pub fn implementer_name(implementer: u32) -> Option<&'static str> {
    Some(match implementer {
        0x41 => "Arm",
        0x42 => "Broadcom",
        0x43 => "Cavium",
        0x46 => "Fujitsu",
        0x48 => "HiSilicon",
        0x4e => "NVIDIA",
        0x50 => "APM",
        0x51 => "Qualcomm",
        0x53 => "Samsung",
        0x56 => "Marvell",
        0x61 => "Apple",
        0x6d => "Microsoft",
        0x70 => "Phytium",
        0xc0 => "Ampere",
        _ => return None,
    })
}

/// The core name for a MIDR (implementer, part) pair, e.g. (0x41, 0xd05) -> `Cortex-A55`,
/// (0x51, 0x804) -> `Kryo 4XX Gold`, (0x53, 0x002) -> `Exynos M3`. Always keyed on the pair:
/// part numbers repeat across vendors (0x48/0xd40 is a HiSilicon Cortex-A76, 0x41/0xd40 a
/// Neoverse-V1). Samsung 0x001 is `Exynos M1` here; [`core_name_with_variant`] also tells the
/// M2 apart.
pub fn core_name(implementer: u32, part: u32) -> Option<&'static str> {
    Some(match (implementer, part) {
        // Arm
        (0x41, 0xb76) => "ARM1176",
        (0x41, 0xc05) => "Cortex-A5",
        (0x41, 0xc07) => "Cortex-A7",
        (0x41, 0xc08) => "Cortex-A8",
        (0x41, 0xc09) => "Cortex-A9",
        (0x41, 0xc0d) | (0x41, 0xc0e) => "Cortex-A17",
        (0x41, 0xc0f) => "Cortex-A15",
        (0x41, 0xd03) => "Cortex-A53",
        (0x41, 0xd04) => "Cortex-A35",
        (0x41, 0xd05) => "Cortex-A55",
        (0x41, 0xd07) => "Cortex-A57",
        (0x41, 0xd08) => "Cortex-A72",
        (0x41, 0xd09) => "Cortex-A73",
        (0x41, 0xd0a) => "Cortex-A75",
        (0x41, 0xd0b) => "Cortex-A76",
        (0x41, 0xd0c) => "Neoverse-N1",
        (0x41, 0xd0d) => "Cortex-A77",
        (0x41, 0xd0e) => "Cortex-A76AE",
        (0x41, 0xd40) => "Neoverse-V1",
        (0x41, 0xd41) => "Cortex-A78",
        (0x41, 0xd42) => "Cortex-A78AE",
        (0x41, 0xd44) => "Cortex-X1",
        (0x41, 0xd46) => "Cortex-A510",
        (0x41, 0xd47) => "Cortex-A710",
        (0x41, 0xd48) => "Cortex-X2",
        (0x41, 0xd49) => "Neoverse-N2",
        (0x41, 0xd4b) => "Cortex-A78C",
        (0x41, 0xd4c) => "Cortex-X1C",
        (0x41, 0xd4d) => "Cortex-A715",
        (0x41, 0xd4e) => "Cortex-X3",
        (0x41, 0xd4f) => "Neoverse-V2",
        (0x41, 0xd80) => "Cortex-A520",
        (0x41, 0xd81) => "Cortex-A720",
        (0x41, 0xd82) => "Cortex-X4",
        (0x41, 0xd84) => "Neoverse-V3",
        (0x41, 0xd85) => "Cortex-X925",
        (0x41, 0xd87) => "Cortex-A725",
        (0x41, 0xd8e) => "Neoverse-N3",
        // Broadcom
        (0x42, 0x00f) => "Brahma-B15",
        (0x42, 0x100) => "Brahma-B53",
        (0x42, 0x516) => "ThunderX2",
        // Cavium
        (0x43, 0x0a1) => "ThunderX 88XX",
        (0x43, 0x0af) => "ThunderX2 99XX",
        // Fujitsu
        (0x46, 0x001) => "A64FX",
        (0x46, 0x003) => "MONAKA",
        // HiSilicon: 0xd40 / 0xd41 are how Kirin SoCs report their Cortex-A76 / A77.
        (0x48, 0xd01) => "TaiShan-v110",
        (0x48, 0xd02) => "HIP09",
        (0x48, 0xd40) => "Cortex-A76",
        (0x48, 0xd41) => "Cortex-A77",
        // NVIDIA
        (0x4e, 0x000) => "Denver",
        (0x4e, 0x003) => "Denver 2",
        (0x4e, 0x004) => "Carmel",
        // APM
        (0x50, 0x000) => "X-Gene",
        // Qualcomm (since Kryo 585 the big cores report implementer 0x41)
        (0x51, 0x001) => "Oryon",
        (0x51, 0x002) => "Oryon V3",
        (0x51, 0x00f) | (0x51, 0x02d) => "Scorpion",
        (0x51, 0x04d) | (0x51, 0x06f) => "Krait",
        (0x51, 0x201) | (0x51, 0x211) => "Kryo Silver",
        (0x51, 0x205) => "Kryo Gold",
        (0x51, 0x800) => "Kryo 2XX Gold",
        (0x51, 0x801) => "Kryo 2XX Silver",
        (0x51, 0x802) => "Kryo 3XX Gold",
        (0x51, 0x803) => "Kryo 3XX Silver",
        (0x51, 0x804) => "Kryo 4XX Gold",
        (0x51, 0x805) => "Kryo 4XX Silver",
        (0x51, 0xc00) => "Falkor",
        (0x51, 0xc01) => "Saphira",
        // Samsung
        (0x53, 0x001) => "Exynos M1",
        (0x53, 0x002) => "Exynos M3",
        (0x53, 0x003) => "Exynos M4",
        (0x53, 0x004) => "Exynos M5",
        // Apple (Asahi Linux)
        (0x61, 0x022) | (0x61, 0x024) | (0x61, 0x028) => "Apple Icestorm",
        (0x61, 0x023) | (0x61, 0x025) | (0x61, 0x029) => "Apple Firestorm",
        (0x61, 0x032) | (0x61, 0x034) | (0x61, 0x038) => "Apple Blizzard",
        (0x61, 0x033) | (0x61, 0x035) | (0x61, 0x039) => "Apple Avalanche",
        // Microsoft
        (0x6d, 0xd49) => "Azure Cobalt 100",
        // Ampere
        (0xc0, 0xac3) => "AmpereOne",
        (0xc0, 0xac4) => "AmpereOne A",
        _ => return None,
    })
}

/// Like [`core_name`], but also uses the MIDR variant where it separates cores: Samsung part
/// 0x001 is the Exynos M1 with variant 0x1 and the Exynos M2 with variant 0x4.
pub fn core_name_with_variant(implementer: u32, variant: u32, part: u32) -> Option<&'static str> {
    match (implementer, variant, part) {
        (0x53, 0x4, 0x001) => Some("Exynos M2"),
        _ => core_name(implementer, part),
    }
}

/// Whether a MIDR (implementer, part) pair is a small in-order / efficiency core: Cortex-A5,
/// A7, A32, A34, A35, A53, A55, A510, A520, Brahma-B53, the Kryo Silver cores and Apple's
/// Icestorm / Blizzard. Unknown parts count as big.
pub fn is_little_core(implementer: u32, part: u32) -> bool {
    matches!(
        (implementer, part),
        (0x41, 0xc05 | 0xc07 | 0xd01 | 0xd02 | 0xd03 | 0xd04 | 0xd05 | 0xd46 | 0xd80)
            | (0x42, 0x100)
            | (0x51, 0x201 | 0x211 | 0x801 | 0x803 | 0x805)
            | (0x61, 0x022 | 0x024 | 0x028 | 0x032 | 0x034 | 0x038)
    )
}
