//! The repacked weight layout ("CPU_REPACK"): Q4_0, IQ4_NL (Q4_0's block), Q5_0, Q8_0, (AVX-512
//! VNNI) Q4_1 / Q5_1 and k-quant rows (and F16 rows, below)
//! interleaved at upload, in groups of a few rows whose quants alternate in words of a few
//! bytes, so that one vector load holds a word of every row of the group and one instruction
//! multiplies all of them by an activation word.
//!
//! The group geometry is a [`PackLayout`] (rows per group, word bytes), chosen from the active
//! tier when a tensor is written ([`PackLayout::for_tier`]):
//!
//! | tier          | layout   | instruction                                          |
//! |---------------|----------|------------------------------------------------------|
//! | AVX-512 VNNI  | 16 x 4   | `vpdpbusd`: 16 rows x a broadcast 4-byte word        |
//! | AVX2          | 8 x 8    | `vpmaddubsw`: 4 rows x a broadcast 8-byte word       |
//! | NEON dotprod  | 4 x 4    | `sdot` by element: 4 rows x one 4-byte word          |
//! | NEON i8mm     | 4 x 8    | `smmla`: 2 rows x 2 activation rows of 8 bytes       |
//!
//! (NEON without dotprod has no repacked layout.) F16 weights (x86 tiers) have a group of
//! their own under every layout, [`F16_GROUP`]: 8 rows, each row's 16-value blocks in turn
//! (32-byte words), so that a matrix-vector product streams the weights sequentially.
//!
//! A group's block `b` follows block `b - 1`:
//! first the rows' header fields, field by field (Q4_0 / IQ4_NL / Q8_0: the `rows` f16 scales; Q5_0: the
//! scales, then the fifth bits as byte masks, see [`qh_to_masks`]; Q4_1: the scales, then the
//! minimums; Q5_1: the scales, the minimums, then the fifth bits as byte masks; IQ4_XS: the `d`,
//! the `scales_h`, then the 4 bytes of `scales_l`; Q4_K: the `d`,
//! the `dmin`, then byte `s` of every row's 12-byte `scales` for `s` in 0..12, also Q5_K's; Q6_K:
//! the `d`, then byte `s` of every row's 16 `scales`; Q3_K: the `d`, then its 12 `scales` bytes;
//! Q2_K: the `d`, the `dmin`, then its 16 `scales` bytes), then the quants in chunks `h`, each
//! holding bytes `word * h..word * (h + 1)` of the block's quants (`qs`; Q5_K's `qh` and `qs`;
//! Q6_K's `ql` and `qh`; Q3_K's `hmask` and `qs`) of every row. A group takes exactly the bytes
//! of its plain rows, so tensors keep their GGUF size and offsets. One exception: Q6_K in the
//! AVX2 tier's 8 x 8 layout stores its quants as whole 6-bit values in byte planes
//! (`q6_planes`), which its matrix-vector kernel unpacks with fewer operations.
//!
//! [`RepackBufferType`] allocates buffers whose `write` repacks whole weight tensors and whose
//! `read` returns the GGUF bytes again. Each buffer remembers how each of its tensors is stored
//! ([`RepackBuffer::packing`]); the CPU backend asks it for a MUL_MAT's weights and hands the
//! layout to the matmul driver, which runs the kernel of that layout ([`kernel_for`]).

mod buffer;
mod q6_planes;

pub use buffer::{RepackBuffer, RepackBufferType};

use super::blocks::{
    iq4_nl, iq4_xs, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0, F16_BYTES,
};
use super::{MatKernel, Tier};
use crate::buffer::HostBuffer;
use std::ptr::NonNull;
use std::sync::Arc;
use tessera_core::backend::{Buffer, BufferType};
use tessera_core::quant::blocks::{K_SCALE_SIZE, QK4_0, QK4_1, QK4_NL, QK5_0, QK5_1, QK8_0, QK_K};
use tessera_core::{DType, Error, Layout, Result};

