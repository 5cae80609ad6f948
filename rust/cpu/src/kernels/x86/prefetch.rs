//! Software prefetch in the x86 one-row (matrix-vector) kernels, on or off per CPU vendor.
//!
//! A matrix-vector product reads every weight once and waits on RAM. The one-row kernels can
//! fetch the weights some blocks ahead with `prefetcht0` / `prefetcht1` on top of the hardware
//! prefetchers ([`Site`]). Whether that pays depends on the CPU's own prefetchers:
//!
//! - Intel (a Xeon with AVX-512 and AMX; the figures are in each site's comment): it pays, up
//!   to 1.5x from RAM (Q5_0 262144 x 640, 1 thread: 8.5 -> 11.4 GB/s).
//! - AMD (Zen 4 EPYC, AVX-512 tier, weights from RAM, alternating runs of one binary with the
//!   sites on and off): it costs up to a third. 1 thread: Q8_0 262144 x 640 (Gemma 3's output
//!   layer) 54.5 GFLOPS off against 38.0 on, Q5_0 78.6 / 60.0; 4096 x 4096 Q4_K 94.4 / 63.4,
//!   Q5_K 79.5 / 48.0, Q6_K 42.9 / 32.5; 2 threads Q4_K 124 / 79; from L3 off is as fast or
//!   faster (Q4_K 187 / 151).
//!
//! The plain-row kernels (the one-column K-quant tiles, Q4_1 / Q5_0 / Q5_1) read several rows
//! side by side, and there the prefetch pays on AMD too (the same Zen 4 forced to the AVX2
//! tier, 2 threads, from RAM: Q6_K 40.4 GFLOPS with it, 20.1 without; Q4_K 48.8 / 34.5); the
//! AVX2 tier's repacked Q4_0 / Q8_0 / Q5_0 measured mixed there (Q8_0 1 thread 36.8 / 31.1, 2
//! threads 57.5 / 64.2) and keeps it.
//!
//! The exception on AMD is Q6_K, the k-quant with the most work per byte: its one-row kernel
//! falls behind RAM without help, and a block 4 ahead fetched into L2 (not L1) pays (the same
//! Zen 4, from RAM, 1 thread 28-43 -> 52 GFLOPS, 2 threads 51 -> 91; Q2_K-Q5_K showed nothing
//! clear). It pays on Intel too, on top of the next block into L1 (Xeon, family 6 model 207,
//! 4096 x 4096 from RAM, alternating: 1 thread 24.4-25.3 -> 30.8-31.0 GFLOPS, 2 threads
//! 45.6-46.9 -> 56.1-56.7; from L2 / L3 1 thread 46-47 -> 56-62).
//!
//! The AVX2 tier's repacked k-quants prefetch on every CPU, and in their matrix-matrix products
//! too ([`Site::PackedK256`]; on Zen 5, 4096 x 4096 from L3, 1 thread: Q4_K N = 128 about 195
//! -> 268 GFLOPS, Q6_K 117 -> 176; matrix-vector from RAM Q6_K 24-25 -> 29-31 GB/s, Q4_K the
//! same within the noise).
//!
//! Zen 5 (family 26) differs for the AVX-512 tier's repacked k-quants: there the next block
//! into L1 pays ([`Site::KQuant512`]; EPYC, 2 vCPU, 4096 x 4096 from RAM, 1 thread,
//! alternating runs of one binary with the site on and off: Q4_K 62-91 -> 105-116 GFLOPS, Q5_K
//! 33-44 -> 91-98, Q6_K 80-82 either way; 2 threads Q5_K 87 -> 121-181, Q4_K 178-188 / 157-232;
//! from L3 the same or better; Llama-3.2-1B-shaped Q4_K_M generation 31.4-31.9 -> 34.4-39.4
//! tokens/s at 1 thread, 42.3-50.6 -> 45.9-68.1 at 2).
//!
//! So AMD's CPUs (and Hygon's, the same cores) leave the AVX-512 tier's repacked one-row
//! kernels to the hardware prefetchers ([`Site::Packed512`] off, [`Site::KQuant512`] off
//! before Zen 5) but for Q6_K's L2 prefetch ([`Site::Q6KL2`]), and every other site and CPU
//! prefetches, unless
//! `TESSERA_PREFETCH` says otherwise (for benchmarks):
//! `on` (every site), `off`, or a bit mask of the sites (decimal or `0x` hex). (The repacked F16 tiles'
//! prefetch is not a site: it serves several activation rows too, and pays on both: Zen 4,
//! N = 16, 1 thread, 110 against 74 GFLOPS without it.)

use std::sync::OnceLock;

/// Name of the environment variable that forces the prefetch sites on or off.
pub const PREFETCH_ENV: &str = "TESSERA_PREFETCH";

