//! The KV cache: per layer, the keys and values of every position processed so far, in
//! device memory that lasts across computes.
//!
//! Keys and values are F16, or Q8_0 / Q4_0 blocks of 32 values (llama.cpp's `cache_type_k` /
//! `cache_type_v`, [`CacheTypes`]): SET_ROWS quantizes each new row and FLASH_ATTN_EXT reads the
//! blocks. Per position and attention layer, Gemma 3 270M's 256 keys take 512 bytes in F16,
//! 272 in Q8_0 and 144 in Q4_0 ([`KvCache::bytes_per_token`]). The cache lives on the model's
//! device, whose kernels write and attend over every type (the GPU's included).
//!
//! Global-attention layers keep position `p` in cell `p` (up to the context size).
//! Sliding-window layers (Gemma 3) keep a ring of `n_swa + n_batch` cells (rounded up),
//! position `p` in cell `p mod size`: a query at `q` needs keys `q - n_swa < p <= q`, and a
//! batch of up to `n_batch` new positions only overwrites positions older than every query's
//! window, as llama.cpp's SWA cache does. The attention mask (built on the host per batch) sees
//! each cell's position: a cell is visible to a query at `q` when it holds a position `p <= q`
//! (and `q - p < n_swa` in a sliding-window layer); empty cells are masked.
//!
//! A graph attends over the first `n_kv` cells, `n_kv` rounded up to [`KV_PAD`] so that the
//! same graph serves many steps; masked cells cost the attention kernel almost nothing.
//!
//! A hybrid model's recurrent layers have no KV cache but a state ([`crate::recurrent`]), kept
//! here beside the attention layers' cache: cleared with it, and going back to a position
//! restores the state of a checkpoint at or before it ([`KvCache::truncate`]).

use crate::error::{LlmError, Result};
use crate::hparams::HParams;
use crate::recurrent::{LayerState, RecurrentState};
use std::sync::Arc;
use tessera_core::backend::{Buffer, BufferType, BufferUsage, Device};
use tessera_core::{DType, Layout, Storage};

/// Cells attended by a graph are a multiple of this (or the whole cache).
pub const KV_PAD: usize = 256;

/// `-inf` in F16.
pub(crate) const F16_NEG_INF: u16 = 0xfc00;

/// Where one attention layer's cache goes: the layer, its cache kind, K's layout and offset,
/// V's layout and offset.
type LayerPlace = (usize, usize, Layout, usize, Layout, usize);

/// The element types of the K and V caches (llama.cpp's `cache_type_k` / `cache_type_v`):
/// F16 (the default), Q8_0 or Q4_0 each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheTypes {
    /// The keys' type.
    pub k: DType,
    /// The values' type.
    pub v: DType,
}

impl Default for CacheTypes {
    fn default() -> CacheTypes {
        CacheTypes { k: DType::F16, v: DType::F16 }
    }
}

impl CacheTypes {
    /// The cache type named `name` (`f16`, `q8_0` or `q4_0`, any case: llama.cpp's names);
    /// [`LlmError::InvalidArgument`] naming the choices for any other.
    pub fn parse(name: &str) -> Result<DType> {
        match name.to_ascii_lowercase().as_str() {
            "f16" => Ok(DType::F16),
            "q8_0" => Ok(DType::Q8_0),
            "q4_0" => Ok(DType::Q4_0),
            _ => Err(LlmError::InvalidArgument(format!(
                "unknown KV cache type {name:?}: expected f16, q8_0 or q4_0"
            ))),
        }
    }

    /// Whether either type is a block type (Q8_0 or Q4_0).
    pub fn quantized(&self) -> bool {
        self.k.is_quantized() || self.v.is_quantized()
    }

