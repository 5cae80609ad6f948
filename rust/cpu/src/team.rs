//! The threads an op runs on: the calling thread and `n - 1` helpers of a [`Crew`].
//!
//! A crew's helpers are threads of their own that outlive the computes: a graph compute (a
//! token) posts each op's job to them and they wait for the next one between ops and between
//! computes (spinning, then yielding, then parked), so the next token finds them still spinning
//! where they ran. Generating a token runs a few hundred ops of tens of microseconds each, about
//! half of them split over the threads; handing each to a thread woken for it (a rayon job, a
//! thread spawned per compute) made the first jobs of a token wait for a sleeping thread
//! (docs/x86-measurements.md). This is the CPU's only way of running on several threads: graph
//! computes take a crew for all of their ops ([`crate::workers`]), and the matmul driver's
//! public [`MatMul::run`](crate::matmul::MatMul::run) takes one for its op.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long a thread waits spinning (for a job, or for the helpers to finish one) before it
/// starts yielding its core. It is a time, not a count of spin rounds, because a round's
/// `pause` takes 10 ns on one x86 core and 50 on another. A token's serial stretches between
/// two jobs (norms, attention on the calling thread) last up to a few hundred microseconds; a
/// helper that had begun yielding in one of them was measured to start its next job late
/// (docs/x86-measurements.md).
const SPIN_FOR: Duration = Duration::from_millis(1);
/// Spin rounds between two looks at the clock.
const ROUNDS_PER_CLOCK: usize = 64;
/// Yields a helper makes after [`SPIN_FOR`] before it parks until the next job.
const YIELDS: usize = 1 << 10;

/// A job: run for each thread index `0..parts` (0 on the calling thread).
type Job<'a> = &'a (dyn Fn(usize) + Sync);

/// The threads an op may use: the calling thread and the helpers of a team.
pub struct Threads<'a> {
    n: usize,
    team: Option<&'a Team>,
}

impl Threads<'static> {
    /// The calling thread alone.
    pub fn single() -> Threads<'static> {
        Threads { n: 1, team: None }
    }
}

impl Threads<'_> {
    /// The number of threads, the caller included.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Runs `job(me)` for `me` in `0..parts.min(n)`, `me == 0` on the calling thread, and
    /// returns when all are done. A panic of any part is resumed on the caller once every part
    /// has finished.
    pub(crate) fn run(&self, parts: usize, job: Job<'_>) {
        let parts = parts.clamp(1, self.n);
        match self.team {
            Some(team) if parts > 1 => team.run(parts, job),
            _ => job(0),
        }
    }
}

/// Helper threads kept ready for computes: `n - 1` threads of their own that run the jobs of
/// one compute at a time and wait for the next compute's between computes.
pub struct Crew {
    team: Arc<Team>,
    /// Set while a compute uses the crew.
    in_use: AtomicBool,
    handles: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Crew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Crew({} helpers)", self.handles.len())
    }
}

impl Crew {
    /// A crew for computes of up to `n` threads: spawns `n - 1` helper threads.
    pub fn new(n: usize) -> std::io::Result<Crew> {
        let team = Arc::new(Team::new(n.max(1)));
        let mut crew = Crew { team, in_use: AtomicBool::new(false), handles: Vec::new() };
        for me in 1..n {
            let team = crew.team.clone();
            let h = std::thread::Builder::new()
                .name(format!("tessera-team-{me}"))
                .spawn(move || team.helper(me))?;
            // On an error the crew dropped here ends the helpers spawned so far.
            crew.handles.push(h);
        }
        Ok(crew)
    }

    /// The most threads a compute can have from this crew (its helpers and the caller).
    pub fn threads(&self) -> usize {
        self.handles.len() + 1
    }

    /// Runs `body` with `n` threads: the calling thread and `n - 1` of the crew's helpers, or,
    /// while another compute holds the crew or it is too small, the helpers of a crew of its
    /// own, started for this call (the calling thread alone if none can be started).
    pub fn with_team<R>(&self, n: usize, body: impl FnOnce(&Threads<'_>) -> R) -> R {
        if n <= 1 {
            return body(&Threads::single());
        }
        let free = || {
            self.in_use.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
        };
        if n > self.threads() || !free() {
            return match Crew::new(n) {
                Ok(own) => own.with_team(n, body),
                Err(e) => {
                    log::warn!("cannot start {} helper threads ({e}): running on one", n - 1);
                    body(&Threads::single())
                }
            };
        }
        /// Frees the crew when the compute ends, also by a panic.
        struct Release<'a>(&'a AtomicBool);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _release = Release(&self.in_use);
        body(&Threads { n, team: Some(&self.team) })
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        self.team.quit();
        for h in self.handles.drain(..) {
            // A helper catches its jobs' panics, so it returns normally.
            let _ = h.join();
        }
    }
}

