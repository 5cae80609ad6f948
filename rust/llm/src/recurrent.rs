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
use tessera_core::backend::{Buffer, BufferUsage, Device};
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
        if hp.conv_kernel < 2 || hp.conv_channels == 0 {
            return Err(LlmError::InvalidArgument(format!(
                "recurrent layers need a convolution of at least 2 taps over at least 1 channel \
                 (found {} taps, {} channels)",
                hp.conv_kernel, hp.conv_channels
            )));
        }
        let bt = device.buffer_type();
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
}