/// Name of the repack buffer type.
pub const REPACK_NAME: &str = "CPU_REPACK";

/// Rows per group of the 16 x 4 layout that [`pack`] and [`unpack`] use (the largest group).
pub const GROUP: usize = 16;

/// The geometry of a repacked group: rows interleaved together and the bytes of the words
/// their quants alternate in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PackLayout {
    /// Rows per group; a repacked tensor's rows are a multiple of it.
    pub rows: usize,
    /// Bytes of one row's quants before the next row's (4 or 8).
    pub word: usize,
}

impl PackLayout {
    /// 16 rows x 4-byte words: the AVX-512 VNNI kernels (`vpdpbusd`).
    pub const R16W4: PackLayout = PackLayout { rows: 16, word: 4 };
    /// 8 rows x 8-byte words: the AVX2 kernels (ggml's `q4_0_8x8`).
    pub const R8W8: PackLayout = PackLayout { rows: 8, word: 8 };
    /// 4 rows x 4-byte words: the NEON dotprod kernels (`sdot` by element, ggml's `q4_0_4x4`).
    pub const R4W4: PackLayout = PackLayout { rows: 4, word: 4 };
    /// 4 rows x 8-byte words: the NEON i8mm kernels (`smmla`, ggml's `q4_0_4x8`).
    pub const R4W8: PackLayout = PackLayout { rows: 4, word: 8 };

    /// The layout the kernels of `tier` read, `None` for tiers without repacked kernels
    /// (scalar, NEON without dotprod).
    pub const fn for_tier(tier: Tier) -> Option<PackLayout> {
        match tier {
            Tier::Avx512Vnni => Some(PackLayout::R16W4),
            Tier::Avx2 => Some(PackLayout::R8W8),
            Tier::Dotprod => Some(PackLayout::R4W4),
            Tier::I8mm => Some(PackLayout::R4W8),
            Tier::Scalar | Tier::Neon => None,
        }
    }

    /// The tier whose kernels read this layout (`None` for a layout no tier reads).
    pub fn tier(self) -> Option<Tier> {
        Tier::ALL.into_iter().find(|&t| PackLayout::for_tier(t) == Some(self))
    }

    /// The layout of the active tier, if it has repacked kernels.
    pub fn active() -> Option<PackLayout> {
        PackLayout::for_tier(super::active_tier())
    }
}

/// The block geometry of a repackable type: values per block, block bytes, the per-row header
/// fields (offset, length) kept whole and stored field by field for the group's rows, the
/// quants (offset, length) interleaved in words, and the group geometry of types that use
/// their own under every layout.
struct Geometry {
    values: usize,
    size: usize,
    fields: &'static [(usize, usize)],
    quants: (usize, usize),
    /// The runs (offset from the quants' start, length) of each row's quants in the order the
    /// group stores them, each interleaved in words: [`WHOLE`] (the quants in one run), or
    /// Q6_K's halves of `ql` and `qh` in the order its kernel reads them.
    runs: &'static [(usize, usize)],
    own: Option<PackLayout>,
    /// Q5_0 / Q5_1: the rows' `qh` fields (the last field) are stored as byte masks
    /// ([`qh_to_masks`]).
    qh_masks: bool,
}

impl Geometry {
    /// The group geometry of this type in a tensor stored in `pl`.
    fn group(&self, pl: PackLayout) -> PackLayout {
        self.own.unwrap_or(pl)
    }
}

/// The group of repacked F16 weights under every layout: 8 rows, blocks of 16 values (32
/// bytes) of each row in turn, so that a matrix-vector product reads one sequential stream
/// (from RAM, 8 rows side by side read as 8 streams are about 20 % slower on x86).
pub const F16_GROUP: PackLayout = PackLayout { rows: 8, word: 32 };

