//! The tier chosen on this CPU, that it ran, and that an unsupported tier is refused.
//!
//! `TESSERA_EXPECT_CPU` (set by scripts/qemu-test.sh for each qemu `-cpu` model) names the CPU:
//! `cortex-a53` expects the NEON tier, `cortex-a76` dotprod, `max` i8mm. On x86_64 the AVX2
//! tier (and AVX-512 VNNI where the CPU has it) is checked too. Every kernel that runs is checked
//! against the exact product within what its rounding explains ([`common::rounding_bound`]).

mod common;

use common::{exact_product, normwise_error, rand_vec, rounding_bound};
use tessera_core::{DType, Error, Layout};
use tessera_cpu::kernels::{self, Tier};
use tessera_cpu::matmul::{MatMul, TensorRef};
use tessera_cpu::CpuError;

/// Tests that force tiers or read the active tier take this lock (tests run in parallel).
static TIER_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    TIER_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs a matmul of `dtype` weights (13 x 5 x 256) with the kernel of `tier`, checks it against
/// the exact product within its rounding bound, and returns the tier that ran.
fn run_tier(tier: Tier, dtype: DType) -> Tier {
    let (m, n, k) = (13, 5, 256);
    let a = tessera_core::quant::quantize_to_vec(dtype, &rand_vec(m * k, 1)).unwrap();
    let x = rand_vec(n * k, 2);
    let b: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let al = Layout::contiguous(dtype, &[k, m]).unwrap();
    let bl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
    let dl = Layout::contiguous(DType::F32, &[m, n]).unwrap();
    let mut d = vec![0f32; m * n];
    let kern = kernels::matmul_kernel_in(tier, dtype).unwrap();
    let pool = tessera_cpu::team::Crew::new(1).unwrap();
    let before = kernels::tier_use_count(kern.tier);
    // SAFETY: buffers hold their layouts' bytes.
    unsafe {
        MatMul::new()
            .run_with(
                &kern,
                &pool,
                1,
                (dl, d.as_mut_ptr().cast()),
                TensorRef::plain(al, a.as_ptr()),
                TensorRef::plain(bl, b.as_ptr()),
                &|| false,
            )
            .unwrap();
    }
    assert!(kernels::tier_use_count(kern.tier) > before, "{} kernel did not run", kern.tier);
    let dq =
        |t: DType, v: &[u8], len: usize| tessera_core::quant::dequantize_to_vec(t, v, len).unwrap();
    let act = kernels::act_type(dtype);
    let xq = dq(act, &tessera_core::quant::quantize_to_vec(act, &x).unwrap(), n * k);
    let exact = exact_product(&dq(dtype, &a, m * k), &xq, k, m, n);
    let (e, bound) = (normwise_error(&d, &exact), rounding_bound(&kern, n, k));
    assert!(e <= bound, "{} {dtype}: error {e:.3e} > rounding bound {bound:.3e}", kern.tier);
    kern.tier
}

#[test]
fn expected_tier_is_chosen_and_runs() {
    let _guard = lock();
    let expect = std::env::var("TESSERA_EXPECT_CPU").unwrap_or_default();
    let want = match expect.as_str() {
        "cortex-a53" => Some(Tier::Neon),
        "cortex-a76" => Some(Tier::Dotprod),
        "max" => Some(Tier::I8mm),
        "" => None,
        other => panic!("unknown TESSERA_EXPECT_CPU {other:?}"),
    };
    if let Some(want) = want {
        assert_eq!(kernels::detected_tier(), want, "detected tier on {expect}");
        if std::env::var(kernels::TIER_ENV).is_err() {
            assert_eq!(kernels::active_tier(), want);
        }
        // Every ARM tier has its own kernels for these (i8mm's smmla ones).
        for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K] {
            assert_eq!(kernels::tier::tier_for_in(want, dtype), want, "{dtype} on {expect}");
            assert_eq!(run_tier(want, dtype), want);
        }
        // Q2_K and Q3_K have NEON and dotprod kernels (the i8mm tier uses dotprod's).
        for dtype in [DType::Q2_K, DType::Q3_K] {
            let own = want.min(Tier::Dotprod);
            assert_eq!(kernels::tier::tier_for_in(want, dtype), own, "{dtype} on {expect}");
            assert_eq!(run_tier(want, dtype), own);
        }
        // Every tier above the expected one is refused.
        for t in Tier::ALL {
            if t > want || (t != Tier::Scalar && t.fallback().is_some() && !t.is_supported()) {
                assert!(
                    refuses_tier(kernels::force_tier(t), t),
                    "{t} should be refused on {expect}"
                );
            }
        }
    }
}

