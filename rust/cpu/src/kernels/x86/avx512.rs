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