/// The rows of one group of a tensor of `dtype` stored in `pl` (a repacked tensor's rows are a
/// multiple of it): the layout's rows, or the type's own group's ([`F16_GROUP`]).
pub fn group_rows(pl: PackLayout, dtype: DType) -> usize {
    geometry(dtype).map_or(pl.rows, |g| g.group(pl).rows)
}

/// The per-row header of a Q4_K block in a group: `d`, `dmin`, then each of the 12 scale bytes
/// on its own (byte-planar: byte `s` of the group's rows together), so that the kernel decodes
/// the 6-bit scales of all rows with byte-vector operations.
const Q4_K_FIELDS: [(usize, usize); 14] = {
    let mut f = [(0, F16_BYTES); 14];
    f[1] = (q4_k::DMIN, F16_BYTES);
    let mut s = 0;
    while s < K_SCALE_SIZE {
        f[2 + s] = (q4_k::SCALES + s, 1);
        s += 1;
    }
    f
};

/// The per-row header of a Q6_K block in a group: `d`, then each of the 16 signed scale bytes
/// on its own (byte-planar), so that the kernel converts the scales of all rows at once.
const Q6_K_FIELDS: [(usize, usize); 17] = {
    let mut f = [(q6_k::D, F16_BYTES); 17];
    let mut s = 0;
    while s < QK_K / 16 {
        f[1 + s] = (q6_k::SCALES + s, 1);
        s += 1;
    }
    f
};

/// The per-row header of a Q3_K block in a group: `d`, then each of the 12 packed scale bytes on
/// its own (byte-planar).
const Q3_K_FIELDS: [(usize, usize); 13] = {
    let mut f = [(q3_k::D, F16_BYTES); 13];
    let mut s = 0;
    while s < K_SCALE_SIZE {
        f[1 + s] = (q3_k::SCALES + s, 1);
        s += 1;
    }
    f
};

/// The per-row header of a Q2_K block in a group: `d`, `dmin`, then each of the 16 scale / min
/// bytes on its own (byte-planar).
const Q2_K_FIELDS: [(usize, usize); 18] = {
    let mut f = [(q2_k::D, F16_BYTES); 18];
    f[1] = (q2_k::DMIN, F16_BYTES);
    let mut s = 0;
    while s < QK_K / 16 {
        f[2 + s] = (q2_k::SCALES + s, 1);
        s += 1;
    }
    f
};

/// [`Geometry::runs`] of the types whose quants are stored in one run.
const WHOLE: &[(usize, usize)] = &[];

/// [`Geometry::runs`] of Q6_K: per half block (128 values), its 64 `ql` bytes then its 32 `qh`
/// bytes, so that the kernel reads each group block as one stream front to back (read as the
/// two streams of `ql` and `qh`, a one-row product streamed a third of Q4_K's bandwidth from
/// RAM).
const Q6_K_RUNS: &[(usize, usize)] = &[(0, 64), (128, 32), (64, 64), (160, 32)];

