//! The k-quant scale unpacking shared by the x86 and ARM kernels (each is inlined into the
//! kernel that calls it, under that kernel's target features).

/// The eight 6-bit scales and eight 6-bit mins of a Q4_K / Q5_K block from its 12 packed bytes
/// (ggml's `get_scale_min_k4`): scales and mins 0..4 are the low six bits of bytes 0..4 and
/// 4..8; scales and mins 4..8 take their low four bits from the nibbles of bytes 8..12 and
/// their high two bits from the top bits of bytes 0..4 and 4..8.
#[inline(always)]
pub(crate) fn scales_mins(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
    }
    for j in 4..8 {
        sc[j] = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        mn[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    (sc, mn)
}

/// The sixteen 6-bit scales of a Q3_K block from its 12 packed bytes, each plus 32 (as stored),
/// as 16 bytes in four little-endian words: the scale of group `g` is byte `g` (ggml's `kmask`
/// unpacking on 32-bit words: low nibbles from bytes 0..8, high two bits from bytes 8..12).
#[inline(always)]
pub(crate) fn q3_k_scale_words(packed: &[u8; 12]) -> [u32; 4] {
    let w = |i: usize| {
        u32::from_le_bytes([packed[4 * i], packed[4 * i + 1], packed[4 * i + 2], packed[4 * i + 3]])
    };
    let (a0, a1, tmp) = (w(0), w(1), w(2));
    let (m2, m4) = (0x0303_0303u32, 0x0f0f_0f0fu32);
    [
        (a0 & m4) | ((tmp & m2) << 4),
        (a1 & m4) | (((tmp >> 2) & m2) << 4),
        ((a0 >> 4) & m4) | (((tmp >> 4) & m2) << 4),
        ((a1 >> 4) & m4) | (((tmp >> 6) & m2) << 4),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ggml's `get_scale_min_k4`, written as it reads, value by value.
    fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
        if j < 4 {
            (q[j] & 63, q[j + 4] & 63)
        } else {
            ((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
        }
    }

    /// The Q3_K scale of group `g` as ggml's dequantizer reads it (without the - 32).
    fn q3_k_scale(packed: &[u8; 12], g: usize) -> u8 {
        let low = if g < 8 { packed[g] & 0x0f } else { packed[g - 8] >> 4 };
        let high = (packed[8 + g % 4] >> (2 * (g / 4))) & 3;
        low | (high << 4)
    }

    #[test]
    fn unpacking_matches_ggml_on_every_bit() {
        // Each byte of the 12 in turn all ones, then pseudo-random patterns.
        let mut cases: Vec<[u8; 12]> = (0..12)
            .map(|i| {
                let mut p = [0u8; 12];
                p[i] = 0xff;
                p
            })
            .collect();
        let mut s = 0x9e37_79b9u32;
        for _ in 0..64 {
            cases.push(std::array::from_fn(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                s as u8
            }));
        }
        for p in cases {
            let (sc, mn) = scales_mins(&p);
            for j in 0..8 {
                assert_eq!((sc[j], mn[j]), get_scale_min_k4(j, &p), "{p:?} {j}");
            }
            let words = q3_k_scale_words(&p);
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            for (g, &b) in bytes.iter().enumerate() {
                assert_eq!(b, q3_k_scale(&p, g), "{p:?} group {g}");
            }
        }
    }
}