    /// Checks that the types are cache types and that heads of `head_dim_k` keys and
    /// `head_dim_v` values are whole blocks of them.
    pub fn check(&self, head_dim_k: usize, head_dim_v: usize) -> Result<()> {
        for (t, which, dim) in [(self.k, "K", head_dim_k), (self.v, "V", head_dim_v)] {
            if !matches!(t, DType::F16 | DType::Q8_0 | DType::Q4_0) {
                return Err(LlmError::InvalidArgument(format!(
                    "KV cache type {t} for {which}: expected F16, Q8_0 or Q4_0"
                )));
            }
            if !dim.is_multiple_of(t.block_size()) {
                return Err(LlmError::InvalidArgument(format!(
                    "a {t} {which} cache needs heads of a multiple of {} values; this model's \
                     have {dim}",
                    t.block_size()
                )));
            }
        }
        Ok(())
    }
}

/// One kind of cache (global or sliding-window) shared by the layers of that kind.
#[derive(Clone, Debug)]
struct CacheKind {
    /// Cells per layer.
    size: usize,
    /// The window of a sliding-window cache.
    window: Option<usize>,
    /// The position held by each cell (`-1`: empty).
    pos: Vec<i64>,
}

/// Where one batch goes in one kind of cache.
#[derive(Clone, Debug, PartialEq)]
pub struct KindPlan {
    /// Cells the graph attends over (a multiple of [`KV_PAD`] or the whole cache).
    pub n_kv: usize,
    /// The cell of each new token.
    pub cells: Vec<i32>,
    /// The attention mask, F16 bits, `[n_kv, n_tokens]` (row per token).
    pub mask: Vec<u16>,
}

/// Where one batch goes in every kind of cache.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchPlan {
    /// The positions of the batch's tokens.
    pub positions: Vec<i32>,
    /// Per cache kind (0: global, 1: sliding window).
    pub kinds: Vec<KindPlan>,
}

/// The cache of every layer (see the module doc).
pub struct KvCache {
    kinds: Vec<CacheKind>,
    /// Per attention layer: its kind, and the K and V tensors' layouts and memory (`None` for
    /// a recurrent layer).
    layers: Vec<Option<LayerCache>>,
    /// The recurrent layers' states, when the model has some.
    recurrent: Option<RecurrentState>,
    /// Whether some layers attend over another layer's cache (their keys are not shifted
    /// here: see [`KvCache::can_shift`]).
    shared_kv: bool,
    n_past: usize,
    n_ctx: usize,
    types: CacheTypes,
    /// Bytes of the K and V memory.
    bytes: usize,
    _buffers: Vec<Arc<dyn Buffer>>,
}

/// One layer's cache tensors: K `[n_embd_k_gqa, size]` and V `[n_embd_v_gqa, size]`, of the
/// cache's [`CacheTypes`].
#[derive(Clone, Debug)]
pub struct LayerCache {
    /// Index of the layer's cache kind.
    pub kind: usize,
    /// Layout of K.
    pub k_layout: Layout,
    /// Memory of K.
    pub k: Storage,
    /// Layout of V.
    pub v_layout: Layout,
    /// Memory of V.
    pub v: Storage,
}

impl KvCache {
    /// A cache for `n_ctx` positions, batches of at most `n_batch` tokens, keys and values of
    /// `types`, in memory of `device`, zeroed.
    pub fn new(
        hp: &HParams,
        n_ctx: usize,
        n_batch: usize,
        types: CacheTypes,
        device: &Arc<dyn Device>,
    ) -> Result<KvCache> {
        if n_ctx == 0 || n_batch == 0 {
            return Err(LlmError::InvalidArgument(format!(
                "context {n_ctx} and batch {n_batch} must be at least 1"
            )));
        }
        types.check(hp.head_dim_k, hp.head_dim_v)?;
        types.check(hp.head_dim_k_swa, hp.head_dim_v_swa)?;
        let bt = device.buffer_type();
        let (kinds, plans, total) = Self::layout(hp, n_ctx, n_batch, types, bt.as_ref())?;
        let buffer = bt.alloc(total.max(1))?;
        buffer.set_usage(BufferUsage::Compute);
        buffer.clear(0)?;
        let mut layers = vec![None; hp.n_layer];
        for (il, kind, k_layout, k_off, v_layout, v_off) in plans {
            layers[il] = Some(LayerCache {
                kind,
                k_layout,
                k: Storage { buffer: buffer.clone(), offset: k_off },
                v_layout,
                v: Storage { buffer: buffer.clone(), offset: v_off },
            });
        }
        let recurrent = RecurrentState::new(hp, device)?;
        Ok(KvCache {
            kinds,
            layers,
            recurrent,
            shared_kv: hp.has_shared_kv() || !hp.arch.imp().can_shift(),
            n_past: 0,
            n_ctx,
            types,
            bytes: total,
            _buffers: vec![buffer],
        })
    }

