//! The matmul driver: ggml's MUL_MAT on the CPU with the kernels of the active tier.
//!
//! `dst[.., n, m] = sum_k A[.., m, k] * B[.., n, k]`: `A` (src0) the weights of any supported
//! type, `B` (src1) F32 / F16 / BF16 activations (strided or not), `dst` F32 with dense rows;
//! dims 2 and 3 of `A` are broadcast over those of `B` as in ggml.
//!
//! 1. The activations are converted once per call to the weight type's activation format
//!    ([`crate::kernels::act_type`]: Q8_0, Q8_1, Q8_K or F32) into a work buffer reused across
//!    calls (F32 activations with dense rows are read in place when the format is F32).
//! 2. The output is cut into chunks of weight rows by activation rows, split into one
//!    contiguous range per thread ([`Ranges`]): each thread takes the chunks of its own range
//!    in order, then helps with the others' (fast and slow cores balance themselves, and each
//!    thread streams long runs of adjacent weight rows); the abort callback is polled between
//!    chunks.
//! 3. Inside a chunk the kernel's `mr x nr` tiles run rows-outer, so that a tile of weight rows
//!    is reused from L1 across every activation column of the chunk; a chunk's activation
//!    columns are sized to stay in L2. With one activation row (GEMV) the weights are streamed
//!    once, `mr` rows side by side.
//!
//! Every kernel computes a column of the result (one token) with the same sums in the same
//! order whatever the number of columns and threads (issue 38: the same logits whatever the
//! batch): the GEMV, the register tiles and their edges reduce each output over K alike.
//!
//! The one exception is opt-in ([`set_float_gemm`], `TESSERA_FLOAT_GEMM=1`; off by default):
//! from [`GEMM_MIN_N`] activation rows on (F16: [`F16_GEMM_MIN_N`]), F32, F16 and BF16 weights
//! on an x86 tier (F16 also repacked) then use the packed GEMM ([`crate::kernels::GemmFn`]),
//! whose outputs are sums over K in another order (a chain per output, the weight rows in the
//! lanes), so that a prompt's logits then depend on its batch size: the activations are packed
//! once per call in panels of `NR` rows (transposed), and the chunks (weight rows by panels,
//! taken in the same way) pack their weight rows per K-block into a per-thread scratch.
//!
//! Weights in a [`crate::kernels::repack`] buffer (rows interleaved in the layout of the tier
//! that wrote them) come with that layout ([`TensorRef::packed`], from the buffer that holds
//! them) and use its kernels (repacked F16 also the packed GEMM, which reads its groups).

mod convert;
mod split;

use crate::error::CpuError;
use crate::kernels::repack::PackLayout;
use crate::kernels::{self, MatKernel};
use crate::team::{Crew, Threads};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use tessera_core::shape_rules;
use tessera_core::{DType, Error, Layout, Op, Result};

/// An operand of the driver: a layout, the host address of its first byte and, for weights
/// stored repacked, their [`PackLayout`].
#[derive(Clone, Copy, Debug)]
pub struct TensorRef {
    /// Type, shape and byte strides.
    pub layout: Layout,
    /// Address of the first element.
    pub ptr: *const u8,
    /// The repacked layout of the bytes (weights in a `CPU_REPACK` buffer, see
    /// [`crate::kernels::repack`]); `None` for plain GGUF bytes.
    pub packed: Option<PackLayout>,
}

impl TensorRef {
    /// Plain bytes of `layout` at `ptr`.
    pub fn plain(layout: Layout, ptr: *const u8) -> TensorRef {
        TensorRef { layout, ptr, packed: None }
    }

    /// Weights of `layout` at `ptr` repacked in `pl`.
    pub fn packed(layout: Layout, ptr: *const u8, pl: PackLayout) -> TensorRef {
        TensorRef { layout, ptr, packed: Some(pl) }
    }
}

/// The driver's state kept across calls: the activation work buffers.
#[derive(Debug, Default)]
pub struct MatMul {
    work: Mutex<Vec<u64>>,
    panels: Mutex<Vec<f32>>,
}

/// Fewest activation rows for which F32 / BF16 weights use the packed GEMM (where it has one):
/// below it, the register-tile kernels stream the weights once and are faster (measured on
/// Zen 4, 4096 x 4096 F32, 64-byte aligned operands as in CPU buffers, 1 thread: N = 32 71 vs
/// 64 GFLOPS for the tiles, N = 48 67 vs 76 for the GEMM).
pub const GEMM_MIN_N: usize = 48;

