//! The recurrent state of a hybrid model's recurrent layers (LFM2's short convolutions, Qwen
//! 3.5's gated delta-nets), beside the KV cache of its attention layers: per recurrent layer, a
//! fixed-size F32 state in device memory that the graph reads at the start of every batch and
//! writes back at its end, so that it lasts across computes (llama.cpp's
//! `llama_memory_recurrent`, one sequence).
//!
//! A convolution state is the last `conv_kernel - 1` inputs of each channel: `[conv_kernel - 1,
//! channels]`, oldest first. A gated delta-net layer has a second state after it, its matrix
//! per value head: `[head_dim, head_dim, n_v_heads]` (llama.cpp's `s` beside `r`). A new
//! sequence starts from zeros ([`RecurrentState::clear`]).
//!
//! A state cannot be rewound token by token as the KV cache can, so prefix reuse works through
//! checkpoints, as llama.cpp's server does for these models: a host copy of every layer's state
//! at some position ([`RecurrentState::checkpoint`]; the context takes one before and after
//! every decode of several tokens, that is at the start and end of every prompt), the last
//! [`MAX_CHECKPOINTS`] kept. Going back to position `n` restores the latest checkpoint at or
//! before `n` ([`RecurrentState::restore`]); without one the sequence starts over.

use crate::error::{LlmError, Result};
use crate::hparams::HParams;
use std::sync::Arc;
use tessera_core::backend::{Buffer, BufferType, BufferUsage, Device};
use tessera_core::{DType, Layout, Storage};

/// Checkpoints kept (the oldest is dropped first).
pub const MAX_CHECKPOINTS: usize = 8;

/// One recurrent layer's state tensors.
#[derive(Clone, Debug)]
pub struct LayerState {
    /// F32 `[conv_kernel - 1, channels]`.
    pub conv_layout: Layout,
    /// Its memory.
    pub conv: Storage,
    /// A gated delta-net's matrices, F32 `[head_dim, head_dim, n_v_heads]`, and their memory
    /// (`None` in a short-convolution layer).
    pub delta: Option<(Layout, Storage)>,
}

/// The state of every layer at one position (host copy of the states' memory).
struct Checkpoint {
    pos: usize,
    bytes: Vec<u8>,
}

/// What the states' memory must be set to before the next compute reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    /// Nothing: the memory holds the states of the current position.
    None,
    /// Zeros (a new sequence).
    Zero,
    /// The last checkpoint's bytes.
    LastCheckpoint,
}

/// The layout of the states ([`RecurrentState::layout`]).
type StateLayout = (Layout, usize, Option<Layout>, usize, usize);

/// The recurrent layers' states (see the module doc).
pub struct RecurrentState {
    layers: Vec<Option<LayerState>>,
    buffer: Arc<dyn Buffer>,
    /// Bytes of the states in `buffer` (all of them, from offset 0).
    len: usize,
    checkpoints: Vec<Checkpoint>,
    /// Clearing and restoring only decide what the memory must hold; it is written before the
    /// next compute ([`RecurrentState::sync`]), where an error can be returned.
    pending: Pending,
}

impl RecurrentState {
    /// Zeroed states for the recurrent layers of `hp` in memory of `device`, or `None` when it
    /// has none.
    pub fn new(hp: &HParams, device: &Arc<dyn Device>) -> Result<Option<RecurrentState>> {
        if !hp.has_recurrent() {
            return Ok(None);
        }
        let bt = device.buffer_type();
        let (conv_layout, conv_size, delta_layout, size, len) = Self::layout(hp, bt.as_ref())?;
        let buffer = bt.alloc(len)?;
        buffer.set_usage(BufferUsage::Compute);
        buffer.clear(0)?;
        let mut offset = 0;
        let layers = (0..hp.n_layer)
            .map(|il| {
                hp.is_recurrent(il).then(|| {
                    let conv = Storage { buffer: buffer.clone(), offset };
                    let delta = delta_layout.map(|l| {
                        (l, Storage { buffer: buffer.clone(), offset: offset + conv_size })
                    });
                    offset += size;
                    LayerState { conv_layout, conv, delta }
                })
            })
            .collect();
        let checkpoints = Vec::new();
        Ok(Some(RecurrentState { layers, buffer, len, checkpoints, pending: Pending::None }))
    }