    /// Bytes of device memory a cache for `n_ctx` positions and batches of at most `n_batch`
    /// tokens with keys and values of `types` takes on `device`: its K and V tensors and the recurrent layers' states, as
    /// [`KvCache::new`] allocates them (checkpoints of recurrent states, kept on the host, not
    /// counted). Nothing is allocated.
    pub fn required_bytes(
        hp: &HParams,
        n_ctx: usize,
        n_batch: usize,
        types: CacheTypes,
        device: &Arc<dyn Device>,
    ) -> Result<usize> {
        if n_ctx == 0 || n_batch == 0 {
            return Err(LlmError::InvalidArgument(format!(
                "context {n_ctx} and batch {n_batch} must be at least 1"
            )));
        }
        types.check(hp.head_dim_k, hp.head_dim_v)?;
        types.check(hp.head_dim_k_swa, hp.head_dim_v_swa)?;
        let bt = device.buffer_type();
        let (_, _, total) = Self::layout(hp, n_ctx, n_batch, types, bt.as_ref())?;
        let states = RecurrentState::required_bytes(hp, device)?;
        total
            .max(1)
            .checked_add(states)
            .ok_or_else(|| LlmError::InvalidArgument(format!("a context of {n_ctx} overflows")))
    }

    /// Bytes of device memory this cache holds: the sizes of its buffers (K and V of every
    /// attention layer, and the recurrent layers' states).
    pub fn memory_bytes(&self) -> usize {
        let kv: usize = self._buffers.iter().map(|b| b.size()).sum();
        kv + self.recurrent.as_ref().map_or(0, RecurrentState::memory_bytes)
    }

    /// The cache kinds, each attention layer's place (layer, kind, K layout and offset, V
    /// layout and offset) and the bytes of the one buffer that holds them all.
    fn layout(
        hp: &HParams,
        n_ctx: usize,
        n_batch: usize,
        types: CacheTypes,
        bt: &dyn BufferType,
    ) -> Result<(Vec<CacheKind>, Vec<LayerPlace>, usize)> {
        let mut kinds = vec![CacheKind { size: n_ctx, window: None, pos: vec![-1; n_ctx] }];
        let swa_kind = if (0..hp.n_layer).any(|il| hp.is_swa(il)) {
            let size = (hp.n_swa + n_batch).div_ceil(KV_PAD) * KV_PAD;
            let size = size.min(n_ctx);
            kinds.push(CacheKind { size, window: Some(hp.n_swa), pos: vec![-1; size] });
            Some(kinds.len() - 1)
        } else {
            None
        };
        let align = bt.alignment().max(1);
        let round = |n: usize| n.div_ceil(align) * align;
        let mut plans = Vec::with_capacity(hp.n_layer);
        let mut total = 0usize;
        // Layers that reuse a lower layer's cache (hp.kv_source) have none of their own.
        for il in (0..hp.n_layer_kv).filter(|&il| !hp.is_recurrent(il)) {
            let kind = if hp.is_swa(il) { swa_kind.unwrap_or(0) } else { 0 };
            let size = kinds[kind].size;
            let kl = Layout::contiguous(types.k, &[hp.n_embd_k_gqa_of(il), size])?;
            let vl = Layout::contiguous(types.v, &[hp.n_embd_v_gqa_of(il), size])?;
            let (k_off, k_len, v_len) =
                (total, round(bt.alloc_size(&kl)), round(bt.alloc_size(&vl)));
            total =
                total.checked_add(k_len).and_then(|t| t.checked_add(v_len)).ok_or_else(|| {
                    LlmError::InvalidArgument(format!("a context of {n_ctx} overflows"))
                })?;
            plans.push((il, kind, kl, k_off, vl, k_off + k_len));
        }
        Ok((kinds, plans, total))
    }

