//! The AVX-512 VNNI tier: the x86 kernels with `vpdpbusd` (on 256-bit registers, AVX-512 VL)
//! for the int8 dot products and 32 vector registers for larger tiles (see [`super::kern`]).
#![allow(clippy::incompatible_msrv)]

super::kern::x86_tier!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    true,
    (4, 4),
    (4, 4),
    (4, 2)
);

/// Repacked Q4_0 / Q8_0 weights (one group of eight rows, see [`crate::kernels::repack`]) times
/// `NR` activation rows in the "Q8_0 with sums" format: one `vpdpbusd` multiplies four quants
/// of all eight rows by a broadcast word of one activation row.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn packed<const NR: usize, const Q4: bool>(
    k: usize,
    a: *const u8,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    let bsz = if Q4 { 144 } else { 272 };
    let zp: i32 = if Q4 { 8 } else { 128 };
    let nib = _mm256_set1_epi8(0x0f);
    let flip = _mm256_set1_epi8(-128);
    let mut acc = [_mm256_setzero_ps(); NR];
    for blk in 0..k / 32 {
        let g = a.add(blk * bsz);
        let dw = _mm256_cvtph_ps(_mm_loadu_si128(g.cast()));
        let mut w = [_mm256_setzero_si256(); 8];
        if Q4 {
            for h in 0..4 {
                let q = _mm256_loadu_si256(g.add(16 + 32 * h).cast());
                w[h] = _mm256_and_si256(q, nib);
                w[4 + h] = _mm256_and_si256(_mm256_srli_epi16::<4>(q), nib);
            }
        } else {
            for (h, v) in w.iter_mut().enumerate() {
                *v = _mm256_xor_si256(_mm256_loadu_si256(g.add(16 + 32 * h).cast()), flip);
            }
        }
        for (j, acc_j) in acc.iter_mut().enumerate() {
            let p = b.add(j * ldb + blk * 36);
            let bd = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(
                std::ptr::read_unaligned(p.cast::<u16>()),
            ))));
            let sum = i32::from(std::ptr::read_unaligned(p.add(2).cast::<i16>()));
            let mut ai = _mm256_set1_epi32(-zp * sum);
            let q = p.add(4);
            for (h, wh) in w.iter().enumerate() {
                let bw = _mm256_set1_epi32(std::ptr::read_unaligned(q.add(4 * h).cast::<i32>()));
                ai = _mm256_dpbusd_epi32(ai, *wh, bw);
            }
            *acc_j = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(ai),
                _mm256_mul_ps(dw, _mm256_set1_ps(bd)),
                *acc_j,
            );
        }
    }
    for (j, acc_j) in acc.iter().enumerate() {
        _mm256_storeu_ps(c.add(j * ldc), *acc_j);
    }
}

macro_rules! packed_tile_fn {
    ($name:ident, $q4:expr) => {
        /// Tile kernel on repacked weights (see [`TileFn`]): `mr` is always 8 (a group).
        ///
        /// # Safety
        ///
        /// As [`TileFn`]; `a` points to a group of eight repacked rows.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            k: usize,
            a: *const u8,
            _lda: usize,
            b: *const u8,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
            mr: usize,
            nr: usize,
        ) {
            debug_assert_eq!(mr, 8);
            let mut j = 0;
            while j < nr {
                let (bp, cp) = (b.add(j * ldb), c.add(j * ldc));
                if nr - j >= 8 {
                    packed::<8, $q4>(k, a, bp, ldb, cp, ldc);
                    j += 8;
                } else if nr - j >= 4 {
                    packed::<4, $q4>(k, a, bp, ldb, cp, ldc);
                    j += 4;
                } else {
                    packed::<1, $q4>(k, a, bp, ldb, cp, ldc);
                    j += 1;
                }
            }
        }
    };
}

packed_tile_fn!(packed_q4_0, true);
packed_tile_fn!(packed_q8_0, false);

/// The kernel for repacked weights of `wt`, with its tile size (8 rows, 8 columns).
pub(super) fn packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    match wt {
        DType::Q4_0 => Some((packed_q4_0 as TileFn, 8, 8)),
        DType::Q8_0 => Some((packed_q8_0 as TileFn, 8, 8)),
        _ => None,
    }
}