fn geometry(dtype: DType) -> Option<Geometry> {
    let quants = |at: usize, size: usize| (at, size - at);
    match dtype {
        DType::Q4_0 => Some(Geometry {
            values: QK4_0,
            size: q4_0::BYTES,
            fields: &[(0, F16_BYTES)],
            quants: quants(q4_0::QS, q4_0::BYTES),
            runs: WHOLE,
            own: None,
            qh_masks: false,
        }),
        // IQ4_NL has Q4_0's block: the scale, then 16 bytes of nibbles.
        DType::IQ4_NL => Some(Geometry {
            values: QK4_NL,
            size: iq4_nl::BYTES,
            fields: &[(0, F16_BYTES)],
            quants: quants(iq4_nl::QS, iq4_nl::BYTES),
            runs: WHOLE,
            own: None,
            qh_masks: false,
        }),
        // IQ4_XS: d, scales_h, scales_l, then 128 bytes of nibbles.
        DType::IQ4_XS => Some(Geometry {
            values: QK_K,
            size: iq4_xs::BYTES,
            fields: &[
                (0, F16_BYTES),
                (iq4_xs::SCALES_H, iq4_xs::SCALES_L - iq4_xs::SCALES_H),
                (iq4_xs::SCALES_L, iq4_xs::QS - iq4_xs::SCALES_L),
            ],
            quants: quants(iq4_xs::QS, iq4_xs::BYTES),
            runs: WHOLE,
            own: None,
            qh_masks: false,
        }),
        DType::Q5_0 => Some(Geometry {
            values: QK5_0,
            size: q5_0::BYTES,
            fields: &[(0, F16_BYTES), (q5_0::QH, q5_0::QS - q5_0::QH)],
            quants: quants(q5_0::QS, q5_0::BYTES),
            runs: WHOLE,
            own: None,
            qh_masks: true,
        }),
        DType::Q4_1 => Some(Geometry {
            values: QK4_1,
            size: q4_1::BYTES,
            fields: &[(0, F16_BYTES), (q4_1::M, F16_BYTES)],
            quants: quants(q4_1::QS, q4_1::BYTES),
            runs: WHOLE,
            own: None,
            qh_masks: false,
        }),
        DType::Q5_1 => Some(Geometry {
            values: QK5_1,
            size: q5_1::BYTES,
            fields: &[(0, F16_BYTES), (q5_1::M, F16_BYTES), (q5_1::QH, q5_1::QS - q5_1::QH)],
            quants: quants(q5_1::QS, q5_1::BYTES),
            runs: WHOLE,
            own: None,
            qh_masks: true,
        }),
        DType::Q8_0 => Some(Geometry {
            values: QK8_0,
            size: q8_0::BYTES,
            fields: &[(0, F16_BYTES)],
            quants: quants(q8_0::QS, q8_0::BYTES),
            runs: WHOLE,
            own: None,
            qh_masks: false,
        }),
        DType::F16 => Some(Geometry {
            values: F16_GROUP.word / F16_BYTES,
            size: F16_GROUP.word,
            fields: &[],
            quants: (0, F16_GROUP.word),
            runs: WHOLE,
            own: Some(F16_GROUP),
            qh_masks: false,
        }),
        DType::Q4_K => Some(Geometry {
            values: QK_K,
            size: q4_k::BYTES,
            fields: &Q4_K_FIELDS,
            quants: quants(q4_k::QS, q4_k::BYTES),
            runs: WHOLE,
            own: None,
            qh_masks: false,
        }),
        // Q4_K's header; the quants are `qh` then the nibbles (160 bytes).
        DType::Q5_K => Some(Geometry {
            values: QK_K,
            size: q5_k::BYTES,
            fields: &Q4_K_FIELDS,
            quants: quants(q5_k::QH, q5_k::BYTES),
            runs: WHOLE,
            own: None,
            qh_masks: false,
        }),
        // The quants are `hmask` then `qs` (96 bytes from the start of the block).
        DType::Q3_K => Some(Geometry {
            values: QK_K,
            size: q3_k::BYTES,
            fields: &Q3_K_FIELDS,
            quants: (q3_k::HMASK, q3_k::SCALES - q3_k::HMASK),
            runs: WHOLE,
            own: None,
            qh_masks: false,
        }),
        DType::Q2_K => Some(Geometry {
            values: QK_K,
            size: q2_k::BYTES,
            fields: &Q2_K_FIELDS,
            quants: (q2_k::QS, q2_k::D - q2_k::QS),
            runs: WHOLE,
            own: None,
            qh_masks: false,
        }),
        // The quants are `ql` then `qh` (192 bytes from the start of the block).
        DType::Q6_K => Some(Geometry {
            values: QK_K,
            size: q6_k::BYTES,
            fields: &Q6_K_FIELDS,
            quants: (q6_k::QL, q6_k::SCALES - q6_k::QL),
            runs: Q6_K_RUNS,
            own: None,
            qh_masks: false,
        }),
        _ => None,
    }
}