    /// The keys' and values' types.
    pub fn types(&self) -> CacheTypes {
        self.types
    }

    /// Bytes of K and V of one position over every attention layer (the rows SET_ROWS writes
    /// per token; a sliding-window layer's ring holds fewer positions than the context).
    pub fn bytes_per_token(&self) -> usize {
        self.layers.iter().flatten().map(|l| l.k_layout.nb[1] + l.v_layout.nb[1]).sum()
    }

    /// Bytes of the cache's K and V memory (every layer's cells, each tensor rounded up to the
    /// buffer type's alignment).
    pub fn kv_bytes(&self) -> usize {
        self.bytes
    }

    /// Positions processed so far.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// The context size.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Number of cache kinds (1, or 2 with sliding-window layers).
    pub fn n_kinds(&self) -> usize {
        self.kinds.len()
    }

    /// Attention layer `il`'s cache tensors (an error for a recurrent layer, which has none).
    pub fn layer(&self, il: usize) -> Result<&LayerCache> {
        self.layers.get(il).and_then(Option::as_ref).ok_or_else(|| {
            LlmError::InvalidArgument(format!(
                "layer {il} has no KV cache (not an attention layer)"
            ))
        })
    }

    /// Recurrent layer `il`'s state (an error for a layer that is not recurrent).
    pub fn state(&self, il: usize) -> Result<&LayerState> {
        self.recurrent
            .as_ref()
            .and_then(|r| r.layer(il))
            .ok_or_else(|| LlmError::InvalidArgument(format!("layer {il} has no recurrent state")))
    }

    /// Forgets every position (the KV memory is reused as is: every cell is masked until
    /// written again; recurrent states become zeros before the next compute).
    pub fn clear(&mut self) {
        for k in &mut self.kinds {
            k.pos.fill(-1);
        }
        self.n_past = 0;
        if let Some(r) = &mut self.recurrent {
            r.clear();
        }
    }

    /// Keeps the first `n` positions (at most those processed) and forgets the rest, so that a
    /// prompt sharing a prefix with what was processed only computes the rest; returns the
    /// positions kept. That is `n`, except: with recurrent layers, the position of the latest
    /// state checkpoint at or before `n` (their states cannot be rewound further); and 0 (the
    /// cache cleared) when a sliding-window ring has overwritten positions the window of the
    /// position kept needs.
    pub fn truncate(&mut self, n: usize) -> usize {
        let mut n = n.min(self.n_past);
        if n == self.n_past {
            return n;
        }
        if let Some(r) = &self.recurrent {
            n = r.restorable(n);
        }
        for k in &self.kinds {
            // The next query, at `n`, needs the positions after `n - w`: the ring holds the
            // last `size` processed (fewer after a session file was loaded into a smaller
            // ring, and a context shift may have left a gap after the kept prefix).
            if let Some(w) = k.window {
                let from = (n + 1).saturating_sub(w);
                if (from..n).any(|p| k.pos[p % k.size] != p as i64) {
                    self.clear();
                    return 0;
                }
            }
        }
        if let Some(r) = &mut self.recurrent {
            r.restore(n);
        }
        self.forget_from(n);
        n
    }

    /// Masks every cell of position `n` or later and makes `n` the next position.
    fn forget_from(&mut self, n: usize) {
        for k in &mut self.kinds {
            for p in &mut k.pos {
                if *p >= n as i64 {
                    *p = -1;
                }
            }
        }
        self.n_past = n;
    }

