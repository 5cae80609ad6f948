//! Tests of CPU feature detection, the `/proc/cpuinfo` parsers (on the recorded dumps in
//! `tests/data/cpuinfo/`, documented in its README.md), memory and performance-core counts.

use tessera_cpu::features::{
    self, cpuinfo, hwcap, memory, performance_cores_from_capacities, CpuFeatures,
};

fn sample(name: &str) -> String {
    let path = format!("{}/tests/data/cpuinfo/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every sample file with its expected description, checked by hand against the README's
/// Table 1 (Hardware line, implementer/part pairs) and Table 2 (core names).
const DESCRIPTIONS: &[(&str, &str)] = &[
    // Legacy 32-bit layout, one shared ID block: the core mix is unknown, Hardware alone.
    ("samsung-galaxy-s3-att-msm8960.txt", "SAMSUNG M2_ATT"),
    ("xiaomi-redmi-note-4-msm8953.txt", "Qualcomm Technologies, Inc MSM8953 (8x Cortex-A53)"),
    ("samsung-galaxy-j7-prime-exynos7870-aarch32.txt", "8x Cortex-A53"),
    // Early arm64 legacy layout: 8 processors, one ID block (the A57 cluster is invisible).
    ("samsung-galaxy-s6-exynos7420.txt", "SAMSUNG Exynos7420"),
    (
        "samsung-galaxy-s7-us-msm8996.txt",
        "Qualcomm Technologies, Inc MSM8996 (2x Kryo Silver + 2x Kryo Gold)",
    ),
    (
        "google-pixel-2-xl-msm8998.txt",
        "Qualcomm Technologies, Inc MSM8998 (4x Kryo 2XX Silver + 4x Kryo 2XX Gold)",
    ),
    (
        "samsung-galaxy-s9-us-sdm845.txt",
        "Qualcomm Technologies, Inc SDM845 (4x Kryo 3XX Silver + 4x Kryo 3XX Gold)",
    ),
    (
        "qualcomm-sm8150-snapdragon-855.txt",
        "Qualcomm Technologies, Inc SM8150 (4x Kryo 4XX Silver + 4x Kryo 4XX Gold)",
    ),
    (
        "qualcomm-qrb5165-snapdragon-865-class.txt",
        "Qualcomm Technologies, Inc KONA (4x Kryo 4XX Silver + 4x Cortex-A77)",
    ),
    // Only 6 of 8 CPUs online.
    ("samsung-galaxy-s7-exynos8890.txt", "4x Cortex-A53 + 2x Exynos M1"),
    ("samsung-galaxy-s9-exynos9810.txt", "4x Cortex-A55 + 4x Exynos M3"),
    ("samsung-exynos9820.txt", "4x Cortex-A55 + 2x Cortex-A75 + 2x Exynos M4"),
    ("samsung-exynos990.txt", "4x Cortex-A55 + 2x Cortex-A76 + 2x Exynos M5"),
    ("huawei-p30-kirin980.txt", "vendor Kirin980 (4x Cortex-A55 + 4x Cortex-A76)"),
    ("oneplus-nord-2-dimensity-1200-mt6893.txt", "MT6893Z_A/CZA (4x Cortex-A55 + 4x Cortex-A78)"),
    (
        "oneplus-9-pro-snapdragon-888-sm8350.txt",
        "Qualcomm Technologies, Inc SM8350 (4x Cortex-A55 + 3x Cortex-A78 + 1x Cortex-X1)",
    ),
    ("google-tensor-g2.txt", "4x Cortex-A55 + 2x Cortex-A78 + 2x Cortex-X1"),
    ("google-pixel-8-tensor-g3.txt", "4x Cortex-A510 + 4x Cortex-A715 + 1x Cortex-X3"),
    (
        "samsung-galaxy-s22-ultra-snapdragon-8-gen-1-sm8450.txt",
        "4x Cortex-A510 + 3x Cortex-A710 + 1x Cortex-X2",
    ),
    (
        "qualcomm-sm8550-snapdragon-8-gen-2.txt",
        "3x Cortex-A510 + 2x Cortex-A715 + 2x Cortex-A710 + 1x Cortex-X3",
    ),
    ("xiaomi-14-snapdragon-8-gen-3-sm8650.txt", "2x Cortex-A520 + 5x Cortex-A720 + 1x Cortex-X4"),
    ("vivo-iqoo-neo9-pro-dimensity-9300.txt", "4x Cortex-A720 + 4x Cortex-X4"),
    ("samsung-galaxy-s24-plus-exynos2400.txt", "4x Cortex-A520 + 5x Cortex-A720 + 1x Cortex-X4"),
    ("samsung-galaxy-s25-plus-snapdragon-8-elite-sm8750.txt", "8x Oryon"),
    // The Pi kernel says `Hardware : BCM2835` on every Pi: the `Model` line names the board.
    ("raspberry-pi-4-model-b-bcm2711.txt", "Raspberry Pi 4 Model B Rev 1.1 (4x Cortex-A72)"),
    ("raspberry-pi-5-model-b-bcm2712.txt", "Raspberry Pi 5 Model B Rev 1.0 (4x Cortex-A76)"),
    ("aws-graviton2-m6g-4xlarge.txt", "16x Neoverse-N1"),
    ("aws-graviton4.txt", "96x Neoverse-V2"),
];

#[test]
fn every_sample_has_an_expected_description() {
    let dir = format!("{}/tests/data/cpuinfo", env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".txt"))
        .collect();
    files.sort();
    let mut listed: Vec<String> = DESCRIPTIONS.iter().map(|(f, _)| f.to_string()).collect();
    listed.sort();
    assert_eq!(files, listed);
    assert_eq!(files.len(), 28);
}

#[test]
fn describes_every_sample() {
    let mut failures = Vec::new();
    for (file, expected) in DESCRIPTIONS {
        let got = cpuinfo::describe(&sample(file));
        if got.as_deref() != Some(*expected) {
            failures.push(format!("{file}: expected {expected:?}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn parse_counts_processors_and_layouts() {
    let cases: &[(&str, usize, usize, bool)] = &[
        // (file, processor lines, core IDs, shared ID block)
        ("samsung-galaxy-s3-att-msm8960.txt", 2, 1, true),
        ("samsung-galaxy-s6-exynos7420.txt", 8, 1, true),
        ("samsung-galaxy-s7-exynos8890.txt", 6, 6, false),
        ("google-pixel-8-tensor-g3.txt", 9, 9, false),
        ("samsung-galaxy-s24-plus-exynos2400.txt", 10, 10, false),
        ("aws-graviton4.txt", 96, 96, false),
        ("oneplus-9-pro-snapdragon-888-sm8350.txt", 8, 8, false),
    ];
    for &(file, processors, cores, shared) in cases {
        let info = cpuinfo::parse(&sample(file));
        assert_eq!(info.processors, processors, "{file}");
        assert_eq!(info.cores.len(), cores, "{file}");
        assert_eq!(info.shared_id_block, shared, "{file}");
    }

    let s3 = cpuinfo::parse(&sample("samsung-galaxy-s3-att-msm8960.txt"));
    let krait = cpuinfo::CoreId { implementer: 0x51, variant: 1, part: 0x04d, revision: 4 };
    assert_eq!(s3.cores, vec![krait]);
    assert_eq!(s3.cores_summary().as_deref(), Some("Krait"));

    // Oryon: the same part on all cores, only the variant differs (r4p4 x6, r3p4 x2).
    let s25 = cpuinfo::parse(&sample("samsung-galaxy-s25-plus-snapdragon-8-elite-sm8750.txt"));
    let variants: Vec<u32> = s25.cores.iter().map(|c| c.variant).collect();
    assert_eq!(variants, [4, 4, 4, 4, 4, 4, 3, 3]);

    // `CPU revision` is decimal.
    let s9 = cpuinfo::parse(&sample("samsung-galaxy-s9-us-sdm845.txt"));
    assert_eq!(s9.cores[0].revision, 12);
    assert_eq!(s9.cores[7].revision, 13);

    let pi = cpuinfo::parse(&sample("raspberry-pi-4-model-b-bcm2711.txt"));
    assert_eq!(pi.hardware.as_deref(), Some("BCM2835"));
    assert_eq!(pi.board_model.as_deref(), Some("Raspberry Pi 4 Model B Rev 1.1"));

    // The generic arm64 model name is parsed but not used as the description.
    let s7 = cpuinfo::parse(&sample("samsung-galaxy-s7-us-msm8996.txt"));
    assert_eq!(s7.model_name.as_deref(), Some("AArch64 Processor rev 2 (aarch64)"));
}

#[test]
fn parse_tolerates_crlf_and_synthetic_text() {
    let text = "processor\t: 0\r\nCPU implementer\t: 0x41\r\nCPU part\t: 0xd0b\r\n\r\n\
                processor\t: 1\r\nCPU implementer\t: 0x41\r\nCPU part\t: 0xd0b\r\n";
    assert_eq!(cpuinfo::describe(text).as_deref(), Some("2x Cortex-A76"));
    assert_eq!(cpuinfo::describe(""), None);
    assert_eq!(cpuinfo::describe("garbage without colons\n\n"), None);
    // A soc name is used only without Model / Hardware lines.
    let info = cpuinfo::parse(text);
    assert_eq!(info.description(Some("QTI SM8550")).as_deref(), Some("QTI SM8550 (2x Cortex-A76)"));
    // Unknown parts still get a readable name.
    let unknown = "processor : 0\nCPU implementer : 0x41\nCPU part : 0xfff\n\n\
                   processor : 1\nCPU implementer : 0x99\nCPU part : 0x123\n";
    assert_eq!(
        cpuinfo::describe(unknown).as_deref(),
        Some("1x Arm part 0xfff + 1x implementer 0x99 part 0x123")
    );
    // x86: the model name line wins.
    let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\nflags\t\t: fpu sse3\n";
    assert_eq!(cpuinfo::describe(x86).as_deref(), Some("Intel(R) Xeon(R) CPU @ 2.20GHz"));
}

#[test]
fn core_names() {
    let cases: &[(u32, u32, &str)] = &[
        (0x41, 0xd03, "Cortex-A53"),
        (0x41, 0xd05, "Cortex-A55"),
        (0x41, 0xd07, "Cortex-A57"),
        (0x41, 0xd08, "Cortex-A72"),
        (0x41, 0xd09, "Cortex-A73"),
        (0x41, 0xd0a, "Cortex-A75"),
        (0x41, 0xd0b, "Cortex-A76"),
        (0x41, 0xd0c, "Neoverse-N1"),
        (0x41, 0xd0d, "Cortex-A77"),
        (0x41, 0xd40, "Neoverse-V1"),
        (0x41, 0xd41, "Cortex-A78"),
        (0x41, 0xd44, "Cortex-X1"),
        (0x41, 0xd46, "Cortex-A510"),
        (0x41, 0xd47, "Cortex-A710"),
        (0x41, 0xd48, "Cortex-X2"),
        (0x41, 0xd49, "Neoverse-N2"),
        (0x41, 0xd4d, "Cortex-A715"),
        (0x41, 0xd4e, "Cortex-X3"),
        (0x41, 0xd4f, "Neoverse-V2"),
        (0x41, 0xd80, "Cortex-A520"),
        (0x41, 0xd81, "Cortex-A720"),
        (0x41, 0xd82, "Cortex-X4"),
        (0x41, 0xd85, "Cortex-X925"),
        (0x41, 0xd87, "Cortex-A725"),
        (0x48, 0xd40, "Cortex-A76"),
        (0x51, 0x04d, "Krait"),
        (0x51, 0x205, "Kryo Gold"),
        (0x51, 0x211, "Kryo Silver"),
        (0x51, 0x800, "Kryo 2XX Gold"),
        (0x51, 0x801, "Kryo 2XX Silver"),
        (0x51, 0x802, "Kryo 3XX Gold"),
        (0x51, 0x803, "Kryo 3XX Silver"),
        (0x51, 0x804, "Kryo 4XX Gold"),
        (0x51, 0x805, "Kryo 4XX Silver"),
        (0x51, 0x001, "Oryon"),
        (0x53, 0x001, "Exynos M1"),
        (0x53, 0x002, "Exynos M3"),
        (0x53, 0x003, "Exynos M4"),
        (0x53, 0x004, "Exynos M5"),
        (0x61, 0x023, "Apple Firestorm"),
        (0x46, 0x001, "A64FX"),
        (0x6d, 0xd49, "Azure Cobalt 100"),
        (0xc0, 0xac3, "AmpereOne"),
    ];
    for &(implementer, part, name) in cases {
        assert_eq!(cpuinfo::core_name(implementer, part), Some(name), "{implementer:#x}/{part:#x}");
    }
    // Keyed on the pair: the same part under an unknown implementer is unknown.
    assert_eq!(cpuinfo::core_name(0x12, 0xd05), None);
    assert_eq!(cpuinfo::core_name(0x41, 0x001), None);
    // Samsung 0x001 variant 4 is the M2.
    assert_eq!(cpuinfo::core_name_with_variant(0x53, 0x4, 0x001), Some("Exynos M2"));
    assert_eq!(cpuinfo::core_name_with_variant(0x53, 0x1, 0x001), Some("Exynos M1"));
    assert_eq!(cpuinfo::implementer_name(0x51), Some("Qualcomm"));
    assert!(cpuinfo::is_little_core(0x41, 0xd05));
    assert!(cpuinfo::is_little_core(0x51, 0x805));
    assert!(!cpuinfo::is_little_core(0x41, 0xd44));
}

#[test]
fn features_line_parsing() {
    let gen2 = cpuinfo::features(&sample("qualcomm-sm8550-snapdragon-8-gen-2.txt"));
    assert_eq!(gen2.arch(), "aarch64");
    assert!(gen2.neon() && gen2.arm_fma() && gen2.fp16_va() && gen2.dotprod() && gen2.i8mm());
    assert!(!gen2.sve() && !gen2.sme());

    let pixel2 = cpuinfo::features(&sample("google-pixel-2-xl-msm8998.txt"));
    assert!(pixel2.neon());
    assert!(!pixel2.dotprod() && !pixel2.i8mm() && !pixel2.fp16_va());

    // `sve` without other SVE flags, as the submitter noted.
    let s22 = cpuinfo::features(&sample("samsung-galaxy-s22-ultra-snapdragon-8-gen-1-sm8450.txt"));
    assert!(s22.sve() && s22.dotprod() && s22.i8mm());
    assert_eq!(s22.sve_cnt(), 0, "the vector length is not in /proc/cpuinfo");

    let graviton4 = cpuinfo::features(&sample("aws-graviton4.txt"));
    assert!(graviton4.sve() && graviton4.i8mm() && graviton4.dotprod());

    let a55_era = cpuinfo::features(&sample("huawei-p30-kirin980.txt"));
    assert!(a55_era.dotprod() && a55_era.fp16_va() && !a55_era.i8mm());

    let a53 = cpuinfo::features(&sample("xiaomi-redmi-note-4-msm8953.txt"));
    assert!(a53.neon() && !a53.fp16_va() && !a53.dotprod());

    // AArch32 views use 32-bit hwcap names.
    let j7 = cpuinfo::features(&sample("samsung-galaxy-j7-prime-exynos7870-aarch32.txt"));
    assert_eq!(j7.arch(), "arm");
    assert!(j7.neon() && j7.arm_fma() && !j7.dotprod());
    let s3 = cpuinfo::features(&sample("samsung-galaxy-s3-att-msm8960.txt"));
    assert_eq!(s3.arch(), "arm");
    assert!(s3.neon());

    let pairs = gen2.pairs();
    let names: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        ["NEON", "ARM_FMA", "FP16_VA", "DOTPROD", "MATMUL_INT8", "SVE", "SVE_CNT", "SME"]
    );
    let value = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(value("DOTPROD"), Some("1"));
    assert_eq!(value("MATMUL_INT8"), Some("1"));
    assert_eq!(value("SVE"), Some("0"));
    assert_eq!(value("SVE_CNT"), Some("0"));
}

#[test]
fn hwcaps_map_like_the_features_line() {
    // Snapdragon 8 Gen 2 hwcaps: fp asimd ... asimdhp ... asimddp, and i8mm in AT_HWCAP2.
    let hwcap = hwcap::HWCAP_FP
        | hwcap::HWCAP_ASIMD
        | hwcap::HWCAP_FPHP
        | hwcap::HWCAP_ASIMDHP
        | hwcap::HWCAP_ASIMDDP;
    let from_auxv = hwcap::features_from_hwcaps(hwcap, hwcap::HWCAP2_I8MM, 0);
    let from_text = cpuinfo::features(&sample("qualcomm-sm8550-snapdragon-8-gen-2.txt"));
    assert_eq!(from_auxv, from_text);

    let sve = hwcap::features_from_hwcaps(hwcap | hwcap::HWCAP_SVE, hwcap::HWCAP2_SME, 32);
    assert!(sve.sve() && sve.sme());
    assert_eq!(sve.sve_cnt(), 32);
    assert!(sve.pairs().contains(&("SVE_CNT".to_string(), "32".to_string())));
    // The vector length is dropped without SVE.
    assert_eq!(hwcap::features_from_hwcaps(hwcap::HWCAP_ASIMD, 0, 32).sve_cnt(), 0);
}

#[test]
fn performance_cores_from_cpuinfo() {
    let cases: &[(&str, Option<usize>)] = &[
        ("google-pixel-2-xl-msm8998.txt", Some(4)),
        ("qualcomm-sm8150-snapdragon-855.txt", Some(4)),
        ("qualcomm-qrb5165-snapdragon-865-class.txt", Some(4)),
        ("oneplus-9-pro-snapdragon-888-sm8350.txt", Some(4)),
        ("google-pixel-8-tensor-g3.txt", Some(5)),
        ("qualcomm-sm8550-snapdragon-8-gen-2.txt", Some(5)),
        ("xiaomi-14-snapdragon-8-gen-3-sm8650.txt", Some(6)),
        ("samsung-galaxy-s24-plus-exynos2400.txt", Some(6)),
        ("vivo-iqoo-neo9-pro-dimensity-9300.txt", Some(8)),
        ("samsung-galaxy-s25-plus-snapdragon-8-elite-sm8750.txt", Some(8)),
        ("samsung-galaxy-s7-us-msm8996.txt", Some(2)),
        // Two big cores offline: only the listed ones count.
        ("samsung-galaxy-s7-exynos8890.txt", Some(2)),
        ("samsung-exynos9820.txt", Some(4)),
        // All cores alike (A53-only SoC, servers): all of them.
        ("xiaomi-redmi-note-4-msm8953.txt", Some(8)),
        ("raspberry-pi-4-model-b-bcm2711.txt", Some(4)),
        ("aws-graviton4.txt", Some(96)),
        // Legacy shared ID block: unknown.
        ("samsung-galaxy-s6-exynos7420.txt", None),
        ("samsung-galaxy-s3-att-msm8960.txt", None),
    ];
    for &(file, expected) in cases {
        assert_eq!(cpuinfo::performance_core_count(&sample(file)), expected, "{file}");
    }
}

#[test]
fn performance_cores_from_sysfs_capacities() {
    // Pixel 6 style: 4x A55 + 2x A76 + 2x X1.
    assert_eq!(
        performance_cores_from_capacities(&[160, 160, 160, 160, 498, 498, 1024, 1024]),
        Some(4)
    );
    assert_eq!(performance_cores_from_capacities(&[1024; 8]), Some(8));
    assert_eq!(performance_cores_from_capacities(&[400, 400, 1024]), Some(1));
    assert_eq!(performance_cores_from_capacities(&[]), None);
}

#[test]
fn meminfo_parsing() {
    let text = "MemTotal:        8000000 kB\nMemFree:          100000 kB\n\
                MemAvailable:    3000000 kB\nBuffers:            1000 kB\n";
    let m = memory::parse_meminfo(text).unwrap();
    assert_eq!(m.total, 8_000_000 * 1024);
    assert_eq!(m.free, 3_000_000 * 1024);
    // Kernels before 3.14 have no MemAvailable.
    let old = "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 200 kB\n";
    let m = memory::parse_meminfo(old).unwrap();
    assert_eq!(m.free, 310 * 1024);
    assert_eq!(memory::parse_meminfo("nothing here"), None);
}

#[test]
fn detect_is_cached_and_consistent() {
    let f = CpuFeatures::detect();
    assert!(std::ptr::eq(f, CpuFeatures::detect()));
    assert_eq!(f.arch(), std::env::consts::ARCH);
    for (name, value) in f.pairs() {
        assert!(!name.is_empty());
        assert!(value.parse::<u32>().is_ok(), "{name}={value}");
    }
    eprintln!("{}: {:?}", features::cpu_description(), f.pairs());
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x86_detection_matches_std() {
    let f = CpuFeatures::detect();
    assert_eq!(f.sse3(), is_x86_feature_detected!("sse3"));
    assert_eq!(f.ssse3(), is_x86_feature_detected!("ssse3"));
    assert_eq!(f.avx(), is_x86_feature_detected!("avx"));
    assert_eq!(f.avx2(), is_x86_feature_detected!("avx2"));
    assert_eq!(f.fma(), is_x86_feature_detected!("fma"));
    assert_eq!(f.f16c(), is_x86_feature_detected!("f16c"));
    assert_eq!(f.bmi2(), is_x86_feature_detected!("bmi2"));
    assert_eq!(f.avx512f(), is_x86_feature_detected!("avx512f"));
    assert_eq!(f.avx512bw(), is_x86_feature_detected!("avx512bw"));
    assert_eq!(f.avx512vl(), is_x86_feature_detected!("avx512vl"));
    assert_eq!(f.avx512_vbmi(), is_x86_feature_detected!("avx512vbmi"));
    assert!(!f.neon() && !f.dotprod() && !f.i8mm() && f.sve_cnt() == 0);

    let pairs = f.pairs();
    let names: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "SSE3",
            "SSSE3",
            "AVX",
            "AVX_VNNI",
            "AVX2",
            "F16C",
            "FMA",
            "BMI2",
            "AVX512",
            "AVX512_VBMI",
            "AVX512_VNNI",
            "AVX512_BF16",
            "AMX_INT8"
        ]
    );
    let value = |k: &str| pairs.iter().find(|(n, _)| n == k).unwrap().1.clone();
    assert_eq!(value("AVX2"), if is_x86_feature_detected!("avx2") { "1" } else { "0" });
    assert_eq!(value("AVX512"), if is_x86_feature_detected!("avx512f") { "1" } else { "0" });

    // The newer flags read from cpuid agree with /proc/cpuinfo's flags where it has them.
    #[cfg(target_os = "linux")]
    {
        let text = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let flags: Vec<&str> = text
            .lines()
            .find(|l| l.starts_with("flags"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.split_whitespace().collect())
            .unwrap_or_default();
        let has = |flag: &str| flags.contains(&flag);
        assert_eq!(f.avx512_vnni(), has("avx512_vnni"), "avx512_vnni");
        assert_eq!(f.avx512_bf16(), has("avx512_bf16"), "avx512_bf16");
        assert_eq!(f.avx_vnni(), has("avx_vnni"), "avx_vnni");
        assert_eq!(f.amx_int8(), has("amx_int8"), "amx_int8");
    }
}

#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "x86")))]
#[test]
fn description_is_the_model_name_on_x86_linux() {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    let model = text
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap();
    assert_eq!(features::cpu_description(), model);
}

/// cpuid's vendor string is /proc/cpuinfo's `vendor_id` (an independent reading of it).
#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "x86")))]
#[test]
fn vendor_is_the_vendor_id_on_x86_linux() {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    let vendor = text
        .lines()
        .find(|l| l.starts_with("vendor_id"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap();
    assert_eq!(features::x86_vendor(), Some(vendor.as_str()));
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
#[test]
fn no_x86_vendor_elsewhere() {
    assert_eq!(features::x86_vendor(), None);
}

#[test]
fn description_is_never_empty() {
    let d = features::cpu_description();
    assert!(!d.trim().is_empty());
    assert_eq!(d, d.trim());
}

#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn memory_info_is_real_on_linux() {
    let m = features::memory_info();
    assert!(m.total > 0, "{m:?}");
    assert!(m.free > 0 && m.free <= m.total, "{m:?}");
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[test]
fn no_performance_core_count_on_x86() {
    assert_eq!(features::performance_core_count(), None);
}

/// Under `scripts/qemu-test.sh` the emulated CPU model is known: assert what was detected.
/// qemu's `cortex-a53` has NEON only, `cortex-a76` adds FP16 and dotprod, `max` has dotprod,
/// i8mm, SVE (vector length 64 bytes by default in qemu-user) and SME.
#[cfg(target_arch = "aarch64")]
#[test]
fn detected_features_match_the_qemu_cpu_model() {
    let f = CpuFeatures::detect();
    assert!(f.neon() && f.arm_fma());
    // std's detection reads the same hwcaps.
    assert_eq!(f.dotprod(), std::arch::is_aarch64_feature_detected!("dotprod"));
    assert_eq!(f.i8mm(), std::arch::is_aarch64_feature_detected!("i8mm"));
    assert_eq!(f.sve(), std::arch::is_aarch64_feature_detected!("sve"));
    assert_eq!(f.fp16_va(), std::arch::is_aarch64_feature_detected!("fp16"));
    assert_eq!(f.sve(), f.sve_cnt() > 0);

    let Ok(model) = std::env::var("TESSERA_EXPECT_CPU") else {
        eprintln!("TESSERA_EXPECT_CPU not set: only the consistency checks ran");
        return;
    };
    // (dotprod, i8mm, fp16_va, sve, sve_cnt, sme)
    let expected = match model.as_str() {
        "cortex-a53" => (false, false, false, false, 0, false),
        "cortex-a76" => (true, false, true, false, 0, false),
        "max" => (true, true, true, true, 64, true),
        other => panic!("no expectations for TESSERA_EXPECT_CPU={other}"),
    };
    let got = (f.dotprod(), f.i8mm(), f.fp16_va(), f.sve(), f.sve_cnt(), f.sme());
    assert_eq!(got, expected, "qemu -cpu {model}: {:?}", f.pairs());
}

#[cfg(target_arch = "aarch64")]
#[test]
fn aarch64_runtime_values() {
    let d = features::cpu_description();
    assert!(!d.is_empty());
    // Under qemu-user /proc/cpuinfo may be the host's: only sanity checks here.
    if let Some(n) = features::performance_core_count() {
        assert!(n > 0);
    }
}
