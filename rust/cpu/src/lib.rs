//! Tessera's CPU device: feature detection, the scalar reference ops, SIMD kernels and the
//! backend.

pub mod features;