/// Whether a tensor of `layout` can be stored repacked under the active tier: Q4_0, IQ4_NL, Q5_0,
/// Q8_0, (AVX-512 VNNI) Q4_1 / Q5_1, a k-quant or F16 (rows of whole blocks; F16: of a multiple
/// of 16 values), contiguous, rows of every plane a multiple of the group, and the tier has
/// repacked kernels for the type (on ARM: Q4_0, Q8_0, IQ4_NL, Q4_K, Q5_K and Q6_K on dotprod and
/// i8mm).
pub fn can_repack(layout: &Layout) -> bool {
    PackLayout::active().is_some_and(|pl| can_repack_as(pl, layout))
}

/// Whether a tensor of `layout` can be stored in the layout `pl` (see [`can_repack`]).
pub fn can_repack_as(pl: PackLayout, layout: &Layout) -> bool {
    geometry(layout.dtype).is_some_and(|g| {
        layout.ne[0].is_multiple_of(g.values) && layout.ne[1].is_multiple_of(g.group(pl).rows)
    }) && layout.is_contiguous()
        && kernel_for(pl, layout.dtype).is_some()
}

/// The kernel that reads weights of `dtype` stored in `pl`, if the CPU runs it.
pub fn kernel_for(pl: PackLayout, dtype: DType) -> Option<MatKernel> {
    super::repacked_kernel_in(pl.tier()?, dtype)
}

fn check_len(
    pl: PackLayout,
    dtype: DType,
    k: usize,
    src: usize,
    dst: usize,
) -> Result<(usize, Geometry)> {
    let row = dtype.row_size(k)?;
    let Some(g) = geometry(dtype) else {
        return Err(Error::dtype(
            "repack",
            dtype,
            "only Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS, the k-quants and F16 are repacked",
        ));
    };
    let (qlen, gl) = (g.quants.1, g.group(pl));
    let group = row * gl.rows;
    if gl.rows == 0 || gl.word == 0 || !qlen.is_multiple_of(gl.word) {
        return Err(Error::InvalidArgument(format!("repack: bad layout {pl:?} for {dtype}")));
    }
    if !k.is_multiple_of(g.values) {
        return Err(Error::InvalidArgument(format!(
            "repack: rows of {k} {dtype} values are not whole blocks of {}",
            g.values
        )));
    }
    if src != dst || row == 0 || !src.is_multiple_of(group) {
        return Err(Error::DataLength {
            context: format!("repack of {dtype} rows of {k} values in groups of {}", gl.rows),
            expected: src.div_ceil(group.max(1)) * group,
            actual: dst,
        });
    }
    Ok((row, g))
}

/// Calls `f(plain_offset, packed_offset, len)` for every byte run of one group's block `b`.
fn block_map(
    g: &Geometry,
    pl: PackLayout,
    row: usize,
    b: usize,
    mut f: impl FnMut(usize, usize, usize),
) {
    let pl = g.group(pl);
    let mut o = b * g.size * pl.rows;
    for &(off, len) in g.fields {
        for r in 0..pl.rows {
            f(r * row + b * g.size + off, o, len);
            o += len;
        }
    }
    let (qoff, qlen) = g.quants;
    let whole = [(0, qlen)];
    let runs = if g.runs.is_empty() { &whole[..] } else { g.runs };
    for &(at, len) in runs {
        for h in 0..len / pl.word {
            for r in 0..pl.rows {
                f(r * row + b * g.size + qoff + at + pl.word * h, o, pl.word);
                o += pl.word;
            }
        }
    }
}

/// The bytes of block `b`'s `qh` fields (the last field, every row's) in a packed group.
fn qh_field(g: &Geometry, pl: PackLayout, b: usize) -> std::ops::Range<usize> {
    let rows = g.group(pl).rows;
    let (before, qh) = g.fields.split_at(g.fields.len() - 1);
    let start = b * g.size * rows + before.iter().map(|f| f.1).sum::<usize>() * rows;
    start..start + qh[0].1 * rows
}

