//! Steps 2 and 3 of the driver: the chunks of the output and the tiles inside a chunk.

use super::convert::{Acts, Panels};
use super::SharedPtr;
use crate::kernels::tier::Tier;
use crate::kernels::{GemmFn, MatKernel, Operands};
use tessera_core::Layout;

/// Activation bytes a chunk's columns may take (kept in L2 while its weight rows pass): large
/// for float activations, whose weights are costly to stream again.
const COL_BYTES_FLOAT: usize = 512 * 1024;
/// [`COL_BYTES_FLOAT`] for quantized activations on the AVX-512 VNNI tier (whose CPUs have 1 MB
/// of L2 and more): as large, so that each weight group is streamed once per 100-odd columns
/// instead of per 16-20; the repacked kernels measured up to 30 % faster at N = 128 and 512
/// (4096 x 4096, Zen 4, against 96 KB; Q6_K and Q8_0 most, Q4_K 4 % slower).
const COL_BYTES_QUANT_AVX512: usize = 512 * 1024;
/// [`COL_BYTES_FLOAT`] for quantized activations on the other tiers (phone and older x86 L2s
/// from 256 KB): small, as tuned before.
const COL_BYTES_QUANT: usize = 96 * 1024;
/// Chunks per thread aimed for, so that fast cores take more of them.
const CHUNKS_PER_THREAD_HINT: usize = 16;

/// The chunk grid both plans share: `rc` weight rows by one column chunk by one plane, with
/// the operands' plane strides and ggml's broadcast of the weights over dims 2 and 3.
struct Grid {
    k: usize,
    m: usize,
    n: usize,
    rc: usize,
    row_chunks: usize,
    col_chunks: usize,
    planes: [usize; 2],
    bcast: [usize; 2],
    a_nb: [usize; 4],
    d_nb: [usize; 4],
}

/// Where a chunk lies: weight rows `r0..r1`, its column chunk, and its plane.
struct Cell {
    r0: usize,
    r1: usize,
    cchunk: usize,
    plane: usize,
    i2: usize,
    i3: usize,
}

impl Grid {
    #[allow(clippy::too_many_arguments)]
    fn new(
        k: usize,
        m: usize,
        n: usize,
        rc: usize,
        col_chunks: usize,
        planes: [usize; 2],
        a: &Layout,
        dst: &Layout,
    ) -> Grid {
        Grid {
            k,
            m,
            n,
            rc,
            row_chunks: m.div_ceil(rc),
            col_chunks,
            planes,
            bcast: [planes[0] / a.ne[2], planes[1] / a.ne[3]],
            a_nb: a.nb,
            d_nb: dst.nb,
        }
    }

    fn chunks(&self) -> usize {
        self.row_chunks * self.col_chunks * self.planes[0] * self.planes[1]
    }

    fn locate(&self, c: usize) -> Cell {
        let rchunk = c % self.row_chunks;
        let rest = c / self.row_chunks;
        let plane = rest / self.col_chunks;
        Cell {
            r0: rchunk * self.rc,
            r1: ((rchunk + 1) * self.rc).min(self.m),
            cchunk: rest % self.col_chunks,
            plane,
            i2: plane % self.planes[0],
            i3: plane / self.planes[0],
        }
    }

    /// The first weight row and the first output element of `cell`'s plane.
    ///
    /// # Safety
    ///
    /// `a` and `dst` hold the plan's layouts.
    unsafe fn planes_of(&self, cell: &Cell, a: *mut u8, dst: SharedPtr) -> (*mut u8, *mut f32) {
        let a_off =
            (cell.i2 / self.bcast[0]) * self.a_nb[2] + (cell.i3 / self.bcast[1]) * self.a_nb[3];
        let d_off = cell.i2 * self.d_nb[2] + cell.i3 * self.d_nb[3];
        // SAFETY: plane indices are in range and the broadcast divides them as ggml does, so
        // both offsets stay within the operands (caller's contract).
        unsafe { (a.add(a_off), dst.get().add(d_off).cast::<f32>()) }
    }
}

/// How the output is cut into chunks.
pub(crate) struct Plan {
    grid: Grid,
    cc: usize,
}

impl Plan {
    pub(crate) fn new(
        kernel: &MatKernel,
        dst: &Layout,
        a: &Layout,
        acts: &Acts,
        threads: usize,
    ) -> Plan {
        let (k, m, n) = (a.ne[0], a.ne[1], acts.ne[1]);
        let per_col = acts.nb[1].max(1);
        let cc = if n <= kernel.nr {
            n
        } else {
            let budget = match (kernel.act.is_quantized(), kernel.tier) {
                (false, _) => COL_BYTES_FLOAT,
                (true, Tier::Avx512Vnni) => COL_BYTES_QUANT_AVX512,
                (true, _) => COL_BYTES_QUANT,
            };
            let fit = (budget / per_col).max(kernel.nr);
            let cc = (fit / kernel.nr * kernel.nr).min(n);
            // Even columns chunks: ceil(n / chunks), rounded up to the tile width.
            let chunks = n.div_ceil(cc);
            n.div_ceil(chunks).div_ceil(kernel.nr) * kernel.nr
        };
        let col_chunks = n.div_ceil(cc);
        let planes = [acts.ne[2], acts.ne[3]];
        // Chunks big enough that each thread streams long runs of weight rows (every jump to
        // a new chunk restarts the hardware prefetchers), enough of them to balance the load.
        let want = (CHUNKS_PER_THREAD_HINT * threads.max(1))
            .div_ceil(col_chunks * planes[0] * planes[1])
            .max(1);
        let rc = m.div_ceil(want).div_ceil(kernel.mr).max(1) * kernel.mr;
        let rc = rc.clamp(kernel.mr, 512.max(kernel.mr));
        Plan { grid: Grid::new(k, m, n, rc, col_chunks, planes, a, dst), cc }
    }