/// Fewest activation rows for which F16 weights use the packed GEMM: converting the weights
/// once per K-block pays sooner than for F32 (the tiles convert them once per pass of columns;
/// measured on a Xeon with AVX-512, 4096 x 4096, repacked, 1 thread: N = 16 88 vs 80 GFLOPS for
/// the tiles, N = 24 89 vs 93 for the GEMM; on the AVX2 tier the GEMM leads from N = 16).
pub const F16_GEMM_MIN_N: usize = 24;

/// Fewest activation rows for which weights of `weight` use the packed GEMM (where the tier
/// has one for them).
pub fn gemm_min_n(weight: DType) -> usize {
    if weight == DType::F16 {
        F16_GEMM_MIN_N
    } else {
        GEMM_MIN_N
    }
}

/// Environment variable that turns the packed GEMM of F32 / F16 / BF16 weights on (`1`) at
/// start-up; [`set_float_gemm`] overrides it.
pub const FLOAT_GEMM_ENV: &str = "TESSERA_FLOAT_GEMM";

/// The packed GEMM switch: 0 not read yet, 1 off, 2 on.
static FLOAT_GEMM: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Turns the packed GEMM of F32 / F16 / BF16 weights on or off (process-wide). Off (the
/// default) every batch size runs the register tiles, whose columns are bit for bit the GEMV's;
/// on, prompts of [`gemm_min_n`] tokens or more run the packed GEMM, faster on x86 (up to about
/// 15 % at N = 24 to 48 where it takes over, measured in [`GEMM_MIN_N`]'s and
/// [`F16_GEMM_MIN_N`]'s notes) but with other rounding, so that logits depend on the batch.
pub fn set_float_gemm(on: bool) {
    FLOAT_GEMM.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// Whether the packed GEMM of F32 / F16 / BF16 weights is on ([`set_float_gemm`], else
/// [`FLOAT_GEMM_ENV`]).
pub fn float_gemm() -> bool {
    match FLOAT_GEMM.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var(FLOAT_GEMM_ENV).is_ok_and(|v| v == "1");
            let _ = FLOAT_GEMM.compare_exchange(
                0,
                if on { 2 } else { 1 },
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            FLOAT_GEMM.load(Ordering::Relaxed) == 2
        }
        v => v == 2,
    }
}

/// Weight types that use the packed GEMM (where the tier has one), F16 and BF16 converted while
/// packing.
const GEMM_WEIGHTS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// Whether the driver runs `kernel` with the packed GEMM (see [`kernels::GemmFn`]) for `n`
/// activation rows of `k` values (only when [`float_gemm`] is on).
pub fn uses_gemm(kernel: &MatKernel, n: usize, k: usize) -> bool {
    gemm_for(kernel, n, k).is_some()
}

fn gemm_for(kernel: &MatKernel, n: usize, k: usize) -> Option<split::Gemm> {
    if n < gemm_min_n(kernel.weight)
        || k == 0
        || !GEMM_WEIGHTS.contains(&kernel.weight)
        || !float_gemm()
    {
        return None;
    }
    let (run, mr, nr, kc) = kernels::gemm_kernel(kernel)?;
    Some(split::Gemm { run, mr, nr, kc })
}

/// The chunks split into one contiguous range per thread: each thread takes the chunks of its
/// own range in order (long runs of adjacent weight rows, which the hardware prefetchers
/// stream best), then helps with the others' ranges, so fast cores still take more.
struct Ranges {
    next: Vec<AtomicUsize>,
    ends: Vec<usize>,
}

impl Ranges {
    fn new(chunks: usize, parts: usize) -> Ranges {
        let bound = |r: usize| r * chunks / parts;
        Ranges {
            next: (0..parts).map(|r| AtomicUsize::new(bound(r))).collect(),
            ends: (1..=parts).map(bound).collect(),
        }
    }

    /// The next chunk for thread `me`: from its own range first, then from the others.
    fn claim(&self, me: usize) -> Option<usize> {
        let parts = self.ends.len();
        (0..parts).map(|d| (me + d) % parts).find_map(|r| {
            if self.next[r].load(Ordering::Relaxed) >= self.ends[r] {
                return None;
            }
            let c = self.next[r].fetch_add(1, Ordering::Relaxed);
            (c < self.ends[r]).then_some(c)
        })
    }
}

/// Runs `work(chunk, state)` for every chunk on the op's `threads`, each thread with its own
/// `state()`; the threads take chunks from their [`Ranges`] and poll `abort` between chunks.
/// Returns `false` when aborted.
pub(crate) fn parallel_chunks<S>(
    threads: &Threads<'_>,
    chunks: usize,
    abort: AbortFn<'_>,
    state: impl Fn() -> S + Sync,
    work: impl Fn(usize, &mut S) + Sync,
) -> bool {
    let failed = AtomicBool::new(false);
    let parts = threads.n().clamp(1, chunks.max(1));
    let ranges = Ranges::new(chunks, parts);
    threads.run(parts, &|me: usize| {
        let mut st = state();
        while let Some(c) = ranges.claim(me) {
            if failed.load(Ordering::Relaxed) {
                return;
            }
            if abort() {
                failed.store(true, Ordering::Relaxed);
                return;
            }
            work(c, &mut st);
        }
    });
    !failed.load(Ordering::Relaxed)
}

/// The abort poll: returns `true` to stop.
pub type AbortFn<'a> = &'a (dyn Fn() -> bool + Sync);

/// Runs `work(chunk)` for every chunk in `0..chunks` on the op's `threads` (see
/// [`parallel_chunks`]); the first error stops the others and is returned, `abort` gives
/// [`Error::Aborted`].
pub(crate) fn try_chunks(
    threads: &Threads<'_>,
    chunks: usize,
    abort: AbortFn<'_>,
    work: impl Fn(usize) -> Result<()> + Sync,
) -> Result<()> {
    let failed = AtomicBool::new(false);
    let first = std::sync::Mutex::new(None);
    let stop = || failed.load(Ordering::Relaxed) || abort();
    let done = parallel_chunks(
        threads,
        chunks,
        &stop,
        || (),
        |c, _| {
            if let Err(e) = work(c) {
                let mut f = first.lock().unwrap_or_else(|p| p.into_inner());
                f.get_or_insert(e);
                failed.store(true, Ordering::Relaxed);
            }
        },
    );
    match first.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None if !done => Err(Error::Aborted),
        None => Ok(()),
    }
}