/// The state a team's threads share.
struct Team {
    /// Jobs posted so far; a helper runs a job when it sees this change.
    posted: AtomicUsize,
    /// Set once the team's compute ends.
    done: AtomicBool,
    /// Helpers that have not finished the current job.
    pending: AtomicUsize,
    /// A part of the current job panicked.
    panicked: AtomicBool,
    /// The current job and its number of parts: written by the caller only while no helper
    /// reads it (before `posted` moves on, after `pending` reached 0).
    slot: UnsafeCell<Option<(Job<'static>, usize)>>,
    /// Per helper (index `me - 1`): whether it is parked, and its thread once it started.
    helpers: Vec<Parking>,
}

#[derive(Default)]
struct Parking {
    parked: AtomicBool,
    thread: std::sync::OnceLock<Thread>,
}

// SAFETY: `slot` is written by the team's caller only while no helper reads it (see its doc:
// the writes and reads are ordered by the release / acquire pairs on `posted` and `pending`);
// everything else is atomics.
unsafe impl Sync for Team {}

impl Team {
    fn new(n: usize) -> Team {
        Team {
            posted: AtomicUsize::new(0),
            done: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            slot: UnsafeCell::new(None),
            helpers: (1..n).map(|_| Parking::default()).collect(),
        }
    }

    /// The caller's side of a job (`parts` >= 2): posts it, runs part 0, waits for the helpers.
    fn run(&self, parts: usize, job: Job<'_>) {
        // SAFETY: only the lifetime is erased. The job is read by the helpers between the
        // `posted` increment below and their `pending` decrement, and this function returns
        // (so `job` stays borrowed) only after `pending` reached 0; `slot` is cleared before.
        let job: Job<'static> = unsafe { std::mem::transmute::<Job<'_>, Job<'static>>(job) };
        // SAFETY: no helper reads `slot` now: every helper finished the previous job.
        unsafe { *self.slot.get() = Some((job, parts)) };
        self.pending.store(self.helpers.len(), Ordering::Relaxed);
        self.posted.fetch_add(1, Ordering::SeqCst);
        self.wake_parked();
        let mine = catch_unwind(AssertUnwindSafe(|| job(0)));
        let mut wait = Backoff::new();
        while self.pending.load(Ordering::Acquire) != 0 {
            wait.round();
        }
        // SAFETY: every helper is done with the job (pending is 0).
        unsafe { *self.slot.get() = None };
        if let Err(p) = mine {
            resume_unwind(p);
        }
        if self.panicked.swap(false, Ordering::Relaxed) {
            panic!("a worker thread panicked during a CPU op");
        }
    }

    /// A helper's loop: waits for each job and runs its part `me` of it, until the team ends.
    fn helper(&self, me: usize) {
        let parking = &self.helpers[me - 1];
        // `set` fails only if already set, which nothing does.
        let _ = parking.thread.set(std::thread::current());
        let mut seen = 0;
        loop {
            let mut wait = Backoff::new();
            loop {
                if self.posted.load(Ordering::Acquire) != seen {
                    break;
                }
                if self.done.load(Ordering::Acquire) {
                    return;
                }
                if wait.yields < YIELDS {
                    wait.round();
                } else {
                    // Parked: the caller unparks a helper whose flag it sees after posting.
                    // Both sides use SeqCst, so either the caller sees the flag or this thread
                    // sees the new job (or the end) before parking.
                    parking.parked.store(true, Ordering::SeqCst);
                    if self.posted.load(Ordering::SeqCst) == seen
                        && !self.done.load(Ordering::SeqCst)
                    {
                        std::thread::park();
                    }
                    parking.parked.store(false, Ordering::SeqCst);
                }
            }
            seen = seen.wrapping_add(1);
            // SAFETY: the job was written before `posted` moved (acquire above), and stays
            // until this helper decrements `pending`.
            let current = unsafe { *self.slot.get() };
            if let Some((job, parts)) = current {
                if me < parts && catch_unwind(AssertUnwindSafe(|| job(me))).is_err() {
                    self.panicked.store(true, Ordering::Relaxed);
                }
            }
            self.pending.fetch_sub(1, Ordering::Release);
        }
    }

    /// Ends the team: its helpers return once they see it.
    fn quit(&self) {
        self.done.store(true, Ordering::SeqCst);
        self.wake_parked();
    }

    fn wake_parked(&self) {
        for h in &self.helpers {
            if h.parked.load(Ordering::SeqCst) {
                if let Some(t) = h.thread.get() {
                    t.unpark();
                }
            }
        }
    }
}

/// A thread's wait for something another thread does: spins for [`SPIN_FOR`], then yields its
/// core at each round.
struct Backoff {
    /// When the wait began (the first look at the clock).
    since: Option<Instant>,
    /// Spin rounds since the last look at the clock.
    spins: usize,
    /// Yields made so far.
    yields: usize,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff { since: None, spins: 0, yields: 0 }
    }