/// The bytes of block `b`'s quants (every row's) in a packed group.
fn quants_region(g: &Geometry, pl: PackLayout, b: usize) -> std::ops::Range<usize> {
    let rows = g.group(pl).rows;
    let start = b * g.size * rows + g.fields.iter().map(|f| f.1).sum::<usize>() * rows;
    start..start + g.quants.1 * rows
}

/// Where bit `t` of row `r`'s 32 fifth bits goes among the masks of [`qh_to_masks`].
fn mask_bit(pl: PackLayout, r: usize, t: usize) -> usize {
    // Value t: high nibble (t >= 16) or low, in quant byte t % 16, which is byte t % 16 % word
    // of chunk t % 16 / word.
    let (half, byte) = (t / 16, t % 16);
    let (chunk, at) = (byte / pl.word, byte % pl.word);
    let chunks = 16 / pl.word;
    ((half * chunks + chunk) * pl.rows + r) * pl.word + at
}

/// Rewrites one packed block's `qh` fields (`rows` little-endian u32, bit `t` of row `r` the
/// fifth bit of its value `t`) as masks: for each half (low nibbles, then high) and chunk `h` of
/// quants, one bit per byte of the chunk as the kernel loads it (row by row, `word` bytes each),
/// so that a byte-masked move gives the fifth bits of every row at once.
fn qh_to_masks(pl: PackLayout, qh: &mut [u8]) {
    let src = qh.to_vec();
    qh.fill(0);
    for r in 0..pl.rows {
        let bits = u32::from_le_bytes([src[4 * r], src[4 * r + 1], src[4 * r + 2], src[4 * r + 3]]);
        for t in 0..32 {
            if bits >> t & 1 == 1 {
                let m = mask_bit(pl, r, t);
                qh[m / 8] |= 1 << (m % 8);
            }
        }
    }
}

/// Undoes [`qh_to_masks`].
fn masks_to_qh(pl: PackLayout, qh: &mut [u8]) {
    let src = qh.to_vec();
    for r in 0..pl.rows {
        let mut bits = 0u32;
        for t in 0..32 {
            let m = mask_bit(pl, r, t);
            bits |= u32::from(src[m / 8] >> (m % 8) & 1) << t;
        }
        qh[4 * r..4 * r + 4].copy_from_slice(&bits.to_le_bytes());
    }
}

/// Q5_0 / Q5_1: a copy of the packed group `sg` with its fifth bits back from masks as `qh`
/// fields ([`masks_to_qh`]), which [`block_map`] then copies out; `None` for the other types.
fn with_qh_fields(g: &Geometry, pl: PackLayout, k: usize, sg: &[u8]) -> Option<Vec<u8>> {
    g.qh_masks.then(|| {
        let mut copy = sg.to_vec();
        for b in 0..k / g.values {
            masks_to_qh(pl, &mut copy[qh_field(g, pl, b)]);
        }
        copy
    })
}

/// Repacks plain rows of `k` values of `dtype` (`src`, a whole number of groups of `pl`) into
/// `dst` (same length).
pub fn pack_as(pl: PackLayout, dtype: DType, k: usize, src: &[u8], dst: &mut [u8]) -> Result<()> {
    let (row, g) = check_len(pl, dtype, k, src.len(), dst.len())?;
    let group = row * g.group(pl).rows;
    for (sg, dg) in src.chunks_exact(group).zip(dst.chunks_exact_mut(group)) {
        for b in 0..k / g.values {
            block_map(&g, pl, row, b, |p, q, n| dg[q..q + n].copy_from_slice(&sg[p..p + n]));
            if g.qh_masks {
                let qh = qh_field(&g, pl, b);
                qh_to_masks(pl, &mut dg[qh]);
            }
            if q6_planes::applies(dtype, pl) {
                let at = |r: usize| r * row + b * g.size + g.quants.0;
                let quants = |r: usize| &sg[at(r)..at(r) + q6_planes::ROW_QUANTS];
                q6_planes::to_planes(quants, &mut dg[quants_region(&g, pl, b)]);
            }
        }
    }
    Ok(())
}