    pub(crate) fn chunks(&self) -> usize {
        self.grid.chunks()
    }

    /// Computes chunk `c`: its tiles, weight rows outer.
    ///
    /// # Safety
    ///
    /// The operands must be valid for the plan's layouts; chunks write disjoint parts of dst.
    pub(crate) unsafe fn run_chunk(
        &self,
        c: usize,
        kernel: &MatKernel,
        a: *mut u8,
        acts: &Acts,
        dst: SharedPtr,
    ) {
        let g = &self.grid;
        let cell = g.locate(c);
        let (r0, r1) = (cell.r0, cell.r1);
        let (c0, c1) = (cell.cchunk * self.cc, ((cell.cchunk + 1) * self.cc).min(g.n));
        let lda = g.a_nb[1];
        let ldb = acts.nb[1];
        let ldc = g.d_nb[1] / 4;
        // SAFETY: all offsets stay within the operands' layouts (the cell lies in the grid).
        unsafe {
            let (a_plane, d_plane) = g.planes_of(&cell, a, dst);
            let b_plane = acts.ptr.add(cell.i2 * acts.nb[2] + cell.i3 * acts.nb[3]);
            let mut i = r0;
            while i < r1 {
                let mr = kernel.mr.min(r1 - i);
                let mut j = c0;
                while j < c1 {
                    let nr = kernel.nr.min(c1 - j);
                    let o = Operands {
                        k: g.k,
                        a: a_plane.add(i * lda),
                        lda,
                        b: b_plane.add(j * ldb),
                        ldb,
                        c: d_plane.add(j * ldc + i),
                        ldc,
                    };
                    kernel.tile(o, mr, nr);
                    j += nr;
                }
                i += mr;
            }
        }
    }
}

/// Activation columns a packed-GEMM chunk may span (its K-block of panels, `KC x 256` f32,
/// stays in L2 while the chunk's weight panels pass).
const GEMM_COLS: usize = 256;
/// Chunks aimed for by the packed GEMM over the whole output.
const GEMM_CHUNKS: usize = 48;
/// Most weight rows in a packed-GEMM chunk.
const GEMM_MAX_ROWS: usize = 512;

/// The packed GEMM's function and tile sizes (see [`crate::kernels::gemm_kernel`]).
#[derive(Clone, Copy)]
pub(crate) struct Gemm {
    pub run: GemmFn,
    pub mr: usize,
    pub nr: usize,
    pub kc: usize,
}

/// How the output is cut into chunks for the packed GEMM: weight rows by activation panels
/// by planes.
pub(crate) struct GemmPlan {
    grid: Grid,
    pc: usize,
}

impl GemmPlan {
    pub(crate) fn new(g: &Gemm, dst: &Layout, a: &Layout, panels: &Panels) -> GemmPlan {
        let (k, m, n) = (a.ne[0], a.ne[1], dst.ne[1]);
        let np = panels.per_plane;
        let pc = np.min((GEMM_COLS / g.nr).max(1));
        let col_chunks = np.div_ceil(pc);
        let pc = np.div_ceil(col_chunks);
        let planes = [dst.ne[2], dst.ne[3]];
        let want = GEMM_CHUNKS.div_ceil(col_chunks * planes[0] * planes[1]).max(1);
        let rc = m.div_ceil(want).div_ceil(g.mr).max(1) * g.mr;
        let rc = rc.clamp(g.mr, GEMM_MAX_ROWS.max(g.mr));
        GemmPlan { grid: Grid::new(k, m, n, rc, col_chunks, planes, a, dst), pc }
    }

    pub(crate) fn chunks(&self) -> usize {
        self.grid.chunks()
    }

    /// Computes chunk `c` with the packed GEMM; `scratch` holds `mr * kc` f32.
    ///
    /// # Safety
    ///
    /// The operands must be valid for the plan's layouts and `panels` packed for `g.nr`;
    /// chunks write disjoint parts of dst.
    pub(crate) unsafe fn run_chunk(
        &self,
        c: usize,
        g: &Gemm,
        a: *mut u8,
        panels: &Panels,
        dst: SharedPtr,
        scratch: *mut f32,
    ) {
        let grid = &self.grid;
        let cell = grid.locate(c);
        let (r0, r1) = (cell.r0, cell.r1);
        let p0 = cell.cchunk * self.pc;
        let (c0, c1) = (p0 * g.nr, ((cell.cchunk + 1) * self.pc * g.nr).min(grid.n));
        let ldc = grid.d_nb[1] / 4;
        // SAFETY: all offsets stay within the operands' layouts and the packed panels (the
        // cell lies in the grid).
        unsafe {
            let (a_plane, d_plane) = grid.planes_of(&cell, a, dst);
            let b = panels.ptr.add((cell.plane * panels.per_plane + p0) * grid.k * g.nr);
            (g.run)(
                grid.k,
                a_plane.add(r0 * grid.a_nb[1]),
                grid.a_nb[1],
                b,
                d_plane.add(c0 * ldc + r0),
                ldc,
                r1 - r0,
                c1 - c0,
                scratch,
            );
        }
    }
}