    /// Bytes of device memory the states of `hp`'s recurrent layers take on `device` (0 without
    /// recurrent layers), as [`RecurrentState::new`] allocates them. Nothing is allocated.
    pub fn required_bytes(hp: &HParams, device: &Arc<dyn Device>) -> Result<usize> {
        if !hp.has_recurrent() {
            return Ok(0);
        }
        Ok(Self::layout(hp, device.buffer_type().as_ref())?.4)
    }

    /// Bytes of device memory the states hold (their buffer's size).
    pub fn memory_bytes(&self) -> usize {
        self.buffer.size()
    }

    /// The convolution state's layout and aligned size, the delta-net state's layout, the
    /// aligned bytes per layer and the bytes of every layer's states.
    fn layout(hp: &HParams, bt: &dyn BufferType) -> Result<StateLayout> {
        if hp.conv_kernel < 2 || hp.conv_channels == 0 {
            return Err(LlmError::InvalidArgument(format!(
                "recurrent layers need a convolution of at least 2 taps over at least 1 channel \
                 (found {} taps, {} channels)",
                hp.conv_kernel, hp.conv_channels
            )));
        }
        let align = bt.alignment().max(1);
        let aligned = |l: &Layout| bt.alloc_size(l).div_ceil(align) * align;
        let conv_layout = Layout::contiguous(DType::F32, &[hp.conv_kernel - 1, hp.conv_channels])?;
        let delta_layout = hp
            .delta_net
            .map(|d| Layout::contiguous(DType::F32, &[d.head_dim, d.head_dim, d.n_v_heads]))
            .transpose()?;
        let conv_size = aligned(&conv_layout);
        let size = conv_size + delta_layout.as_ref().map_or(0, aligned);
        let n = hp.recurrent_layers.iter().filter(|&&r| r).count();
        let len = size
            .checked_mul(n)
            .ok_or_else(|| LlmError::InvalidArgument("recurrent states overflow".into()))?;
        Ok((conv_layout, conv_size, delta_layout, size, len))
    }

    /// Layer `il`'s state, `None` for a layer that is not recurrent.
    pub fn layer(&self, il: usize) -> Option<&LayerState> {
        self.layers.get(il).and_then(Option::as_ref)
    }

    /// Starts a new sequence: the states become zeros and the checkpoints are forgotten.
    pub fn clear(&mut self) {
        self.checkpoints.clear();
        self.pending = Pending::Zero;
    }

    /// Writes what clearing or restoring decided into the states' memory; the compute that
    /// reads them must come after.
    pub fn sync(&mut self) -> Result<()> {
        match self.pending {
            Pending::None => {}
            Pending::Zero => self.buffer.fill(0, self.len, 0)?,
            Pending::LastCheckpoint => {
                let c = self.checkpoints.last().ok_or_else(|| {
                    LlmError::InvalidArgument("no recurrent state checkpoint to restore".into())
                })?;
                self.buffer.write(0, &c.bytes)?;
            }
        }
        self.pending = Pending::None;
        Ok(())
    }

    /// Records the states as those of position `pos` (the positions before it processed),
    /// unless a checkpoint of `pos` exists; at position 0 the state is zero and needs none.
    pub fn checkpoint(&mut self, pos: usize) -> Result<()> {
        self.sync()?;
        if pos == 0 || self.checkpoints.iter().any(|c| c.pos == pos) {
            return Ok(());
        }
        let mut bytes = vec![0u8; self.len];
        self.buffer.read(0, &mut bytes)?;
        if self.checkpoints.len() == MAX_CHECKPOINTS {
            self.checkpoints.remove(0);
        }
        self.checkpoints.push(Checkpoint { pos, bytes });
        self.checkpoints.sort_by_key(|c| c.pos);
        Ok(())
    }