    /// One round of waiting.
    fn round(&mut self) {
        if self.yields > 0 {
            self.yields += 1;
            return std::thread::yield_now();
        }
        std::hint::spin_loop();
        self.spins += 1;
        if self.spins == ROUNDS_PER_CLOCK {
            self.spins = 0;
            let since = *self.since.get_or_insert_with(Instant::now);
            if since.elapsed() >= SPIN_FOR {
                self.yields = 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// Every part of every job runs once, on its own index, on one thread and on a crew; jobs
    /// posted after the helpers parked still run.
    #[test]
    fn each_part_runs_once_per_job() {
        let check = |t: &Threads<'_>| {
            let n = t.n();
            for parts in [1, 2, 3, 5] {
                let hits: Vec<AtomicU64> = (0..3).map(|_| AtomicU64::new(0)).collect();
                for _ in 0..50 {
                    t.run(parts, &|me| {
                        hits[me].fetch_add(1, Ordering::Relaxed);
                    });
                }
                let got: Vec<u64> = hits.iter().map(|h| h.load(Ordering::Relaxed)).collect();
                let want: Vec<u64> =
                    (0..3).map(|i| if i < parts.min(n) { 50 } else { 0 }).collect();
                assert_eq!(got, want, "parts {parts} on {n} threads");
            }
        };
        check(&Threads::single());
        let park = || std::thread::sleep(Duration::from_millis(100));
        let crew = Crew::new(3).unwrap();
        crew.with_team(3, check);
        park();
        crew.with_team(3, |t| {
            check(t);
            // Long enough for the helpers to park.
            park();
            check(t);
        });
    }

    /// The name of the thread that runs part 1 of a job on `t`.
    fn part_one_thread(t: &Threads<'_>) -> Option<String> {
        let name = std::sync::Mutex::new(None);
        t.run(2, &|me| {
            if me == 1 {
                *name.lock().unwrap() = std::thread::current().name().map(str::to_string);
            }
        });
        name.into_inner().unwrap()
    }

    /// A crew's helpers serve compute after compute; a compute that finds the crew taken (or
    /// too small) gets helpers of its own, and the crew is free again afterwards.
    #[test]
    fn computes_share_the_crew_one_at_a_time() {
        let crew = Crew::new(2).unwrap();
        assert_eq!(crew.threads(), 2);
        let ours = part_one_thread_id(&crew, 2);
        for _ in 0..3 {
            assert_eq!(part_one_thread_id(&crew, 2), ours);
        }
        let crew = &crew;
        std::thread::scope(|s| {
            crew.with_team(2, |t| {
                let mine = part_one_thread(t);
                // The crew is held here: a compute on another thread gets helpers of its own.
                let other = s.spawn(|| part_one_thread_id(crew, 2)).join().unwrap();
                assert_ne!(other, ours);
                assert_eq!(mine.as_deref(), Some("tessera-team-1"));
            })
        });
        assert_eq!(part_one_thread_id(crew, 2), ours);
        assert_ne!(part_one_thread_id(crew, 3), ours, "a crew of 2 serves 2");
    }

    /// The id of the thread that runs part 1 of a job on `n` threads of `crew`.
    fn part_one_thread_id(crew: &Crew, n: usize) -> std::thread::ThreadId {
        crew.with_team(n, |t| {
            let id = std::sync::Mutex::new(None);
            t.run(2, &|me| {
                if me == 1 {
                    *id.lock().unwrap() = Some(std::thread::current().id());
                }
            });
            id.into_inner().unwrap().unwrap()
        })
    }

    /// A helper's panic reaches the caller after the job, and the crew still works.
    #[test]
    fn a_helper_panic_reaches_the_caller() {
        let crew = Crew::new(2).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            crew.with_team(2, |t| t.run(2, &|me| assert_ne!(me, 1, "part 1 fails")))
        }));
        assert!(r.is_err());
        // The crew was freed by the panic and its helper still runs jobs.
        assert_eq!(crew.with_team(2, part_one_thread).as_deref(), Some("tessera-team-1"));
        // A crew started for one call (the shared one taken) ends its helpers after a panic.
        let r = catch_unwind(AssertUnwindSafe(|| {
            crew.with_team(2, |_| {
                crew.with_team(2, |t| t.run(2, &|me| assert_ne!(me, 1, "part 1 fails")))
            })
        }));
        assert!(r.is_err());
    }

    /// A wait spins for `SPIN_FOR` (by the clock, whatever a spin round costs) and only then
    /// yields.
    #[test]
    fn a_wait_spins_for_its_time_then_yields() {
        let start = Instant::now();
        let mut wait = Backoff::new();
        let mut rounds = 0u64;
        while wait.yields == 0 {
            wait.round();
            rounds += 1;
        }
        assert!(start.elapsed() >= SPIN_FOR, "yielded after {:?}", start.elapsed());
        assert!(rounds >= ROUNDS_PER_CLOCK as u64);
        wait.round();
        assert_eq!(wait.yields, 2, "every later round yields");
    }
}
