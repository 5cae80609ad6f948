//! The threads an op runs on: the calling thread and `n - 1` helpers of a [`Crew`].
//!
//! A crew's helpers are threads of their own that outlive the computes: a graph compute (a
//! token) posts each op's job to them and they wait for the next one between ops and between
//! computes (spinning, then yielding, then parked), so the next token finds them still spinning
//! where they ran. A helper runs its part of a job only if it joins the job while the caller
//! still runs its own part, and the caller waits only for the helpers that joined: a helper
//! that is not running (another process on its core) then costs an op nothing, where waiting
//! for every helper at every op cost a time slice each (docs/x86-measurements.md).
//!
//! Generating a token runs a few hundred ops of tens of microseconds each, about half of them
//! split over the threads; handing each to a thread woken for it (a rayon job, a thread spawned
//! per compute) made the first jobs of a token wait for a sleeping thread
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

    /// Runs `job(0)` on the calling thread and `job(me)` on each helper `me` in
    /// `1..parts.min(n)` that joins the job before `job(0)` returns, and returns when all those
    /// are done. A helper that is not running then (its core taken by another process, a slow
    /// core) does not join and is not waited for, so a job must claim its work dynamically
    /// (chunks taken from a shared counter, [`crate::matmul`]'s `parallel_chunks`): `job(0)`
    /// alone must finish whatever no helper took. A panic of any part is resumed on the caller
    /// once every part that ran has finished.
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

