//! A model's sequences: several conversations over one loaded model (llama.rn's parallel slots,
//! llama.cpp server's `id_slot`), each a [`Context`] of its own (its KV cache, recurrent states,
//! position and scheduler) over the shared weights.
//!
//! The number is fixed at load (`nSequences`, 1 to [`MAX_SEQUENCES`]), and so is the memory
//! they may take: `nSequences` times the cache of one sequence must fit the model's memory
//! budget (`memoryBudget`, else [`crate::session::DEFAULT_BUDGET_PERCENT`] of the free memory
//! once the weights are placed: the CPU's, or for a GPU model the host's, since wgpu reports no
//! heap sizes), or the load fails with `OutOfMemory` naming the figures. Sequence 0's context is made at load, the others on their first use, so an unused
//! sequence costs no memory.
//!
//! Each sequence has its own lock: calls on one sequence run one at a time, in call order;
//! generations on different sequences run at the same time, each on its own scheduler (as a
//! generation and an embedding of one model already do: the weights are only read).

use crate::error::{FfiResult, TesseraError};
use crate::gate::{held_by_this_thread, lock, HeldMark};
use crate::model::Model;
use crate::session::DEFAULT_BUDGET_PERCENT;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tessera_core::backend::DeviceType;
use tessera_llm::{Context, ContextOptions};

/// The most sequences a model may be loaded with.
pub const MAX_SEQUENCES: u32 = 64;

/// The contexts of a model's sequences (see the module doc).
pub(crate) struct Sequences {
    model: Arc<tessera_llm::Model>,
    options: ContextOptions,
    /// One slot per sequence; `None` until the sequence's first use (and after close).
    slots: Vec<Mutex<Option<Context>>>,
    /// Each made context's cancel flag, for [`Sequences::cancel`] while the slot is locked.
    flags: Vec<OnceLock<Arc<AtomicBool>>>,
    /// Bytes of the cache of one sequence.
    cache_bytes: usize,
}

impl Sequences {
    /// `n` sequences of contexts with `options` over `model` (a generative model), within
    /// `budget` bytes (`None`: the default, see the module doc); sequence 0's context made now.
    pub(crate) fn new(
        model: Arc<tessera_llm::Model>,
        options: ContextOptions,
        n: u32,
        budget: Option<u64>,
    ) -> FfiResult<Sequences> {
        check_count(n)?;
        let cache_bytes = Context::cache_bytes_for(&model, &options)?;
        check_budget(&model, n, cache_bytes, budget)?;
        let mut s = Sequences {
            slots: (0..n).map(|_| Mutex::new(None)).collect(),
            flags: (0..n).map(|_| OnceLock::new()).collect(),
            model,
            options,
            cache_bytes,
        };
        let first = s.make(0)?;
        *s.slots[0].get_mut().unwrap_or_else(|p| p.into_inner()) = Some(first);
        Ok(s)
    }

    /// How many sequences there are.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Bytes of device memory the KV cache (and recurrent states) of one sequence takes.
    pub(crate) fn cache_bytes(&self) -> usize {
        self.cache_bytes
    }

    /// Runs `f` on sequence `sequence`'s context (made on its first use), one call at a time
    /// per sequence; `InvalidArgument` for a sequence the model was not loaded with, and for
    /// a call from inside a call on the same sequence (which would wait for itself).
    pub(crate) fn with<T>(
        &self,
        sequence: u32,
        f: impl FnOnce(&mut Context) -> FfiResult<T>,
    ) -> FfiResult<T> {
        let slot = self.slot(sequence)?;
        let key = slot as *const Mutex<Option<Context>> as usize;
        if held_by_this_thread(key) {
            return Err(TesseraError::invalid_argument(format!(
                "sequence {sequence} is busy with the call this one was made from (a token \
                 callback of its generation): it would wait for itself; call it after that \
                 call returns, or on another sequence"
            )));
        }
        let _held = HeldMark::new(key);
        let mut slot = lock(slot);
        let ctx = match slot.take() {
            Some(ctx) => slot.insert(ctx),
            None => slot.insert(self.make(sequence as usize)?),
        };
        f(ctx)
    }

    /// Stops the decode in progress on `sequence` (none: on every sequence).
    pub(crate) fn cancel(&self, sequence: Option<u32>) -> FfiResult<()> {
        let set = |flag: &OnceLock<Arc<AtomicBool>>| {
            if let Some(f) = flag.get() {
                f.store(true, Ordering::Relaxed);
            }
        };
        match sequence {
            Some(s) => {
                self.slot(s)?;
                set(&self.flags[s as usize]);
            }
            None => self.flags.iter().for_each(set),
        }
        Ok(())
    }

    /// Frees every context (after the work in flight ended).
    pub(crate) fn clear(&self) {
        for slot in &self.slots {
            lock(slot).take();
        }
    }

    /// Sequence `sequence`'s slot; `InvalidArgument` past the last.
    fn slot(&self, sequence: u32) -> FfiResult<&Mutex<Option<Context>>> {
        self.slots.get(sequence as usize).ok_or_else(|| {
            TesseraError::invalid_argument(format!(
                "sequence {sequence} does not exist: the model was loaded with nSequences {} \
                 (sequences 0 to {})",
                self.slots.len(),
                self.slots.len() - 1
            ))
        })
    }