/// A raw pointer that pool threads may share; every use writes disjoint bytes or only reads.
#[derive(Clone, Copy)]
pub(crate) struct SharedPtr(pub(crate) *mut u8);
// SAFETY: the pointed-to memory outlives the parallel section (joined before `run` returns),
// and threads write disjoint regions of it (rows of the work buffer, tiles of dst).
unsafe impl Send for SharedPtr {}
// SAFETY: as for `Send`.
unsafe impl Sync for SharedPtr {}

impl SharedPtr {
    /// The pointer (a method, so that closures capture the whole `Send` wrapper).
    pub(crate) fn get(self) -> *mut u8 {
        self.0
    }
}

/// Checks ggml's MUL_MAT rule (tessera-core's [`shape_rules::output_layout`]: types, shapes,
/// weight layout), then what the driver needs beyond it: an F32 destination of the result's
/// shape with dense rows, dense weight rows of whole blocks; returns (K, M, N).
fn check_shapes(dst: &Layout, a: &Layout, b: &Layout) -> Result<(usize, usize, usize)> {
    let bad = |why: &str| Error::InvalidArgument(format!("mul_mat: {why}"));
    let out = shape_rules::output_layout(&Op::MulMat, &[a, b])?;
    if out.is_none_or(|o| o.dtype != dst.dtype || o.ne != dst.ne) {
        return Err(bad(&format!("shapes {:?} x {:?} -> {:?} do not match", a.ne, b.ne, dst.ne)));
    }
    if dst.nb[0] != 4 || !dst.nb[1].is_multiple_of(4) {
        return Err(bad("dst must be F32 with dense rows"));
    }
    if a.nb[0] != a.dtype.type_size() {
        return Err(bad("weight rows must be dense"));
    }
    let (k, m, n) = (a.ne[0], a.ne[1], b.ne[1]);
    if !k.is_multiple_of(a.dtype.block_size()) {
        return Err(Error::BlockAlignment { dtype: a.dtype, n: k, block: a.dtype.block_size() });
    }
    Ok((k, m, n))
}

/// Whether the driver handles `dst = mul_mat(a, b)` with these layouts (ggml's MUL_MAT rules,
/// F32 dst with dense rows, weight rows dense, F32 / F16 / BF16 activations, a kernel for the
/// weight type); when it does not, the caller uses the reference op.
pub fn supports(dst: &Layout, a: &Layout, b: &Layout) -> bool {
    check_shapes(dst, a, b).is_ok() && kernels::matmul_kernel(a.dtype).is_ok()
}

