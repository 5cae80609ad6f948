//! FLASH_ATTN_EXT on the CPU: online softmax over blocks of keys, without materializing the
//! attention matrix.
//!
//! Work is split into units of (batch `i3`, KV head, block of up to [`Q_BLOCK`] queries, range of
//! keys): every query head of a KV head's group and every query of the block share each block of
//! [`K_BLOCK`] keys and values, converted to F32 once. Key blocks that the mask hides from every
//! query of the unit are skipped (the causal half of a prompt, the empty cells of the cache).
//! Within a block, the scores of every (query, head) row against every key are one tiled product
//! ([`attn_tiles::scores_t`], with the rows in SIMD lanes when there are enough rows, else the
//! keys), stored key-major, their softmax step one pass across the rows
//! ([`attn_tiles::softmax_block`]) and the weighted values another product
//! ([`attn_tiles::weighted_sum_t`]). With the keys in the lanes (generation's few rows) the
//! scores come out row-major: their softmax runs along each row
//! ([`attn_tiles::softmax_rows`], the same bits) before the weights are transposed; keys and
//! values are converted a block at a time ([`vec::f16_rows_to_f32`]) while the next block's
//! rows are prefetched (they are strided through a cache that interleaves the heads). When there are fewer (query, KV head) units than threads
//! (generation: one query), the value columns are split between threads (each computes the
//! scores and softmax of every key, and the weighted values of its columns). A thread's buffer
//! for a block of converted keys and values is kept between calls.
//!
//! The same result whatever the batch, the threads or the cache (issue 38): in every unit the
//! blocks start at multiples of [`K_BLOCK`] keys from key 0 and each row runs the same online
//! softmax over them (its arithmetic independent of the other rows of its unit: a block that
//! hides every key of a row changes nothing for it, so skipping the block or computing it for
//! another row's sake gives the same bits); a score is the same chain of multiply-adds whether
//! the rows or the keys are in the lanes; a value column is the same chain whichever thread
//! computes it, at whatever offset (slices start at multiples of [`COL_ALIGN`]). Keys are
//! not split between threads, as merging partial softmaxes would round otherwise than one pass.
//!
//! Q8_0 and Q4_0 keys and values (quantized KV caches) are dequantized into that buffer, as F16
//! ones are converted, so every kernel tier scores and sums them with its F32 products. (ggml
//! instead quantizes each query to Q8_0 and takes integer dot products with the keys, which
//! rounds the queries as well; dequantizing keeps the queries exact.)
//!
//! Accumulation is in F32 (ggml's CPU kernel accumulates values in F16).

use crate::kernels::{attn_tiles, vec};
use crate::matmul::{try_chunks, AbortFn};
use crate::reference::HostTensor;
use crate::team::Threads;
use std::sync::Mutex;
use tessera_core::quant::{BlockQ4_0, BlockQ8_0, QK4_0, QK8_0};
use tessera_core::{AttnParams, DType, Error, Result};

/// Queries of one unit.
const Q_BLOCK: usize = 8;
/// Keys converted and scored together.
const K_BLOCK: usize = 64;
/// Value columns of a thread's slice start at multiples of this (a multiple of every tier's
/// register width, so a column is a vector lane, or a tail column, as in the whole row).
const COL_ALIGN: usize = 16;