    /// The position of the latest checkpoint at or before `n` (0, the zero state, without one).
    pub fn restorable(&self, n: usize) -> usize {
        self.checkpoints.iter().rev().find(|c| c.pos <= n).map_or(0, |c| c.pos)
    }

    /// Goes back to the states of position [`RecurrentState::restorable`]`(n)` and returns it;
    /// checkpoints after it are forgotten (they belong to tokens that are gone).
    pub fn restore(&mut self, n: usize) -> usize {
        let pos = self.restorable(n);
        self.checkpoints.retain(|c| c.pos <= pos);
        self.pending = if pos == 0 { Pending::Zero } else { Pending::LastCheckpoint };
        pos
    }

    /// The positions checkpointed, in order.
    pub fn checkpoint_positions(&self) -> Vec<usize> {
        self.checkpoints.iter().map(|c| c.pos).collect()
    }
    /// Bytes of one layer's state (unpadded).
    pub fn layer_bytes(&self) -> usize {
        self.layers.iter().flatten().next().map_or(0, |l| l.conv_layout.nbytes())
    }

    /// Number of recurrent layers.
    pub fn n_layers(&self) -> usize {
        self.layers.iter().flatten().count()
    }

    /// The current states, every layer's bytes one after the other in layer order (no
    /// padding): what a session file holds.
    pub(crate) fn packed(&mut self) -> Result<Vec<u8>> {
        self.sync()?;
        let mut padded = vec![0u8; self.len];
        self.buffer.read(0, &mut padded)?;
        Ok(self.pack(&padded))
    }

    /// The checkpoints, as positions and packed states.
    pub(crate) fn packed_checkpoints(&self) -> Vec<(usize, Vec<u8>)> {
        self.checkpoints.iter().map(|c| (c.pos, self.pack(&c.bytes))).collect()
    }

    /// Sets the states and the checkpoints from packed states (as [`RecurrentState::packed`]
    /// gives them); each must be [`RecurrentState::layer_bytes`] times
    /// [`RecurrentState::n_layers`] bytes, the checkpoints' positions ascending and at most
    /// [`MAX_CHECKPOINTS`] (the newest kept).
    pub(crate) fn unpack(&mut self, state: &[u8], checkpoints: &[(usize, &[u8])]) -> Result<()> {
        let want = self.layer_bytes() * self.n_layers();
        let wrong = |n: usize| {
            LlmError::InvalidArgument(format!("recurrent state of {n} bytes, expected {want}"))
        };
        if state.len() != want {
            return Err(wrong(state.len()));
        }
        let mut restored = Vec::with_capacity(checkpoints.len().min(MAX_CHECKPOINTS));
        let skip = checkpoints.len().saturating_sub(MAX_CHECKPOINTS);
        for &(pos, bytes) in &checkpoints[skip..] {
            if bytes.len() != want {
                return Err(wrong(bytes.len()));
            }
            restored.push(Checkpoint { pos, bytes: self.unpack_padded(bytes) });
        }
        self.buffer.write(0, &self.unpack_padded(state))?;
        self.checkpoints = restored;
        self.pending = Pending::None;
        Ok(())
    }

    /// Each layer's bytes of `padded` (the buffer's layout), one after the other.
    fn pack(&self, padded: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.layer_bytes() * self.n_layers());
        for l in self.layers.iter().flatten() {
            out.extend_from_slice(&padded[l.conv.offset..l.conv.offset + l.conv_layout.nbytes()]);
        }
        out
    }

    /// The buffer's layout of packed states (padding zeroed).
    fn unpack_padded(&self, packed: &[u8]) -> Vec<u8> {
        let mut padded = vec![0u8; self.len];
        let n = self.layer_bytes();
        for (l, chunk) in self.layers.iter().flatten().zip(packed.chunks_exact(n.max(1))) {
            padded[l.conv.offset..l.conv.offset + n].copy_from_slice(chunk);
        }
        padded
    }
}