    /// Writes the recurrent states that clearing or going back decided (before a compute).
    pub fn sync(&mut self) -> Result<()> {
        match &mut self.recurrent {
            Some(r) => r.sync(),
            None => Ok(()),
        }
    }

    /// Records the recurrent states at the current position (a state checkpoint; nothing
    /// without recurrent layers).
    pub fn checkpoint(&mut self) -> Result<()> {
        match &mut self.recurrent {
            Some(r) => r.checkpoint(self.n_past),
            None => Ok(()),
        }
    }

    /// After a failed compute, which may have written some recurrent states: goes back to the
    /// latest checkpoint at or before the current position and returns the positions kept (the
    /// current position without recurrent layers: a failed batch's cells are not committed).
    pub fn recover(&mut self) -> usize {
        let Some(r) = &mut self.recurrent else { return self.n_past };
        let n = r.restore(self.n_past);
        self.forget_from(n);
        n
    }

    /// The positions of the recurrent states' checkpoints, in order (none without recurrent
    /// layers).
    pub fn checkpoints(&self) -> Vec<usize> {
        self.recurrent.as_ref().map(RecurrentState::checkpoint_positions).unwrap_or_default()
    }

    /// Where the next `n_tokens` positions go, with their masks; the cache is not changed
    /// until [`KvCache::commit`]. Errors when they do not fit in the context.
    pub fn plan(&self, n_tokens: usize) -> Result<BatchPlan> {
        if n_tokens == 0 {
            return Err(LlmError::EmptyInput("a batch of no tokens".into()));
        }
        let needed = self.n_past + n_tokens;
        if needed > self.n_ctx {
            return Err(LlmError::ContextFull { needed, used: self.n_past, n_ctx: self.n_ctx });
        }
        let positions: Vec<i32> = (self.n_past..needed).map(|p| p as i32).collect();
        let kinds = self.kinds.iter().map(|k| k.plan(&positions)).collect();
        Ok(BatchPlan { positions, kinds })
    }

    /// Records that `plan`'s tokens were written.
    pub fn commit(&mut self, plan: &BatchPlan) {
        for (k, kp) in self.kinds.iter_mut().zip(&plan.kinds) {
            for (&cell, &p) in kp.cells.iter().zip(&plan.positions) {
                k.pos[cell as usize] = i64::from(p);
            }
        }
        self.n_past += plan.positions.len();
    }
}

/// What a context shift ([`KvCache::shift_moves`]) does to one kind of cache: each moved
/// cell's rows go from `src` to `dst`, its keys rotated by `delta` positions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KindMoves {
    /// The cells read.
    pub src: Vec<i32>,
    /// The cell each one is written to.
    pub dst: Vec<i32>,
    /// The position delta of each (negative: the positions move down).
    pub delta: Vec<i32>,
}

/// Context shift (llama.cpp's `seq_rm` then `seq_add` on the cache, and its K-shift graph).
impl KvCache {
    /// Whether the cache can shift positions: not with recurrent layers, whose states hold
    /// every position processed and cannot drop some (llama.cpp: "memory cannot shift").
    ///
    /// Nor with layers attending over another layer's cache (Gemma 4): their sliding and
    /// global layers rotate by different rules (per-layer head sizes, the global layers'
    /// frequency factors), which the shift graph does not apply; such a cache refuses to shift.
    pub fn can_shift(&self) -> bool {
        self.recurrent.is_none() && !self.shared_kv
    }

    /// Plans discarding positions `n_keep .. n_keep + n_discard` and moving the later ones down
    /// by `n_discard`: per cache kind, the cells whose rows move (each position `p` lives in
    /// cell `p mod size`, so a moved position changes cell) and by how many positions their
    /// keys rotate. Nothing changes until [`KvCache::apply_shift`].
    pub(crate) fn shift_moves(&self, n_keep: usize, n_discard: usize) -> Result<Vec<KindMoves>> {
        if !self.can_shift() {
            return Err(LlmError::InvalidArgument(
                "a cache with recurrent or shared-KV layers cannot shift positions".into(),
            ));
        }
        if n_discard == 0 || n_keep.saturating_add(n_discard) > self.n_past {
            return Err(LlmError::InvalidArgument(format!(
                "a context shift keeping {n_keep} and discarding {n_discard} positions needs \
                 1 to {} discarded after the kept ones ({} positions in use)",
                self.n_past.saturating_sub(n_keep),
                self.n_past
            )));
        }
        Ok(self.kinds.iter().map(|k| k.shifted(n_keep, n_discard).1).collect())
    }