thread_local! {
    /// A thread's buffer for a block of converted keys and values.
    static KV_SCRATCH: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// One query's softmax after the last block: sum of weights, weighted sum of values (of the
/// unit's value columns).
#[derive(Clone)]
struct Running {
    sum: f32,
    acc: Vec<f32>,
}

impl Running {
    /// The attention output (zeros when every key was hidden, as ggml).
    fn finish(&self, out: &mut [f32]) {
        let inv = if self.sum == 0.0 { 0.0 } else { 1.0 / self.sum };
        for (o, &a) in out.iter_mut().zip(&self.acc) {
            *o = a * inv;
        }
    }
}

/// The operands, with their geometry.
struct Attn {
    q: HostTensor,
    k: HostTensor,
    v: HostTensor,
    mask: Option<HostTensor>,
    dst: HostTensor,
    d: usize,
    dv: usize,
    n_q: usize,
    n_kv: usize,
    n_head: usize,
    group: usize,
    p: AttnParams,
}

/// One unit of work.
#[derive(Clone, Copy)]
struct Unit {
    i3: usize,
    hk: usize,
    q0: usize,
    q1: usize,
    /// Value columns `c0..c1` (all of them unless generation's are split between threads).
    c0: usize,
    c1: usize,
}

/// A unit with the softmax state of each of its query rows.
type UnitResult = (Unit, Vec<Running>);

/// Reads `n` elements of an F16, F32, Q8_0 or Q4_0 row at `ptr` into `out` as F32 (block types
/// dequantized to ggml's `dequantize_row_q8_0` / `_q4_0` values, `d * q` and `d * (q - 8)`;
/// `n` then a whole number of blocks).
///
/// # Safety
///
/// `ptr` must point to `n` readable elements of `dtype`.
unsafe fn read_f32(dtype: DType, ptr: *const u8, n: usize, out: &mut [f32]) {
    match dtype {
        DType::F16 => {
            // SAFETY: n F16 elements are readable at ptr (caller); u16 reads need 2-byte
            // alignment, which F16 tensors in host buffers have.
            let bits = unsafe { std::slice::from_raw_parts(ptr.cast::<u16>(), n) };
            vec::f16_to_f32(bits, &mut out[..n]);
        }
        DType::Q8_0 => {
            for (i, y) in out[..n].chunks_exact_mut(QK8_0).enumerate() {
                // SAFETY: n / 32 blocks are readable at ptr (caller: whole blocks, the rule's
                // dense rows of a block type); read_unaligned has no alignment requirement.
                let b = unsafe { ptr.cast::<BlockQ8_0>().add(i).read_unaligned() };
                let d = b.d.to_f32();
                for (o, &q) in y.iter_mut().zip(&b.qs) {
                    *o = d * f32::from(q);
                }
            }
        }
        DType::Q4_0 => {
            for (i, y) in out[..n].chunks_exact_mut(QK4_0).enumerate() {
                // SAFETY: as for Q8_0 above.
                let b = unsafe { ptr.cast::<BlockQ4_0>().add(i).read_unaligned() };
                let d = b.d.to_f32();
                let (lo, hi) = y.split_at_mut(QK4_0 / 2);
                for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&b.qs) {
                    *l = d * (f32::from(q & 0x0f) - 8.0);
                    *h = d * (f32::from(q >> 4) - 8.0);
                }
            }
        }
        _ => {
            // SAFETY: n F32 elements are readable at ptr (caller).
            let src = unsafe { std::slice::from_raw_parts(ptr.cast::<f32>(), n) };
            out[..n].copy_from_slice(src);
        }
    }
}

/// Reads `rows` rows of `t` (consecutive in its second dimension) from `ptr`, `n` elements of
/// each, into consecutive rows of `n` in `out` as F32 ([`read_f32`] per row; F16 rows in one
/// conversion call).
///
/// # Safety
///
/// `ptr` and the `rows - 1` rows after it (`t.layout.nb[1]` bytes apart) each hold `n` readable
/// elements of `t`'s type; F16 rows are 2-byte aligned.
unsafe fn read_rows_f32(t: &HostTensor, ptr: *const u8, rows: usize, n: usize, out: &mut [f32]) {
    let (dtype, stride) = (t.layout.dtype, t.layout.nb[1]);
    if rows == 0 || n == 0 {
        return;
    }
    if dtype == DType::F16 && stride.is_multiple_of(2) {
        // SAFETY: each row holds n readable, 2-byte aligned F16 values (caller).
        unsafe { vec::f16_rows_to_f32(ptr.cast::<u16>(), stride / 2, rows, n, out) };
        return;
    }
    for (j, o) in out.chunks_exact_mut(n).take(rows).enumerate() {
        // SAFETY: row j holds n readable elements (caller).
        unsafe { read_f32(dtype, ptr.wrapping_add(j * stride), n, o) };
    }
}

/// ALiBi slope of head `h` (1 without ALiBi), as ggml.
fn alibi_slope(max_bias: f32, h: usize, n_head: usize) -> f32 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    let n_head_log2 = 1usize << n_head.max(1).ilog2();
    let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    if h < n_head_log2 {
        m0.powi(h as i32 + 1)
    } else {
        m1.powi(2 * (h - n_head_log2) as i32 + 1)
    }
}

impl Attn {
    fn row(t: &HostTensor, i1: usize, i2: usize, i3: usize) -> *const u8 {
        let nb = &t.layout.nb;
        t.ptr.wrapping_add(i1 * nb[1] + i2 * nb[2] + i3 * nb[3]).cast_const()
    }