/// A kernel that prefetches weights ahead in its one-row path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Site {
    /// Repacked Q4_0 / Q8_0 / Q5_0 on the AVX-512 tier.
    Packed512 = 1,
    /// Repacked K-quants and IQ4_XS on the AVX-512 tier (the next group block; on AMD from
    /// Zen 5).
    KQuant512 = 2,
    /// The one-column K-quant tiles (plain rows; the AVX2 tier's only K-quant kernels).
    KQuantTile = 4,
    /// The Q4_1 / Q5_1 / Q5_0 one-row tiles (plain rows).
    Legacy = 8,
    /// Repacked Q4_0 / Q8_0 / Q5_0 / IQ4_NL / IQ4_XS on the AVX2 tier.
    Packed256 = 16,
    /// Repacked Q6_K on the AVX-512 tier: a block some blocks ahead into L2.
    Q6KL2 = 32,
    /// Repacked K-quants on the AVX2 tier (for any number of columns: their matrix-matrix
    /// products wait on the weights too, see `packed_k_avx2.rs`).
    PackedK256 = 64,
}

/// Every site.
const ALL: u32 = 127;

/// Every site with its name.
const SITES: [(Site, &str); 7] = [
    (Site::Packed512, "avx512-q4_0/q5_0/q8_0"),
    (Site::KQuant512, "avx512-k-quants"),
    (Site::Q6KL2, "avx512-q6_k-l2"),
    (Site::KQuantTile, "k-quant-rows"),
    (Site::Legacy, "q4_1/q5_0/q5_1-rows"),
    (Site::Packed256, "avx2-q4_0/q5_0/q8_0/iq4"),
    (Site::PackedK256, "avx2-k-quants"),
];

/// The sites and whether each prefetches on this CPU, for display (`tessera info`).
pub fn sites() -> Vec<(&'static str, bool)> {
    SITES.iter().map(|&(site, name)| (name, on(site))).collect()
}

/// Whether the one-row kernel of `site` prefetches on this CPU (see the module doc).
#[inline]
pub(crate) fn on(site: Site) -> bool {
    static MASK: OnceLock<u32> = OnceLock::new();
    let mask = *MASK.get_or_init(|| {
        let forced = std::env::var(PREFETCH_ENV).ok().and_then(|v| parse(&v));
        forced.unwrap_or_else(|| {
            default_mask(crate::features::x86_vendor(), crate::features::x86_family())
        })
    });
    mask & site as u32 != 0
}

/// cpuid's display family of AMD's Zen 5 cores, from which the AVX-512 tier's repacked
/// k-quants prefetch on AMD too.
const ZEN5_FAMILY: u32 = 26;

/// The sites on by default for a CPU of `vendor` (cpuid's vendor string) and `family` (its
/// display family).
fn default_mask(vendor: Option<&str>, family: Option<u32>) -> u32 {
    if !crate::features::is_amd_vendor(vendor) {
        ALL
    } else if family.is_some_and(|f| f >= ZEN5_FAMILY) {
        ALL & !(Site::Packed512 as u32)
    } else {
        ALL & !(Site::Packed512 as u32 | Site::KQuant512 as u32)
    }
}

/// `on`, `off` or a mask (decimal or `0x` hex); `None` for anything else.
fn parse(v: &str) -> Option<u32> {
    let v = v.trim().to_ascii_lowercase();
    match v.as_str() {
        "on" => Some(ALL),
        "off" => Some(0),
        _ => match v.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => v.parse().ok(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amd_cpus_leave_the_avx512_repacked_rows_to_the_hardware() {
        let intel = Site::Packed512 as u32
            | Site::KQuant512 as u32
            | Site::KQuantTile as u32
            | Site::Legacy as u32
            | Site::Packed256 as u32
            | Site::Q6KL2 as u32
            | Site::PackedK256 as u32;
        assert_eq!(default_mask(Some("GenuineIntel"), Some(6)), intel);
        let amd = Site::KQuantTile as u32
            | Site::Legacy as u32
            | Site::Packed256 as u32
            | Site::Q6KL2 as u32
            | Site::PackedK256 as u32;
        assert_eq!(default_mask(Some("AuthenticAMD"), Some(25)), amd);
        assert_eq!(default_mask(Some("HygonGenuine"), Some(24)), amd);
        assert_eq!(default_mask(Some("AuthenticAMD"), Some(26)), amd | Site::KQuant512 as u32);
        assert_eq!(default_mask(None, None), intel);
    }

    #[test]
    fn every_site_is_named_once() {
        let mask = SITES.iter().fold(0, |m, &(site, _)| {
            assert_eq!(m & site as u32, 0, "{site:?} twice");
            m | site as u32
        });
        assert_eq!(mask, ALL);
    }

    #[test]
    fn the_variable_takes_words_and_masks() {
        assert_eq!(parse(" On "), Some(ALL));
        assert_eq!(parse("off"), Some(0));
        assert_eq!(parse("0x3"), Some(3));
        assert_eq!(parse("12"), Some(12));
        assert_eq!(parse("sometimes"), None);
    }
}
