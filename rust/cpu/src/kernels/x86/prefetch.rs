//! Software prefetch in the x86 one-row (matrix-vector) kernels, on or off per CPU vendor.
//!
//! A matrix-vector product reads every weight once and waits on RAM. The one-row kernels can
//! fetch the weights some blocks ahead with `prefetcht0` / `prefetcht1` on top of the hardware
//! prefetchers ([`Site`]). Whether that pays depends on the CPU's own prefetchers:
//!
//! - Intel (Xeons with AVX-512 and AMX): it pays, up to 1.5x from RAM.
//! - AMD (Zen 4, AVX-512 tier, weights from RAM): it costs up to a third; from L3 it is as fast
//!   or slower.
//!
//! The plain-row kernels (the one-column K-quant tiles, Q4_1 / Q5_0 / Q5_1) read several rows
//! side by side, and there the prefetch pays on AMD too; the AVX2 tier's repacked Q4_0 / Q8_0 /
//! Q5_0 measured mixed there and keeps it.
//!
//! The exception on AMD is Q6_K, the k-quant with the most work per byte: its one-row kernel
//! falls behind RAM without help, and a block 4 ahead fetched into L2 (not L1) pays, on Intel
//! too (on top of the next block into L1).
//!
//! The AVX2 tier's repacked k-quants prefetch on every CPU, and in their matrix-matrix products
//! too ([`Site::PackedK256`]).
//!
//! Zen 5 (family 26) differs for the AVX-512 tier's repacked k-quants: there the next block
//! into L1 pays ([`Site::KQuant512`]).
//!
//! The figures behind each of these choices (machines, shapes, GFLOPS and GB/s with and
//! without) are in docs/x86-measurements.md.
//!
//! So AMD's CPUs (and Hygon's, the same cores) leave the AVX-512 tier's repacked one-row
//! kernels to the hardware prefetchers ([`Site::Packed512`] off, [`Site::KQuant512`] off
//! before Zen 5) but for Q6_K's L2 prefetch ([`Site::Q6KL2`]), and every other site and CPU
//! prefetches, unless
//! `TESSERA_PREFETCH` says otherwise (for benchmarks):
//! `on` (every site), `off`, or a bit mask of the sites (decimal or `0x` hex). (The repacked F16 tiles'
//! prefetch is not a site: it serves several activation rows too, and pays on both.)

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