    /// Records the shift planned by [`KvCache::shift_moves`] (the rows must have been moved):
    /// positions `n_keep .. n_keep + n_discard` are forgotten and the later ones are
    /// `n_discard` lower.
    pub(crate) fn apply_shift(&mut self, n_keep: usize, n_discard: usize) {
        for k in &mut self.kinds {
            k.pos = k.shifted(n_keep, n_discard).0;
        }
        self.n_past -= n_discard;
    }
}

/// Cells from `cell` on, `count` of them: one contiguous range of a layer's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    cell: usize,
    count: usize,
}

/// The contiguous runs of cells that `positions` (ascending) occupy in a ring of `size`.
fn runs(positions: &[usize], size: usize) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for &p in positions {
        let cell = p % size;
        match out.last_mut() {
            Some(r) if r.cell + r.count == cell => r.count += 1,
            _ => out.push(Run { cell, count: 1 }),
        }
    }
    out
}

/// What a session file holds of a cache ([`crate::session_file`]).
impl KvCache {
    /// The positions held by cache kind `kind`, ascending.
    pub(crate) fn held_positions(&self, kind: usize) -> Vec<usize> {
        let mut held: Vec<usize> =
            self.kinds[kind].pos.iter().filter(|&&p| p >= 0).map(|&p| p as usize).collect();
        held.sort_unstable();
        held
    }

    /// The window of cache kind `kind` (`None` for the global kind).
    pub(crate) fn kind_window(&self, kind: usize) -> Option<usize> {
        self.kinds[kind].window
    }

    /// The cells per layer of cache kind `kind`.
    pub(crate) fn kind_size(&self, kind: usize) -> usize {
        self.kinds[kind].size
    }

    /// Bytes of one position's K row and V row in attention layer `il`.
    pub(crate) fn row_bytes(&self, il: usize) -> Result<(usize, usize)> {
        let l = self.layer(il)?;
        Ok((l.k_layout.nb[1], l.v_layout.nb[1]))
    }

    /// Appends to `out` the K rows, then the V rows, of `positions` (ascending, held by the
    /// layer's kind) in attention layer `il`.
    pub(crate) fn read_rows(
        &self,
        il: usize,
        positions: &[usize],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let l = self.layer(il)?;
        let size = self.kinds[l.kind].size;
        for (layout, storage) in [(&l.k_layout, &l.k), (&l.v_layout, &l.v)] {
            let row = layout.nb[1];
            for r in runs(positions, size) {
                let at = out.len();
                out.resize(at + r.count * row, 0);
                storage.buffer.read(storage.offset + r.cell * row, &mut out[at..])?;
            }
        }
        Ok(())
    }

    /// Writes the K rows, then the V rows, of `positions` (ascending) in attention layer `il`
    /// (`data` as [`KvCache::read_rows`] gives them; positions then held once
    /// [`KvCache::set_held`] says so).
    pub(crate) fn write_rows(&self, il: usize, positions: &[usize], data: &[u8]) -> Result<()> {
        let l = self.layer(il)?;
        let size = self.kinds[l.kind].size;
        let mut at = 0;
        for (layout, storage) in [(&l.k_layout, &l.k), (&l.v_layout, &l.v)] {
            let row = layout.nb[1];
            for r in runs(positions, size) {
                let bytes = data.get(at..at + r.count * row).ok_or_else(|| {
                    LlmError::InvalidArgument(format!("layer {il}: too few cache rows"))
                })?;
                storage.buffer.write(storage.offset + r.cell * row, bytes)?;
                at += r.count * row;
            }
        }
        Ok(())
    }