    /// A new context for sequence `i`, its cancel flag recorded.
    fn make(&self, i: usize) -> FfiResult<Context> {
        let ctx = Context::new(self.model.clone(), crate::registry::registry(), &self.options)?;
        // Made once per sequence (a slot empties only when the model closes).
        let _ = self.flags[i].set(ctx.cancel_flag());
        Ok(ctx)
    }
}

/// Checks a number of sequences: 1 to [`MAX_SEQUENCES`].
pub(crate) fn check_count(n: u32) -> FfiResult<()> {
    if n == 0 || n > MAX_SEQUENCES {
        return Err(TesseraError::invalid_argument(format!(
            "nSequences {n} must be between 1 and {MAX_SEQUENCES}"
        )));
    }
    Ok(())
}

/// Checks that `n` sequences of `per_sequence` bytes fit `budget` (see the module doc).
fn check_budget(
    model: &tessera_llm::Model,
    n: u32,
    per_sequence: usize,
    budget: Option<u64>,
) -> FfiResult<()> {
    let (budget, what) = match budget {
        Some(b) => (b, "memoryBudget".to_string()),
        None => match default_budget(model) {
            Some(default) => default,
            None => return Ok(()),
        },
    };
    let needed = (per_sequence as u64).saturating_mul(n.into());
    if needed > budget {
        return Err(TesseraError::OutOfMemory {
            message: format!(
                "nSequences {n} x {per_sequence} bytes of KV cache per sequence = {needed} bytes \
                 exceed the model's memory budget of {budget} bytes ({what}): load fewer \
                 sequences, a smaller nCtx, or give a larger memoryBudget"
            ),
        });
    }
    Ok(())
}

/// The default budget and how it was found: [`DEFAULT_BUDGET_PERCENT`] of the free memory of
/// the model's device if it is the CPU, else of the host's (wgpu reports no heap sizes: a GPU
/// device's `free` is its largest buffer less what it holds, and a phone's GPU memory is the
/// host's). `None` where no memory figure is known.
fn default_budget(model: &tessera_llm::Model) -> Option<(u64, String)> {
    let device = model.device();
    let host = match device.device_type() {
        DeviceType::Cpu => device.clone(),
        _ => crate::registry::registry().device_by_type(DeviceType::Cpu)?,
    };
    let memory = host.memory();
    if memory.total == 0 {
        return None;
    }
    let budget = memory.free / 100 * DEFAULT_BUDGET_PERCENT;
    let what = format!(
        "the default: {DEFAULT_BUDGET_PERCENT}% of the {} bytes free on {}",
        memory.free,
        host.name()
    );
    Some((budget, what))
}

#[uniffi::export]
impl Model {
    /// Stops the generation in progress on `sequence` only (it returns with stop reason
    /// "cancelled"); `cancel` stops every sequence's and the embedding's.
    ///
    /// Errors: `InvalidArgument` for a sequence the model was not loaded with, or an embedding
    /// model.
    pub fn cancel_sequence(&self, sequence: u32) -> FfiResult<()> {
        crate::error::guard("Model.cancelSequence", || self.sequences()?.cancel(Some(sequence)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes stated per sequence are those of each context's cache buffers, made on first
    /// use.
    #[test]
    fn the_stated_bytes_are_the_caches_buffers() {
        let Ok(path) = std::env::var("TESSERA_GEMMA_GGUF") else {
            eprintln!("TESSERA_GEMMA_GGUF not set: skipped");
            return;
        };
        let device = tessera_llm::DeviceChoice::parse("CPU");
        let registry = crate::registry::registry();
        let model =
            Arc::new(tessera_llm::Model::load(&path, registry, &device, &mut |_| true).unwrap());
        let options =
            ContextOptions { n_ctx: 300, n_batch: 32, threads: Some(1), ..Default::default() };
        let s = Sequences::new(model, options, 3, None).unwrap();
        assert_eq!(s.len(), 3);
        for i in 0..3 {
            let real = s.with(i, |ctx| Ok(ctx.cache_bytes())).unwrap();
            assert_eq!(real, s.cache_bytes(), "sequence {i}");
        }
        // 3 global layers of 300 cells, 15 sliding-window layers of a ring of 300 (544 rounded
        // up to 768, capped at the context); 1 KV head of 256 F16 values for K and for V.
        assert_eq!(s.cache_bytes(), 18 * 300 * 1024);
        assert!(s.with(3, |_| Ok(())).is_err());

        // The default budget: 75% of the CPU's free memory, named in the error.
        let (budget, what) = default_budget(&s.model).unwrap();
        let free = s.model.device().memory().free;
        assert!(budget <= free / 100 * 75 && budget + free / 50 >= free / 100 * 75, "{what}");
        assert!(
            what.starts_with("the default: 75% of the ") && what.ends_with("bytes free on CPU")
        );
        let e = check_budget(&s.model, 2, usize::MAX / 4, None).unwrap_err();
        assert!(matches!(e, TesseraError::OutOfMemory { .. }), "{e}");
        assert!(e.to_string().contains(&what), "{e}");
        check_budget(&s.model, 1, 1 << 20, None).unwrap();
    }
}