/// Undoes [`pack_as`]: the plain GGUF rows of `src` repacked in `pl`.
pub fn unpack_as(pl: PackLayout, dtype: DType, k: usize, src: &[u8], dst: &mut [u8]) -> Result<()> {
    let (row, g) = check_len(pl, dtype, k, src.len(), dst.len())?;
    let group = row * g.group(pl).rows;
    for (sg, dg) in src.chunks_exact(group).zip(dst.chunks_exact_mut(group)) {
        let restored = with_qh_fields(&g, pl, k, sg);
        let sg = restored.as_deref().unwrap_or(sg);
        for b in 0..k / g.values {
            block_map(&g, pl, row, b, |p, q, n| dg[p..p + n].copy_from_slice(&sg[q..q + n]));
            if q6_planes::applies(dtype, pl) {
                let region = quants_region(&g, pl, b);
                q6_planes::from_planes(&sg[region], 0..pl.rows, |r, quants| {
                    let at = r * row + b * g.size + g.quants.0;
                    dg[at..at + quants.len()].copy_from_slice(quants);
                });
            }
        }
    }
    Ok(())
}

/// Row `r` of a tensor of rows of `k` values of `dtype` repacked in `pl` (`src`, the whole
/// tensor or any whole number of its groups from the first), as plain GGUF bytes into `dst`
/// (one row): GET_ROWS on a repacked table (a tied output's embeddings, stored once). Only the
/// row's group is read; its bytes are copied out of it run by run ([`block_map`]), Q5_0 / Q5_1's
/// fifth bits from a copy of the group's masks.
pub fn unpack_row_as(
    pl: PackLayout,
    dtype: DType,
    k: usize,
    src: &[u8],
    r: usize,
    dst: &mut [u8],
) -> Result<()> {
    let row = dtype.row_size(k)?;
    let rows = group_rows(pl, dtype);
    let group = row.saturating_mul(rows);
    let start = (r / rows).saturating_mul(group);
    let Some(sg) = src.get(start..start.saturating_add(group)) else {
        return Err(Error::IndexOutOfRange {
            op: "repack".into(),
            reason: format!("row {r} of {dtype} rows of {k} values lies past {} bytes", src.len()),
        });
    };
    let (_, g) = check_len(pl, dtype, k, group, dst.len() * rows)?;
    let lane = r % rows;
    let (lo, hi) = (lane * row, lane * row + row);
    let restored = with_qh_fields(&g, pl, k, sg);
    let sg = restored.as_deref().unwrap_or(sg);
    for b in 0..k / g.values {
        block_map(&g, pl, row, b, |p, q, n| {
            if (lo..hi).contains(&p) {
                dst[p - lo..p - lo + n].copy_from_slice(&sg[q..q + n]);
            }
        });
        if q6_planes::applies(dtype, pl) {
            let region = quants_region(&g, pl, b);
            q6_planes::from_planes(&sg[region], lane..lane + 1, |_, quants| {
                let at = b * g.size + g.quants.0;
                dst[at..at + quants.len()].copy_from_slice(quants);
            });
        }
    }
    Ok(())
}

/// [`pack_as`] in the 16 x 4 layout ([`PackLayout::R16W4`]).
pub fn pack(dtype: DType, k: usize, src: &[u8], dst: &mut [u8]) -> Result<()> {
    pack_as(PackLayout::R16W4, dtype, k, src, dst)
}