    /// Makes the cache hold `held[kind]` (ascending positions, each in cell `p mod size`) with
    /// `n_past` the next position; the rows must have been written.
    pub(crate) fn set_held(&mut self, n_past: usize, held: &[Vec<usize>]) {
        for (k, positions) in self.kinds.iter_mut().zip(held) {
            k.pos.fill(-1);
            for &p in positions {
                k.pos[p % k.size] = p as i64;
            }
        }
        self.n_past = n_past;
    }

    /// The recurrent layers' states, when the model has some.
    pub(crate) fn recurrent_mut(&mut self) -> Option<&mut RecurrentState> {
        self.recurrent.as_mut()
    }
}

impl CacheKind {
    /// The cells' positions after discarding `n_keep .. n_keep + n_discard` and moving the
    /// later positions down, and the moves of the rows that change cell. The positions before
    /// `n_keep` stay where they are; a moved position takes the cell of its new position (in
    /// a ring, a kept prefix position in that cell is overwritten: the moved one is nearer
    /// to every later query).
    fn shifted(&self, n_keep: usize, n_discard: usize) -> (Vec<i64>, KindMoves) {
        let (keep, end) = (n_keep as i64, (n_keep + n_discard) as i64);
        let mut pos = vec![-1i64; self.size];
        for &p in &self.pos {
            if p >= 0 && p < keep {
                pos[p as usize % self.size] = p;
            }
        }
        let mut moves = KindMoves::default();
        for (cell, &p) in self.pos.iter().enumerate() {
            if p >= end {
                let to = p - n_discard as i64;
                let dst = to as usize % self.size;
                pos[dst] = to;
                moves.src.push(cell as i32);
                moves.dst.push(dst as i32);
                moves.delta.push(-(n_discard as i32));
            }
        }
        (pos, moves)
    }