/// The active tier's kernel for weights of `dtype`, repacked in `packed` when set.
pub(crate) fn kernel_for(dtype: DType, packed: Option<PackLayout>) -> Result<MatKernel> {
    Ok(match packed {
        None => kernels::matmul_kernel(dtype)?,
        Some(pl) => kernels::repack::kernel_for(pl, dtype)
            .ok_or_else(|| CpuError::TierUnsupported(format!("of repacked layout {pl:?}")))?,
    })
}

impl MatMul {
    /// A driver with an empty work buffer.
    pub fn new() -> MatMul {
        MatMul::default()
    }

    /// Computes `dst = mul_mat(a, b)` with the active tier's kernels on `threads` threads: the
    /// calling thread and helpers of `crew` (1: the calling thread alone); weights repacked in a
    /// layout (`a.packed`) with the kernels of that layout.
    ///
    /// # Safety
    ///
    /// Every pointer must point to memory holding its layout's bytes (`nbytes`), valid for the
    /// whole call, repacked in `a.packed` when it is set; `dst` must be writable and must not
    /// overlap `a` or `b`.
    pub unsafe fn run(
        &self,
        crew: &Crew,
        threads: usize,
        dst: (Layout, *mut u8),
        a: TensorRef,
        b: TensorRef,
        abort: AbortFn<'_>,
    ) -> Result<()> {
        // SAFETY: forwarded caller contract.
        crew.with_team(threads, |t| unsafe { self.run_on(t, dst, a, b, abort) })
    }

    /// As [`MatMul::run`] on `threads` (a graph compute's team, see [`crate::team`]).
    ///
    /// # Safety
    ///
    /// As [`MatMul::run`].
    pub unsafe fn run_on(
        &self,
        threads: &Threads<'_>,
        dst: (Layout, *mut u8),
        a: TensorRef,
        b: TensorRef,
        abort: AbortFn<'_>,
    ) -> Result<()> {
        let kernel = kernel_for(a.layout.dtype, a.packed)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.run_kernel(&kernel, threads, dst, a, b, abort) }
    }

    /// As [`MatMul::run`] with a given kernel (tests use it to compare tiers).
    ///
    /// # Safety
    ///
    /// As [`MatMul::run`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run_with(
        &self,
        kernel: &MatKernel,
        crew: &Crew,
        threads: usize,
        dst: (Layout, *mut u8),
        a: TensorRef,
        b: TensorRef,
        abort: AbortFn<'_>,
    ) -> Result<()> {
        // SAFETY: forwarded caller contract.
        crew.with_team(threads, |t| unsafe { self.run_kernel(kernel, t, dst, a, b, abort) })
    }

    /// The driver: as [`MatMul::run_with`] on `threads`.
    ///
    /// # Safety
    ///
    /// As [`MatMul::run`].
    unsafe fn run_kernel(
        &self,
        kernel: &MatKernel,
        threads: &Threads<'_>,
        dst: (Layout, *mut u8),
        a: TensorRef,
        b: TensorRef,
        abort: AbortFn<'_>,
    ) -> Result<()> {
        let (k, _, _) = check_shapes(&dst.0, &a.layout, &b.layout)?;
        if kernel.weight != a.layout.dtype {
            return Err(Error::InvalidArgument("mul_mat: kernel for another weight type".into()));
        }
        // SAFETY: forwarded caller contract; the shapes were checked above.
        unsafe { self.run_planned(kernel, threads, dst, a, b, k, abort) }
    }

    /// As [`MatMul::run_on`] with the kernel and the shared dimension `k` (`a`'s row length)
    /// chosen once, when a graph plan was made: no shape rule runs here.
    ///
    /// # Safety
    ///
    /// As [`MatMul::run`]; besides, the layouts passed [`supports`] and `kernel` is for `a`'s
    /// weight type (and its repacked layout, when it has one).
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn run_planned(
        &self,
        kernel: &MatKernel,
        threads: &Threads<'_>,
        dst: (Layout, *mut u8),
        a: TensorRef,
        b: TensorRef,
        k: usize,
        abort: AbortFn<'_>,
    ) -> Result<()> {
        let (dl, dp) = dst;
        let mut guard = self.work.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: forwarded caller contract (b's bytes are readable).
        let acts = unsafe { convert::activations(kernel, k, &b, &mut guard, threads)? };
        let dptr = SharedPtr(dp);
        let aptr = SharedPtr(a.ptr.cast_mut());
        let done = if let Some(g) = gemm_for(kernel, dl.ne[1], k) {
            let mut pguard = self.panels.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the activations are F32 rows with nb[0] == 4 (format F32).
            let panels = unsafe { convert::pack_panels(&acts, k, g.nr, &mut pguard, threads)? };
            let plan = split::GemmPlan::new(&g, &dl, &a.layout, &panels);
            let scratch = || vec![0f32; g.mr * g.kc + 16];
            parallel_chunks(threads, plan.chunks(), abort, scratch, |c, s| {
                // A 64-byte aligned start (16 f32 of slack).
                let off = s.as_ptr().align_offset(64).min(16);
                let sp = s[off..].as_mut_ptr();
                // SAFETY: the plan's chunks are disjoint blocks of dst within its layout; the
                // operands are valid per the caller's contract; the scratch holds mr * kc f32.
                unsafe { plan.run_chunk(c, &g, aptr.get(), &panels, dptr, sp) };
            })
        } else {
            let plan = split::Plan::new(kernel, &dl, &a.layout, &acts, threads.n());
            parallel_chunks(
                threads,
                plan.chunks(),
                abort,
                || (),
                |c, _| {
                    // SAFETY: the plan's chunks are disjoint tiles of dst within its layout; the
                    // operands are valid per the caller's contract.
                    unsafe { plan.run_chunk(c, kernel, aptr.get(), &acts, dptr) };
                },
            )
        };
        kernels::tier::note_used(kernel.tier);
        if !done {
            return Err(Error::Aborted);
        }
        Ok(())
    }
}

