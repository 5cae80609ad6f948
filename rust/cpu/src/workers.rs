//! The CPU device's worker threads: one set for the whole process, shared by every
//! [`crate::CpuBackend`] (every session, every model), instead of a set per backend.
//!
//! Each backend holds a [`Lease`] for its thread count `n`. The workers are as many as the
//! largest count leased now (at most [`MAX_THREADS`](crate::backend::MAX_THREADS)), so a
//! process with ten 4-thread sessions runs 4 workers, not 40, and a 512-thread session's
//! workers go away when it closes. They are two sets of that size ([`Workers`]): a rayon pool,
//! for ops outside a graph compute (the calling thread and `n - 1` helpers spawned into it,
//! see [`crate::matmul::parallel_chunks`]), and a [`Crew`] of helper threads that a graph
//! compute takes for all of its ops (another compute at the same time spawns its helpers into
//! the pool). A backend uses `n` threads whatever the workers' size, so its parallelism is its
//! own count.
//!
//! The workers are replaced (not resized: rayon pools have a fixed size) when a larger count is
//! leased, and dropped when the largest lease ends; a backend takes the current ones at each
//! compute ([`Lease::workers`]: one uncontended lock), so an idle backend holds no threads of
//! old ones.

use crate::buffer::CPU_NAME;
use crate::team::Crew;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tessera_core::{Error, Result};

/// The threads a compute takes: the pool, and the crew of graph-compute helpers of the same
/// size.
#[derive(Clone, Debug)]
pub struct Workers {
    /// The rayon pool (ops outside a graph compute, and the fallback of a busy crew).
    pub pool: Arc<rayon::ThreadPool>,
    /// The helpers of graph computes ([`Crew::with_team`]).
    pub crew: Arc<Crew>,
}

#[derive(Default)]
struct Shared {
    /// The workers and their number of threads.
    pool: Option<(Workers, usize)>,
    /// Thread count -> number of leases of that count.
    leases: BTreeMap<usize, usize>,
}

impl Shared {
    fn largest(&self) -> usize {
        self.leases.keys().next_back().copied().unwrap_or(0)
    }

    /// The workers for the current leases (made, or remade larger, as needed).
    fn pool(&mut self) -> Result<Workers> {
        let want = self.largest().max(1);
        match &self.pool {
            Some((w, size)) if *size >= want => Ok(w.clone()),
            _ => {
                let crew = Crew::new(want).map_err(|e| Error::Backend {
                    backend: CPU_NAME.into(),
                    message: format!("cannot start a helper thread: {e}"),
                })?;
                let w = Workers { pool: Arc::new(make_pool(want)?), crew: Arc::new(crew) };
                self.pool = Some((w.clone(), want));
                Ok(w)
            }
        }
    }

    fn add(&mut self, n: usize) {
        *self.leases.entry(n).or_default() += 1;
    }

    fn remove(&mut self, n: usize) {
        if let Some(c) = self.leases.get_mut(&n) {
            *c -= 1;
            if *c == 0 {
                self.leases.remove(&n);
            }
        }
        // Fewer threads are wanted now: let the pool go (its threads end once the computes
        // using it finish); the next compute makes one of the size then needed.
        if self.pool.as_ref().is_some_and(|(_, size)| *size > self.largest()) {
            self.pool = None;
        }
    }
}

fn shared() -> MutexGuard<'static, Shared> {
    static SHARED: Mutex<Shared> = Mutex::new(Shared { pool: None, leases: BTreeMap::new() });
    SHARED.lock().unwrap_or_else(|p| p.into_inner())
}

fn make_pool(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("tessera-cpu-{i}"))
        .build()
        .map_err(|e| Error::Backend { backend: CPU_NAME.into(), message: e.to_string() })
}

/// A backend's claim on `n` threads of the shared pool; released on drop.
#[derive(Debug)]
pub struct Lease {
    n: usize,
}

impl Lease {
    /// Leases `n` threads (the pool grows to `n` if it is smaller).
    pub fn new(n: usize) -> Result<Lease> {
        let mut s = shared();
        s.add(n);
        if let Err(e) = s.pool() {
            s.remove(n);
            return Err(e);
        }
        Ok(Lease { n })
    }

    /// The leased thread count.
    pub fn threads(&self) -> usize {
        self.n
    }

    /// Changes the leased count to `n`.
    pub fn set(&mut self, n: usize) -> Result<()> {
        if n != self.n {
            let mut s = shared();
            s.add(n);
            if let Err(e) = s.pool() {
                s.remove(n);
                return Err(e);
            }
            s.remove(self.n);
            self.n = n;
        }
        Ok(())
    }

    /// The current workers, for one compute (at least [`Lease::threads`] threads).
    pub fn workers(&self) -> Result<Workers> {
        shared().pool()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        shared().remove(self.n);
    }
}

/// The number of threads of the shared pool now (0 when there is none), for tests and
/// diagnostics.
pub fn pool_threads() -> usize {
    shared().pool.as_ref().map_or(0, |(_, size)| *size)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool follows the largest lease: shared by equal counts, grown for a larger one,
    /// dropped to the next largest when that ends. (The only test of this crate's unit tests
    /// that leases threads, so no other lease changes the pool meanwhile.)
    #[test]
    fn the_pool_has_the_largest_leased_count() {
        let a = Lease::new(3).unwrap();
        let b = Lease::new(3).unwrap();
        assert_eq!(pool_threads(), 3);
        let mut c = Lease::new(7).unwrap();
        assert_eq!(pool_threads(), 7);
        let w = c.workers().unwrap();
        assert_eq!((w.pool.current_num_threads(), w.crew.threads()), (7, 7));
        drop(w);
        c.set(2).unwrap();
        // The 7-thread pool was let go; the next compute gets one of 3.
        assert_eq!(pool_threads(), 0);
        assert_eq!(a.workers().unwrap().crew.threads(), 3);
        drop((a, b));
        assert_eq!(c.workers().unwrap().pool.current_num_threads(), 2);
        drop(c);
        assert_eq!(pool_threads(), 0);
    }
}