/// [`unpack_as`] from the 16 x 4 layout ([`PackLayout::R16W4`]).
pub fn unpack(dtype: DType, k: usize, src: &[u8], dst: &mut [u8]) -> Result<()> {
    unpack_as(PackLayout::R16W4, dtype, k, src, dst)
}

/// What the bytes of a tensor in a [`RepackBuffer`] are ([`RepackBuffer::packing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    /// Plain GGUF bytes.
    Plain,
    /// Exactly a repacked tensor: of this type, in this layout.
    Packed(DType, PackLayout),
    /// Part of a repacked tensor (a view): its bytes are not GGUF's and no kernel reads them.
    Partial,
}

/// A repacked weight matrix outside any graph (benchmarks, tests), in its own CPU buffer
/// (huge pages like the weights of a graph); pass [`PackedWeights::weights`] to the matmul
/// driver.
#[derive(Debug)]
pub struct PackedWeights {
    mem: HostBuffer,
    layout: PackLayout,
}

impl PackedWeights {
    /// Repacks the plain bytes of a tensor of `layout` in the active tier's layout; `None`
    /// when it cannot be repacked.
    pub fn new(layout: &Layout, plain: &[u8]) -> Option<PackedWeights> {
        PackedWeights::new_as(PackLayout::active()?, layout, plain)
    }

    /// Repacks the plain bytes of a tensor of `layout` in `pl`; `None` when it cannot be
    /// stored so (see [`can_repack_as`]).
    pub fn new_as(pl: PackLayout, layout: &Layout, plain: &[u8]) -> Option<PackedWeights> {
        if !can_repack_as(pl, layout) || plain.len() != layout.nbytes() {
            return None;
        }
        let mut packed = PackedWeights { mem: HostBuffer::new(plain.len()).ok()?, layout: pl };
        pack_as(pl, layout.dtype, layout.ne[0], plain, packed.bytes_mut()).ok()?;
        Some(packed)
    }

    /// The repacked bytes.
    pub fn bytes(&self) -> &[u8] {
        let ptr = self.mem.host_ptr().unwrap_or(NonNull::dangling());
        // SAFETY: the buffer owns `size()` initialized bytes at its host pointer for as long
        // as `self` lives; they are only written through `bytes_mut`, which borrows `self`
        // mutably.
        unsafe { std::slice::from_raw_parts(ptr.as_ptr(), self.mem.size()) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let ptr = self.mem.host_ptr().unwrap_or(NonNull::dangling());
        // SAFETY: as in `bytes`, with `self` borrowed mutably so no other slice exists.
        unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), self.mem.size()) }
    }

    /// The layout the bytes are in.
    pub fn layout(&self) -> PackLayout {
        self.layout
    }

    /// The weights as a matmul operand of tensor layout `layout` (the one they were packed
    /// from): their bytes, marked as repacked in [`PackedWeights::layout`].
    pub fn weights(&self, layout: Layout) -> crate::matmul::TensorRef {
        crate::matmul::TensorRef::packed(layout, self.bytes().as_ptr(), self.layout)
    }

    /// A copy in a buffer of its own; `None` when out of memory.
    pub fn try_clone(&self) -> Option<PackedWeights> {
        let src = self.bytes();
        let mut copy = PackedWeights { mem: HostBuffer::new(src.len()).ok()?, layout: self.layout };
        copy.bytes_mut().copy_from_slice(src);
        Some(copy)
    }
}

/// The repacked bytes of a weight matrix for benchmarks, `None` when the active tier has no
/// repacked kernels for its type.
pub fn repack_for_bench(layout: &Layout, bytes: &[u8]) -> Option<PackedWeights> {
    PackedWeights::new(layout, bytes)
}

/// The repack buffer type of the active tier, `None` when the tier has no repacked kernels.
pub fn repack_buffer_type() -> Option<Arc<dyn BufferType>> {
    if super::repacked_kernel(DType::Q4_0).is_some() {
        Some(Arc::new(RepackBufferType))
    } else {
        None
    }
}