    /// Computes one unit: one running softmax per (query of the block, head of the group), of
    /// the unit's value columns.
    ///
    /// # Safety
    ///
    /// The operands' pointers are valid for reads of their layouts (the backend's contract).
    unsafe fn unit(&self, u: Unit, aborted: AbortFn<'_>) -> Result<Vec<Running>> {
        // `dv` here: the unit's value columns.
        let (d, dv, nq, g) = (self.d, u.c1 - u.c0, u.q1 - u.q0, self.group);
        // Row `qi * g + hi`: query `q0 + qi` of head `hk * g + hi`.
        let rows = nq * g;
        let head = |i: usize| u.hk * g + i % g;
        let mut qs = vec![0f32; rows * d];
        for i in 0..rows {
            let row = Self::row(&self.q, u.q0 + i / g, head(i), u.i3);
            // SAFETY: row (iq, h, i3) of q has d F32 values (validated layout).
            unsafe { read_f32(DType::F32, row, d, &mut qs[i * d..(i + 1) * d]) };
        }
        // Enough rows for the lanes: queries transposed (padding rows of zeros), keys
        // broadcast; otherwise the keys transposed into the lanes and the queries broadcast.
        // Either way each score is the same chain of multiply-adds over the dimensions in
        // order, so that a row's scores do not depend on how many rows its unit has.
        let lanes = rows >= vec::LANES;
        let r = if lanes { rows.next_multiple_of(vec::LANES) } else { rows };
        let mut qt = Vec::new();
        let (mut kt, mut st) = (Vec::new(), Vec::new());
        if lanes {
            qt = vec![0f32; d * r];
            attn_tiles::transpose(&qs, rows, d, &mut qt, r);
        } else {
            kt = vec![0f32; d * K_BLOCK];
            st = vec![0f32; rows * K_BLOCK];
        }
        let mut slopes = vec![0f32; r];
        for (i, s) in slopes.iter_mut().enumerate().take(rows) {
            *s = alibi_slope(self.p.max_bias, head(i), self.n_head);
        }
        let (mut max, mut sum) = (vec![f32::NEG_INFINITY; r], vec![0f32; r]);
        let mut rescale = vec![1f32; r];
        let mut acc = vec![0f32; rows * dv];
        // The converted keys and values of a block, in this thread's scratch (kept between
        // calls: generation runs one unit per layer and token).
        let mut scratch = KV_SCRATCH.take();
        if scratch.len() < K_BLOCK * (d + dv) {
            scratch.resize(K_BLOCK * (d + dv), 0.0);
        }
        let (kb, vb) = scratch.split_at_mut(K_BLOCK * d);
        let mut mask = vec![0f32; nq * K_BLOCK];
        // The mask key-major as the scores (padding rows see every key with bias 0), for the
        // lanes path only.
        let mut mask_t = if lanes { vec![0f32; K_BLOCK * r] } else { Vec::new() };
        // Scores of the block, key-major, then (in place) their softmax weights.
        let mut s = vec![0f32; K_BLOCK * r];
        // Blocks start at multiples of K_BLOCK from key 0, whatever the unit.
        let mut j0 = 0;
        while j0 < self.n_kv {
            let j1 = (j0 + K_BLOCK).min(self.n_kv);
            let nk = j1 - j0;
            if aborted() {
                return Err(Error::Aborted);
            }
            // The mask of this block for every query; skip the block when it hides it all.
            let mut any = self.mask.is_none();
            if let Some(m) = &self.mask {
                for (qi, iq) in (u.q0..u.q1).enumerate() {
                    let row = Self::row(m, iq, 0, 0).wrapping_add(j0 * m.layout.nb[0]);
                    let out = &mut mask[qi * nk..(qi + 1) * nk];
                    // SAFETY: mask row iq has n_kv elements from j0 (validated shape).
                    unsafe { read_f32(m.layout.dtype, row, nk, out) };
                    any |= out.iter().any(|&x| x != f32::NEG_INFINITY);
                }
            }
            if !any {
                j0 = j1;
                continue;
            }
            if lanes && self.mask.is_some() {
                for i in 0..rows {
                    let qi = i / g;
                    for j in 0..nk {
                        mask_t[j * r + i] = mask[qi * nk + j];
                    }
                }
            }
            // c0 is a multiple of V's block size (whole blocks for Q8_0 / Q4_0).
            let (k_type, v_type) = (self.k.layout.dtype, self.v.layout.dtype);
            let v_at = u.c0 / v_type.block_size() * v_type.type_size();
            let (kr, vr) = (
                Self::row(&self.k, j0, u.hk, u.i3),
                Self::row(&self.v, j0, u.hk, u.i3).wrapping_add(v_at),
            );
            // The next block's rows, strided through a cache shared by every head: the
            // hardware prefetchers alone leave their conversion waiting on memory.
            for j in j1..(j1 + K_BLOCK).min(self.n_kv) {
                let (kn, vn) =
                    (Self::row(&self.k, j, u.hk, u.i3), Self::row(&self.v, j, u.hk, u.i3));
                vec::prefetch_lines(kn, d / k_type.block_size() * k_type.type_size());
                vec::prefetch_lines(
                    vn.wrapping_add(v_at),
                    dv / v_type.block_size() * v_type.type_size(),
                );
            }
            // SAFETY: rows j0..j1 of k and v for head hk have d and self.dv elements
            // (validated), of which the unit reads v's columns c0..c1.
            unsafe {
                read_rows_f32(&self.k, kr, nk, d, &mut kb[..nk * d]);
                read_rows_f32(&self.v, vr, nk, dv, &mut vb[..nk * dv]);
            }
            let (kb, vb) = (&kb[..nk * d], &vb[..nk * dv]);
            let run =
                attn_tiles::RunningRows { max: &mut max, sum: &mut sum, rescale: &mut rescale };
            if lanes {
                let s = &mut s[..nk * r];
                attn_tiles::scores_t(&qt, r, kb, nk, d, s);
                let how = attn_tiles::Scoring {
                    scale: self.p.scale,
                    softcap: self.p.softcap,
                    bias: self
                        .mask
                        .is_some()
                        .then(|| attn_tiles::Bias { mask: &mask_t[..nk * r], slopes: &slopes }),
                };
                attn_tiles::softmax_block(s, r, nk, how, run);
            } else {
                // The keys in the lanes (padding keys of zeros), the scores and their softmax
                // row by row, then the weights key-major.
                let nkp = nk.next_multiple_of(vec::LANES);
                let kt = &mut kt[..d * nkp];
                attn_tiles::transpose(kb, nk, d, kt, nkp);
                for c in 0..d {
                    kt[c * nkp + nk..(c + 1) * nkp].fill(0.0);
                }
                let st = &mut st[..rows * nkp];
                attn_tiles::scores_t(kt, nkp, &qs, rows, d, st);
                let bias = self.mask.is_some().then(|| attn_tiles::RowBias {
                    mask: &mask[..nq * nk],
                    stride: nk,
                    group: g,
                    slopes: &slopes,
                });
                let how = (self.p.scale, self.p.softcap, bias);
                attn_tiles::softmax_rows(st, nkp, (rows, nk), how, run);
                // (Columns nk..nkp, past the block's keys, land in rows of s it does not use.)
                attn_tiles::transpose(st, rows, nkp, &mut s, r);
            }
            let s = &s[..nk * r];
            for (i, &c) in rescale.iter().enumerate().take(rows) {
                if c != 1.0 {
                    vec::scale(&mut acc[i * dv..(i + 1) * dv], c);
                }
            }
            attn_tiles::weighted_sum_t(&mut acc, rows, dv, s, r, vb, nk);
            j0 = j1;
        }
        KV_SCRATCH.set(scratch);
        let run = (0..rows)
            .map(|i| Running { sum: sum[i], acc: acc[i * dv..(i + 1) * dv].to_vec() })
            .collect();
        Ok(run)
    }
}