/// One-shot convenience: [`MatMul::run`] with a fresh work buffer.
///
/// # Safety
///
/// As [`MatMul::run`].
pub unsafe fn mul_mat(
    crew: &Crew,
    threads: usize,
    dst: (Layout, *mut u8),
    a: TensorRef,
    b: TensorRef,
    abort: AbortFn<'_>,
) -> Result<()> {
    // SAFETY: forwarded caller contract.
    unsafe { MatMul::new().run(crew, threads, dst, a, b, abort) }
}

#[cfg(test)]
mod tests {
    use super::{parallel_chunks, Ranges};
    use crate::team::Crew;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn ranges_give_each_chunk_once_own_range_first() {
        let r = Ranges::new(10, 3);
        // Thread 1 owns chunks 3..6 and takes them in order, then helps the others.
        let taken: Vec<usize> = std::iter::from_fn(|| r.claim(1)).collect();
        assert_eq!(taken, [3, 4, 5, 6, 7, 8, 9, 0, 1, 2]);
        assert_eq!(r.claim(0), None);
        let r = Ranges::new(7, 2);
        let mut all: Vec<usize> = Vec::new();
        for me in [0, 1, 1, 0, 0, 1, 1, 0, 1] {
            all.extend(r.claim(me));
        }
        assert_eq!(&all[..4], [0, 3, 4, 1]);
        all.sort_unstable();
        assert_eq!(all, (0..7).collect::<Vec<_>>());
        assert_eq!(Ranges::new(0, 1).claim(0), None);
    }

    /// The chunks of an op run once each whether the helpers run or not: with the helpers held
    /// (as if other processes had their cores) the calling thread takes every thread's range.
    #[test]
    fn every_chunk_runs_once_with_helpers_held_or_not() {
        let crew = Crew::new(3).unwrap();
        // Should the calling thread wait for the held helpers, they are let go after 10 s (and
        // the op is then slow, not hung).
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let crew = &crew;
        let watchdog = move || {
            if rx.recv_timeout(std::time::Duration::from_secs(10)).is_err() {
                crew.hold_helpers(false);
            }
        };
        std::thread::scope(|s| {
            s.spawn(watchdog);
            for held in [true, false, true] {
                crew.hold_helpers(held);
                crew.with_team(3, |t| {
                    for chunks in [1, 2, 3, 10, 100] {
                        let hits: Vec<AtomicU64> = (0..chunks).map(|_| AtomicU64::new(0)).collect();
                        let done = parallel_chunks(
                            t,
                            chunks,
                            &|| false,
                            || (),
                            |c, _| {
                                hits[c].fetch_add(1, Ordering::Relaxed);
                            },
                        );
                        assert!(done);
                        let hits: Vec<u64> = hits.into_iter().map(AtomicU64::into_inner).collect();
                        assert_eq!(hits, vec![1; chunks], "{chunks} chunks, helpers held: {held}");
                    }
                });
            }
            crew.hold_helpers(false);
            let _ = tx.send(());
        });
    }
}