/// The CPU feature list and `tessera info` name the tier of every k-quant, and it is a SIMD one.
#[test]
fn every_k_quant_is_reported_with_its_simd_tier() {
    let _guard = lock();
    let reported = kernels::tiers_by_type();
    for dtype in [DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K] {
        let got = reported.iter().find(|(t, _)| *t == dtype.name()).map(|(_, tier)| *tier);
        assert_eq!(got, Some(kernels::tier_name(dtype)), "{dtype}");
        assert_ne!(got, Some("scalar"), "{dtype}");
    }
}

/// Whether `r` is the CPU's refusal of tier `t` (`CpuError::TierUnsupported`, which reaches
/// tessera-core's callers as `Error::Unsupported` of the CPU, naming the tier).
fn refuses_tier(r: Result<(), Error>, t: Tier) -> bool {
    let want = Error::from(CpuError::TierUnsupported(t.name().into()));
    match (&r, &want) {
        (
            Err(Error::Unsupported { device, what }),
            Error::Unsupported { device: want_device, what: want_what },
        ) => device == want_device && what.starts_with(want_what.as_str()),
        _ => false,
    }
}

#[test]
fn forcing_an_unsupported_tier_is_refused() {
    let _guard = lock();
    let before = kernels::active_tier();
    for t in Tier::ALL {
        if !t.is_supported() {
            assert!(refuses_tier(kernels::force_tier(t), t), "{t}");
            assert!(refuses_tier(kernels::matmul_kernel_in(t, DType::Q4_0).map(|_| ()), t), "{t}");
            assert_eq!(kernels::active_tier(), before);
        }
    }
    // The other architecture's tiers are never supported.
    let foreign = if cfg!(target_arch = "x86_64") { Tier::Neon } else { Tier::Avx2 };
    assert!(!foreign.is_supported());
}

#[test]
fn forcing_a_supported_tier_works() {
    let _guard = lock();
    for t in Tier::ALL.into_iter().filter(|t| t.is_supported()) {
        kernels::force_tier(t).unwrap();
        assert_eq!(kernels::active_tier(), t);
        assert!(kernels::tier_for(DType::Q8_0) <= t);
        assert!(!kernels::tier_name(DType::Q4_K).is_empty());
    }
    kernels::reset_tier();
    assert_eq!(Tier::parse("AVX512").unwrap(), Tier::Avx512Vnni);
    assert!(Tier::parse("sse9").is_err());
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x86_tiers_run_and_match_exact() {
    assert!(Tier::Avx2.is_supported(), "every x86_64 CI machine has AVX2");
    let mut tiers = vec![Tier::Avx2];
    if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl") {
        assert!(Tier::Avx512Vnni.is_supported());
        assert_eq!(kernels::detected_tier(), Tier::Avx512Vnni);
        tiers.push(Tier::Avx512Vnni);
    }
    for tier in tiers {
        for dtype in [
            DType::Q8_0,
            DType::Q4_0,
            DType::Q4_K,
            DType::Q5_K,
            DType::Q6_K,
            DType::Q2_K,
            DType::Q3_K,
            DType::F32,
            DType::F16,
        ] {
            assert_eq!(run_tier(tier, dtype), tier, "{dtype} should have a {tier} kernel");
        }
    }
}
