//! The CPU device's worker threads: one set for the whole process, shared by every
//! [`crate::CpuBackend`] (every session, every model), instead of a set per backend.
//!
//! Each backend holds a [`Lease`] for its thread count `n`. The workers are [`Crew`]s of as many
//! threads as the largest count leased now (at most
//! [`MAX_THREADS`](crate::backend::MAX_THREADS)): `size - 1` helper threads each, the calling
//! thread being the last one. A compute takes an idle crew for all of its ops and gives it back
//! afterwards, so computes one after another (the tokens of a generation, the sessions of a
//! process) run on one crew: a process with ten 4-thread sessions runs 3 helper threads, not
//! 40. A compute that runs while another holds that crew gets a crew of its own, kept idle
//! afterwards for the next such compute. A backend uses `n` threads whatever the crews' size,
//! so its parallelism is its own count.
//!
//! The crews are replaced when a larger count is leased, and dropped when the largest lease
//! ends (idle ones at once, those in use when their compute gives them back), so an idle
//! backend holds no threads of old ones.

use crate::buffer::CPU_NAME;
use crate::team::{Crew, Threads};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};
use tessera_core::{Error, Result};

#[derive(Default)]
struct Shared {
    /// Threads per crew (helpers and the calling thread): the largest lease.
    size: usize,
    /// Crews of `size` threads that no compute holds now.
    idle: Vec<Crew>,
    /// Thread count -> number of leases of that count.
    leases: BTreeMap<usize, usize>,
}

impl Shared {
    fn largest(&self) -> usize {
        self.leases.keys().next_back().copied().unwrap_or(0)
    }

    /// Follows the leases: a new size drops the idle crews (returned, to be dropped outside
    /// the lock, since dropping a crew joins its helpers).
    fn resize(&mut self) -> Vec<Crew> {
        let want = self.largest();
        if want == self.size {
            return Vec::new();
        }
        self.size = want;
        std::mem::take(&mut self.idle)
    }

    fn add(&mut self, n: usize) -> Vec<Crew> {
        *self.leases.entry(n).or_default() += 1;
        self.resize()
    }

    fn remove(&mut self, n: usize) -> Vec<Crew> {
        if let Some(c) = self.leases.get_mut(&n) {
            *c -= 1;
            if *c == 0 {
                self.leases.remove(&n);
            }
        }
        self.resize()
    }
}

fn shared() -> MutexGuard<'static, Shared> {
    static SHARED: Mutex<Shared> =
        Mutex::new(Shared { size: 0, idle: Vec::new(), leases: BTreeMap::new() });
    SHARED.lock().unwrap_or_else(|p| p.into_inner())
}

/// A crew of `size` threads: an idle one, or a new one.
fn take_crew() -> Result<Crew> {
    let size = {
        let mut s = shared();
        if let Some(crew) = s.idle.pop() {
            return Ok(crew);
        }
        s.size.max(1)
    };
    Crew::new(size).map_err(|e| Error::Backend {
        backend: CPU_NAME.into(),
        message: format!("cannot start a helper thread: {e}"),
    })
}

/// Gives `crew` back: kept idle when it still has the leases' size, dropped otherwise.
fn give_back(crew: Crew) {
    let mut s = shared();
    if crew.threads() == s.size {
        s.idle.push(crew);
    } else {
        drop(s);
        drop(crew);
    }
}

/// A backend's claim on `n` threads of the shared workers; released on drop.
#[derive(Debug)]
pub struct Lease {
    n: usize,
}

impl Lease {
    /// Leases `n` threads (the crews grow to `n` if they are smaller) and starts the first crew
    /// of that size, so that a thread that cannot start fails here rather than at a compute.
    pub fn new(n: usize) -> Result<Lease> {
        drop(shared().add(n));
        let lease = Lease { n };
        give_back(take_crew()?);
        Ok(lease)
    }

    /// The leased thread count.
    pub fn threads(&self) -> usize {
        self.n
    }

    /// Changes the leased count to `n`.
    pub fn set(&mut self, n: usize) -> Result<()> {
        if n != self.n {
            let mut s = shared();
            let mut dropped = s.add(n);
            dropped.extend(s.remove(self.n));
            drop(s);
            drop(dropped);
            self.n = n;
        }
        Ok(())
    }

    /// Runs `body` on [`Lease::threads`] threads: the calling thread and the helpers of a crew
    /// it holds until `body` returns.
    pub fn with_team<R>(&self, body: impl FnOnce(&Threads<'_>) -> R) -> Result<R> {
        if self.n <= 1 {
            return Ok(body(&Threads::single()));
        }
        let crew = take_crew()?;
        let result = catch_unwind(AssertUnwindSafe(|| crew.with_team(self.n, body)));
        // Given back also after a panic (the crew's helpers caught theirs).
        give_back(crew);
        Ok(result.unwrap_or_else(|p| resume_unwind(p)))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let dropped = shared().remove(self.n);
        drop(dropped);
    }
}

/// The threads of the shared crews (helpers and one calling thread each) and how many crews
/// are idle now, for tests and diagnostics.
pub fn crew_threads() -> (usize, usize) {
    let s = shared();
    (s.size, s.idle.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crews follow the largest lease: shared by equal counts, replaced for a larger one,
    /// dropped to the next largest when that ends; a compute while another holds the crew gets
    /// one of its own. (The only test of this crate's unit tests that leases threads, so no
    /// other lease changes the crews meanwhile.)
    #[test]
    fn the_crews_have_the_largest_leased_count() {
        let a = Lease::new(3).unwrap();
        let b = Lease::new(3).unwrap();
        assert_eq!(crew_threads(), (3, 1));
        let mut c = Lease::new(7).unwrap();
        assert_eq!(crew_threads(), (7, 1));
        assert_eq!(c.with_team(|t| t.n()).unwrap(), 7);
        // Two computes at once: two crews, both kept for the next time.
        a.with_team(|_| b.with_team(|t| assert_eq!(t.n(), 3)).unwrap()).unwrap();
        assert_eq!(crew_threads(), (7, 2));
        c.set(2).unwrap();
        // The 7-thread crews were let go; the next compute starts one of 3.
        assert_eq!(crew_threads(), (3, 0));
        assert_eq!(a.with_team(|t| t.n()).unwrap(), 3);
        assert_eq!(crew_threads(), (3, 1));
        drop((a, b));
        assert_eq!(c.with_team(|t| t.n()).unwrap(), 2);
        drop(c);
        assert_eq!(crew_threads(), (0, 0));
    }
}