/// Why [`flash_attn_ext`] leaves a FLASH_ATTN_EXT to the reference (`None`: it takes it).
pub(super) fn flash_attn_ext_refusal(
    dst: &HostTensor,
    srcs: &[HostTensor],
) -> Option<&'static str> {
    let (q, k, v) = (&srcs[0], &srcs[1], &srcs[2]);
    // Block types are read as bytes (any alignment); F16 and F32 as elements.
    let dense = |t: &HostTensor| {
        let align = if t.layout.dtype.is_quantized() { 1 } else { t.layout.dtype.type_size() };
        t.layout.rows_contiguous() && (t.ptr as usize).is_multiple_of(align)
    };
    if q.layout.dtype != DType::F32 {
        Some("FLASH_ATTN_EXT: queries not F32")
    } else if !dense(q) || !dense(k) || !dense(v) || srcs.get(3).is_some_and(|m| !dense(m)) {
        Some("FLASH_ATTN_EXT: strided or unaligned rows")
    } else if !dst.layout.is_contiguous() {
        Some("FLASH_ATTN_EXT: a strided result")
    } else {
        None
    }
}

/// Computes FLASH_ATTN_EXT with the vectorized kernel; `None` when the layouts do not suit it
/// (the reference handles those).
///
/// # Safety
///
/// As [`crate::reference::compute_op`]: every pointer is valid for its layout's bytes during
/// the call and nobody else writes that memory (or touches `dst`) meanwhile; the operands were
/// validated for the op.
pub(super) unsafe fn flash_attn_ext(
    p: &AttnParams,
    dst: HostTensor,
    srcs: &[HostTensor],
    threads: &Threads<'_>,
    aborted: AbortFn<'_>,
) -> Option<Result<()>> {
    if flash_attn_ext_refusal(&dst, srcs).is_some() {
        return None;
    }
    let (q, k, v) = (srcs[0], srcs[1], srcs[2]);
    let mask = srcs.get(3).copied();
    let a = Attn {
        d: q.layout.ne[0],
        dv: v.layout.ne[0],
        n_q: q.layout.ne[1],
        n_kv: k.layout.ne[1],
        n_head: q.layout.ne[2],
        group: q.layout.ne[2] / k.layout.ne[2],
        q,
        k,
        v,
        mask,
        dst,
        p: *p,
    };
    let n_kv_heads = k.layout.ne[2];
    let mut units = Vec::new();
    let q_blocks = a.n_q.div_ceil(Q_BLOCK);
    let base = q.layout.ne[3] * n_kv_heads * q_blocks;
    // Fewer units than threads (generation): split the value columns, in slices of whole
    // multiples of COL_ALIGN (each thread computes every key's scores and softmax, and the
    // weighted values of its slice).
    // A slice of a quantized V starts at a block (Q8_0 / Q4_0: 32 values).
    let align = COL_ALIGN.max(v.layout.dtype.block_size());
    let splits =
        if base >= threads.n() { 1 } else { threads.n().div_ceil(base).min(a.dv / align).max(1) };
    let per_split = a.dv.div_ceil(splits).next_multiple_of(align);
    for i3 in 0..q.layout.ne[3] {
        for hk in 0..n_kv_heads {
            for b in 0..q_blocks {
                let (q0, q1) = (b * Q_BLOCK, ((b + 1) * Q_BLOCK).min(a.n_q));
                let mut c0 = 0;
                loop {
                    let c1 = (c0 + per_split).min(a.dv);
                    units.push(Unit { i3, hk, q0, q1, c0, c1 });
                    c0 = c1;
                    if c0 >= a.dv {
                        break;
                    }
                }
            }
        }
    }
    let run_unit = |u: &Unit| -> Result<UnitResult> {
        // SAFETY: forwarded caller contract.
        unsafe { a.unit(*u, aborted) }.map(|r| (*u, r))
    };
    let results: Result<Vec<UnitResult>> = if threads.n() > 1 && units.len() > 1 {
        let slots: Vec<Mutex<Option<UnitResult>>> =
            units.iter().map(|_| Mutex::new(None)).collect();
        try_chunks(threads, units.len(), aborted, |c| {
            let r = run_unit(&units[c])?;
            *slots[c].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            Ok(())
        })
        .and_then(|()| {
            slots
                .into_iter()
                .map(|m| {
                    m.into_inner().unwrap_or_else(|p| p.into_inner()).ok_or_else(|| {
                        Error::Backend {
                            backend: "CPU".into(),
                            message: "an attention unit was not computed".into(),
                        }
                    })
                })
                .collect()
        })
    } else {
        units.iter().map(run_unit).collect()
    };
    let results = match results {
        Ok(r) => r,
        Err(e) => return Some(Err(e)),
    };
    // Write each unit's value columns of its rows (every slice of a row has the same softmax).
    let mut out = vec![0f32; a.dv];
    for (u, run) in &results {
        let w = u.c1 - u.c0;
        for (qi, iq) in (u.q0..u.q1).enumerate() {
            for hi in 0..a.group {
                let h = u.hk * a.group + hi;
                run[qi * a.group + hi].finish(&mut out[..w]);
                let row = Attn::row(&a.dst, h, iq, u.i3).cast_mut().cast::<f32>();
                // SAFETY: dst is contiguous F32 [dv, n_head, n_q, ne3]; row (h, iq, i3) holds dv
                // values, of which columns c0..c1 are written only here.
                let row = unsafe { std::slice::from_raw_parts_mut(row.add(u.c0), w) };
                row.copy_from_slice(&out[..w]);
            }
        }
    }
    Some(Ok(()))
}