#[cfg(test)]
impl Crew {
    /// Holds the helpers (`true`) before they join each job, as if their cores were taken, or
    /// lets them go.
    pub(crate) fn hold_helpers(&self, held: bool) {
        self.team.held.store(held, Ordering::Release);
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

/// [`Team::gate`]'s low bits: the helpers inside the current job.
const INSIDE: usize = (1 << 15) - 1;
/// [`Team::gate`]'s closed bit: the caller finished its part, no helper may join any more.
const CLOSED: usize = 1 << 15;
/// [`Team::gate`]'s serial number of the job, above the count and the closed bit.
const SERIAL: usize = 1 << 16;

/// The state a team's threads share.
///
/// A job is open from the moment the caller posts it until the caller has finished its own
/// part; a helper runs its part only if it joins the job while it is open, and the caller waits
/// only for the helpers that joined. The jobs claim their work (chunks) dynamically, so the
/// caller's part finishes whatever no helper took: a helper that was not running when a job was
/// posted (another process on its core, a slow core, the OS) costs that job nothing instead of
/// a whole time slice of the scheduler.
struct Team {
    /// The current job's serial number (multiples of [`SERIAL`]), whether it is [`CLOSED`] and
    /// how many helpers are [`INSIDE`] it. A helper runs a job when it sees the serial change
    /// and joins it while it is open.
    gate: AtomicUsize,
    /// Set once the team's compute ends.
    done: AtomicBool,
    /// A part of the current job panicked.
    panicked: AtomicBool,
    /// The current job and its number of parts: written by the caller only while no helper
    /// reads it (before the gate opens the job, after it is closed with no helper inside).
    slot: UnsafeCell<Option<(Job<'static>, usize)>>,
    /// Per helper (index `me - 1`): whether it is parked, and its thread once it started.
    helpers: Vec<Parking>,
    /// Tests: while set, a helper that saw a new job waits before it tries to join it, as a
    /// helper whose core is taken by another process would.
    #[cfg(test)]
    held: AtomicBool,
}

#[derive(Default)]
struct Parking {
    parked: AtomicBool,
    thread: std::sync::OnceLock<Thread>,
}

// SAFETY: `slot` is written by the team's caller only while no helper reads it (see its doc:
// the writes and reads are ordered by the release / acquire pairs on `gate`); everything else
// is atomics.
unsafe impl Sync for Team {}

impl Team {
    fn new(n: usize) -> Team {
        Team {
            gate: AtomicUsize::new(CLOSED),
            done: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            slot: UnsafeCell::new(None),
            helpers: (1..n).map(|_| Parking::default()).collect(),
            #[cfg(test)]
            held: AtomicBool::new(false),
        }
    }

    /// The caller's side of a job (`parts` >= 2): posts it, runs part 0, closes it and waits for
    /// the helpers that joined it.
    fn run(&self, parts: usize, job: Job<'_>) {
        // SAFETY: only the lifetime is erased. The job is read by the helpers that join it,
        // between the gate's opening below and their leaving, and this function returns (so
        // `job` stays borrowed) only after the gate is closed with no helper inside; `slot` is
        // cleared before.
        let job: Job<'static> = unsafe { std::mem::transmute::<Job<'_>, Job<'static>>(job) };
        // SAFETY: no helper reads `slot` now: the previous job is closed and empty.
        unsafe { *self.slot.get() = Some((job, parts)) };
        let serial = (self.gate.load(Ordering::Relaxed) & !(SERIAL - 1)).wrapping_add(SERIAL);
        self.gate.store(serial, Ordering::SeqCst);
        self.wake_parked();
        let mine = catch_unwind(AssertUnwindSafe(|| job(0)));
        if self.gate.fetch_or(CLOSED, Ordering::AcqRel) & INSIDE != 0 {
            let mut wait = Backoff::new();
            while self.gate.load(Ordering::Acquire) & INSIDE != 0 {
                wait.round();
            }
        }
        // SAFETY: the job is closed and no helper is inside it.
        unsafe { *self.slot.get() = None };
        if let Err(p) = mine {
            resume_unwind(p);
        }
        if self.panicked.swap(false, Ordering::Relaxed) {
            panic!("a worker thread panicked during a CPU op");
        }
    }

    /// A helper's loop: waits for each job and runs its part `me` of it if it can still join
    /// it, until the team ends.
    fn helper(&self, me: usize) {
        let parking = &self.helpers[me - 1];
        // `set` fails only if already set, which nothing does.
        let _ = parking.thread.set(std::thread::current());
        let serial = |g: usize| g & !(SERIAL - 1);
        // The serial a team starts with: a job posted before this thread started is joined if
        // it is still open.
        let mut seen = 0;
        loop {
            let mut wait = Backoff::new();
            let mut gate = loop {
                let g = self.gate.load(Ordering::Acquire);
                if serial(g) != seen {
                    break g;
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
                    if serial(self.gate.load(Ordering::SeqCst)) == seen
                        && !self.done.load(Ordering::SeqCst)
                    {
                        std::thread::park();
                    }
                    parking.parked.store(false, Ordering::SeqCst);
                }
            };
            seen = serial(gate);
            #[cfg(test)]
            while self.held.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_micros(200));
            }
            // Joins the job unless the caller closed it already (it did the work then).
            let joined = loop {
                if gate & CLOSED != 0 || serial(gate) != seen {
                    break false;
                }
                match self.gate.compare_exchange_weak(
                    gate,
                    gate + 1,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break true,
                    Err(g) => gate = g,
                }
            };
            if !joined {
                continue;
            }
            // SAFETY: the job was written before the gate opened it (acquire above), and stays
            // until this helper leaves it.
            let current = unsafe { *self.slot.get() };
            if let Some((job, parts)) = current {
                if me < parts && catch_unwind(AssertUnwindSafe(|| job(me))).is_err() {
                    self.panicked.store(true, Ordering::Relaxed);
                }
            }
            self.gate.fetch_sub(1, Ordering::Release);
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

    /// A job that claims `chunks` chunks from a counter, as the ops' jobs do; returns how many
    /// times each chunk ran, and how many times each part ran.
    fn claimed(t: &Threads<'_>, parts: usize, chunks: usize) -> (Vec<u64>, Vec<u64>) {
        let next = AtomicUsize::new(0);
        let hits: Vec<AtomicU64> = (0..chunks).map(|_| AtomicU64::new(0)).collect();
        let ran: Vec<AtomicU64> = (0..t.n().max(parts)).map(|_| AtomicU64::new(0)).collect();
        t.run(parts, &|me| {
            ran[me].fetch_add(1, Ordering::Relaxed);
            loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                if c >= chunks {
                    return;
                }
                hits[c].fetch_add(1, Ordering::Relaxed);
            }
        });
        let get = |v: Vec<AtomicU64>| v.into_iter().map(AtomicU64::into_inner).collect();
        (get(hits), get(ran))
    }

    /// Every chunk of every job runs once; part 0 runs on every job, the helpers' parts at most
    /// once and only below `parts`; on one thread and on a crew, whose parked helpers wake for
    /// the next job.
    #[test]
    fn each_chunk_runs_once_per_job() {
        let check = |t: &Threads<'_>| {
            let n = t.n();
            for parts in [1, 2, 3, 5] {
                for chunks in [0, 1, 7, 64] {
                    for _ in 0..20 {
                        let (hits, ran) = claimed(t, parts, chunks);
                        assert_eq!(hits, vec![1; chunks], "parts {parts} on {n} threads");
                        assert_eq!(ran[0], 1);
                        for (me, &r) in ran.iter().enumerate().skip(1) {
                            assert!(r <= u64::from(me < parts.min(n)), "part {me} ran {r}");
                        }
                    }
                }
            }
        };
        check(&Threads::single());
        let park = || std::thread::sleep(Duration::from_millis(100));
        let crew = Crew::new(3).unwrap();
        crew.with_team(3, check);
        park();
        crew.with_team(3, |t| {
            check(t);
            // Long enough for the helpers to park: a job posted then wakes them, and they join
            // it.
            park();
            assert_eq!(rendezvous(t, 3, &|_| ()), [true; 3]);
            check(t);
        });
    }

    /// Helpers that do not get to run when jobs are posted (held, as by another process on
    /// their cores) are not waited for: the caller does every chunk of job after job while they
    /// are held, and they join the jobs posted after they are let go.
    #[test]
    fn the_caller_does_the_work_of_helpers_that_do_not_run() {
        let crew = Crew::new(3).unwrap();
        crew.with_team(3, |t| {
            crew.hold_helpers(true);
            // Lets the helpers go after 10 s should the caller wait for them (the assertion
            // below then fails instead of the test hanging).
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let team = &crew;
            std::thread::scope(|s| {
                s.spawn(move || {
                    let _ = rx.recv_timeout(Duration::from_secs(10));
                    team.hold_helpers(false);
                });
                for _ in 0..50 {
                    let (hits, ran) = claimed(t, 3, 16);
                    assert_eq!(hits, vec![1; 16]);
                    assert_eq!(ran, [1, 0, 0], "a held helper ran a part");
                }
                let _ = tx.send(());
            });
            crew.hold_helpers(false);
            // Let go, the helpers join jobs again.
            let joined = rendezvous(t, 3, &|_| ());
            assert_eq!(joined, [true; 3], "the helpers do not join jobs again");
        });
    }

    /// A helper that is slow inside a job (it took a chunk and stalls) is waited for: the job
    /// returns with its chunk done, once, and the others' done by the calling thread.
    #[test]
    fn a_slow_helper_is_waited_for() {
        let crew = Crew::new(2).unwrap();
        crew.with_team(2, |t| {
            for _ in 0..5 {
                let next = AtomicUsize::new(0);
                let hits: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(0)).collect();
                let claim = |me: usize| loop {
                    let c = next.fetch_add(1, Ordering::Relaxed);
                    if c >= 8 {
                        return;
                    }
                    if me == 1 {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    hits[c].fetch_add(1, Ordering::Relaxed);
                };
                // Part 0 starts once part 1 has begun (so that the helper joins the job).
                rendezvous(t, 2, &claim);
                let hits: Vec<u64> = hits.into_iter().map(AtomicU64::into_inner).collect();
                assert_eq!(hits, vec![1; 8]);
            }
        });
    }

    /// Runs a job of `parts` parts on `t` whose part 0 waits (up to 10 s) until the others have
    /// started, then runs `then(me)` on each; returns which parts ran. The helpers join any job
    /// that stays open until they come.
    fn rendezvous(t: &Threads<'_>, parts: usize, then: &(dyn Fn(usize) + Sync)) -> Vec<bool> {
        let ran: Vec<AtomicBool> = (0..t.n()).map(|_| AtomicBool::new(false)).collect();
        let started = AtomicUsize::new(0);
        let want = parts.min(t.n()) - 1;
        t.run(parts, &|me| {
            ran[me].store(true, Ordering::Relaxed);
            if me == 0 {
                let start = Instant::now();
                while started.load(Ordering::Acquire) < want
                    && start.elapsed() < Duration::from_secs(10)
                {
                    std::thread::yield_now();
                }
            } else {
                started.fetch_add(1, Ordering::Release);
            }
            then(me);
        });
        ran.into_iter().map(AtomicBool::into_inner).collect()
    }

    /// The name of the thread that runs part 1 of a job on `t`.
    fn part_one_thread(t: &Threads<'_>) -> Option<String> {
        let name = std::sync::Mutex::new(None);
        rendezvous(t, 2, &|me| {
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
            rendezvous(t, 2, &|me| {
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
            crew.with_team(2, |t| rendezvous(t, 2, &|me| assert_ne!(me, 1, "part 1 fails")))
        }));
        assert!(r.is_err());
        // The crew was freed by the panic and its helper still runs jobs.
        assert_eq!(crew.with_team(2, part_one_thread).as_deref(), Some("tessera-team-1"));
        // A crew started for one call (the shared one taken) ends its helpers after a panic.
        let r = catch_unwind(AssertUnwindSafe(|| {
            crew.with_team(2, |_| {
                crew.with_team(2, |t| rendezvous(t, 2, &|me| assert_ne!(me, 1, "part 1 fails")))
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