    fn plan(&self, positions: &[i32]) -> KindPlan {
        let cells: Vec<i32> = positions.iter().map(|&p| (p as usize % self.size) as i32).collect();
        let last = *positions.last().unwrap_or(&0) as usize;
        let n_kv = ((last + 1).div_ceil(KV_PAD) * KV_PAD).min(self.size);
        // The cells' positions once this batch is written.
        let mut pos = self.pos[..n_kv].to_vec();
        for (&c, &p) in cells.iter().zip(positions) {
            if (c as usize) < n_kv {
                pos[c as usize] = i64::from(p);
            }
        }
        let mut mask = Vec::with_capacity(n_kv * positions.len());
        for &q in positions {
            let q = i64::from(q);
            mask.extend(pos.iter().map(|&p| {
                let visible = p >= 0 && p <= q && self.window.is_none_or(|w| q - p < w as i64);
                if visible {
                    0
                } else {
                    F16_NEG_INF
                }
            }));
        }
        KindPlan { n_kv, cells, mask }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(size: usize, window: Option<usize>) -> CacheKind {
        CacheKind { size, window, pos: vec![-1; size] }
    }

    #[test]
    fn global_cells_follow_positions_and_mask_the_future() {
        let k = kind(1000, None);
        let plan = k.plan(&[0, 1, 2]);
        assert_eq!(plan.cells, vec![0, 1, 2]);
        assert_eq!(plan.n_kv, 256);
        let row = |i: usize| &plan.mask[i * 256..(i + 1) * 256];
        assert_eq!(&row(0)[..3], &[0, F16_NEG_INF, F16_NEG_INF]);
        assert_eq!(&row(2)[..4], &[0, 0, 0, F16_NEG_INF]);
        assert!(row(2)[3..].iter().all(|&m| m == F16_NEG_INF));
    }

    #[test]
    fn a_shift_moves_later_positions_down_into_their_cells() {
        // Global: positions 0..10, keep 2, discard 3: 5..10 go to cells 2..7.
        let mut k = kind(16, None);
        for p in 0..10 {
            k.pos[p] = p as i64;
        }
        let (pos, mv) = k.shifted(2, 3);
        assert_eq!(&pos[..8], &[0, 1, 2, 3, 4, 5, 6, -1]);
        assert!(pos[8..].iter().all(|&p| p == -1));
        assert_eq!(mv.src, vec![5, 6, 7, 8, 9]);
        assert_eq!(mv.dst, vec![2, 3, 4, 5, 6]);
        assert_eq!(mv.delta, vec![-3; 5]);
        // A ring of 8 holding 6..14 (cell p mod 8), keep 2, discard 5: 7..14 become 2..9 in
        // cells 2..7, 0; position 6 is dropped, the prefix was already overwritten.
        let mut r = kind(8, Some(4));
        for p in 6..14 {
            r.pos[p % 8] = p as i64;
        }
        let (pos, mv) = r.shifted(2, 5);
        assert_eq!(pos, vec![8, -1, 2, 3, 4, 5, 6, 7]);
        let moved: Vec<(i32, i32)> = mv.src.iter().copied().zip(mv.dst.iter().copied()).collect();
        assert_eq!(moved, vec![(0, 3), (1, 4), (2, 5), (3, 6), (4, 7), (5, 0), (7, 2)]);
        // Cell 6 (position 6, discarded) moves nowhere; the moved rows are read before any is
        // written, so the overlapping moves are safe.
        assert!(!mv.src.contains(&6));
    }

    #[test]
    fn going_back_after_a_shift_needs_every_position_of_the_window() {
        // A ring of 8, window 4, holding the prefix 0, 1 and positions 4..8, a shift having
        // left a gap at 2, 3: going back to 7 keeps it (its query sees 4..7); going back to 5
        // needs 2..5: cleared (the oldest position held, 0, would say otherwise).
        let mut r = kind(8, Some(4));
        r.pos = vec![0, 1, -1, -1, 4, 5, 6, 7];
        let mut cache = KvCache {
            kinds: vec![kind(16, None), r],
            layers: Vec::new(),
            recurrent: None,
            shared_kv: false,
            n_past: 8,
            n_ctx: 16,
            types: CacheTypes::default(),
            bytes: 0,
            _buffers: Vec::new(),
        };
        for p in 0..8 {
            cache.kinds[0].pos[p] = if (2..4).contains(&p) { -1 } else { p as i64 };
        }
        assert_eq!(cache.truncate(7), 7);
        assert_eq!(cache.truncate(5), 0);
        assert_eq!(cache.n_past(), 0);
    }

    #[test]
    fn runs_of_positions_split_where_the_ring_wraps() {
        assert_eq!(runs(&[0, 1, 2], 8), vec![Run { cell: 0, count: 3 }]);
        let wrapped = runs(&[5, 6, 7, 8, 9], 8);
        assert_eq!(wrapped, vec![Run { cell: 5, count: 3 }, Run { cell: 0, count: 2 }]);
        assert!(runs(&[], 8).is_empty());
    }

    #[test]
    fn sliding_window_ring_keeps_the_window_visible() {
        // Window 4, ring of 8 cells: positions 0..8 fill it, 8..10 overwrite cells 0, 1.
        let mut k = kind(8, Some(4));
        for p in 0..8 {
            k.pos[p] = p as i64;
        }
        let plan = k.plan(&[8, 9]);
        assert_eq!(plan.cells, vec![0, 1]);
        assert_eq!(plan.n_kv, 8);
        // Query 8 sees positions 5, 6, 7, 8 (cells 5, 6, 7, 0); query 9 sees 6..9.
        let vis =
            |i: usize| -> Vec<usize> { (0..8).filter(|&c| plan.mask[i * 8 + c] == 0).collect() };
        assert_eq!(vis(0), vec![0, 5, 6, 7]);
        assert_eq!(vis(1), vec![0, 1, 6, 7]);
    }
}
