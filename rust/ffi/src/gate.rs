//! The open / close life cycle of a session and of a model: calls register while they run,
//! `close` refuses new ones and waits for those in flight, and every call after it is `Closed`.
//! Closing twice is fine. A call may register a [`CancelToken`] that `cancel_all` sets.
//!
//! Calls made from inside a call on the same thread (an event or token callback calling back
//! into the model it reports on) must not wait for the call they are inside: this thread's
//! held objects are marked ([`HeldMark`]), a `close` from inside one of its calls closes
//! without waiting, and a lock that would wait for its own thread is refused at once
//! ([`held_by_this_thread`]).

use crate::error::{FfiResult, TesseraError};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Cancellation flag of one call.
#[derive(Debug, Default)]
pub(crate) struct CancelToken(AtomicBool);

impl CancelToken {
    /// Asks the call to stop.
    pub(crate) fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Default)]
struct State {
    closed: bool,
    in_flight: usize,
    active: Vec<Arc<CancelToken>>,
}

thread_local! {
    /// The objects (by address) this thread is inside a call of: gates it holds a pass of,
    /// sequences it holds.
    static HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Marks an object (by address) as held by this thread until the mark drops.
pub(crate) struct HeldMark(usize);

impl HeldMark {
    /// Marks `key` held by this thread.
    pub(crate) fn new(key: usize) -> HeldMark {
        HELD.with(|h| h.borrow_mut().push(key));
        HeldMark(key)
    }
}

impl Drop for HeldMark {
    fn drop(&mut self) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&k| k == self.0) {
                h.remove(i);
            }
        });
    }
}

/// Whether this thread holds the object at `key` (a call from inside one of its calls).
pub(crate) fn held_by_this_thread(key: usize) -> bool {
    HELD.with(|h| h.borrow().contains(&key))
}

/// Locks a mutex, recovering from poisoning (every exported call catches panics, so a panic
/// while a lock was held must not make the object unusable).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The life cycle of one object.
pub(crate) struct Gate {
    /// The `Closed` error's message ("the session is closed").
    closed_message: &'static str,
    /// What a call is, in the debug log of each call registered and done ("compute on CPU").
    call: String,
    state: Mutex<State>,
    idle: Condvar,
}

/// A registered call; unregisters on drop, waking [`Gate::close`].
pub(crate) struct Pass<'a> {
    gate: &'a Gate,
    token: Option<Arc<CancelToken>>,
    _held: HeldMark,
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.gate.state);
        state.in_flight -= 1;
        if let Some(token) = &self.token {
            state.active.retain(|t| !Arc::ptr_eq(t, token));
        }
        log::debug!("{} done ({} in flight)", self.gate.call, state.in_flight);
        if state.in_flight == 0 {
            self.gate.idle.notify_all();
        }
    }
}

impl Gate {
    /// An open gate whose `Closed` errors say `closed_message`, logging its calls as `call`.
    pub(crate) fn new(closed_message: &'static str, call: String) -> Gate {
        Gate { closed_message, call, state: Mutex::new(State::default()), idle: Condvar::new() }
    }

    /// The `Closed` error of this object.
    pub(crate) fn closed_error(&self) -> TesseraError {
        TesseraError::Closed { message: self.closed_message.into() }
    }

    /// Registers a call (with `token`, which [`Gate::cancel_all`] sets); `Closed` once closed.
    pub(crate) fn enter(&self, token: Option<Arc<CancelToken>>) -> FfiResult<Pass<'_>> {
        let mut state = lock(&self.state);
        if state.closed {
            return Err(self.closed_error());
        }
        state.in_flight += 1;
        if let Some(token) = &token {
            state.active.push(token.clone());
        }
        log::debug!("{} registered ({} in flight)", self.call, state.in_flight);
        Ok(Pass { gate: self, token, _held: HeldMark::new(self.key()) })
    }

    /// Calls registered and not finished (running, or waiting for the one running).
    pub(crate) fn in_flight(&self) -> usize {
        lock(&self.state).in_flight
    }

    /// Cancels the tokens of the calls in flight; returns how many there were.
    pub(crate) fn cancel_all(&self) -> usize {
        let state = lock(&self.state);
        for token in &state.active {
            token.cancel();
        }
        state.active.len()
    }

    /// This gate's key among the objects a thread holds.
    fn key(&self) -> usize {
        self as *const Gate as usize
    }

    /// Refuses new calls, runs `on_close` (while no new call can register: e.g. raising a
    /// cancel flag), then waits until the calls in flight finished and returns true; called
    /// from inside one of its own calls (a callback of that call closing the object), it
    /// returns false at once instead of waiting for itself: the object is closed, its calls
    /// in flight end when they return.
    pub(crate) fn close(&self, on_close: impl FnOnce()) -> bool {
        let reentrant = held_by_this_thread(self.key());
        let mut state = lock(&self.state);
        state.closed = true;
        on_close();
        if reentrant {
            log::warn!("{}: closed from inside one of its calls; not waiting for it", self.call);
            return false;
        }
        while state.in_flight > 0 {
            state = self.idle.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        true
    }

    /// Whether [`Gate::close`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// `close` waits for the call in flight and refuses later ones; `cancel_all` reaches the
    /// registered token only.
    #[test]
    fn close_waits_for_calls_and_refuses_new_ones() {
        let gate = Arc::new(Gate::new("the thing is closed", "a call".into()));
        let token = Arc::new(CancelToken::default());
        let (started, release) =
            (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let worker = {
            let (gate, token, started, release) =
                (gate.clone(), token.clone(), started.clone(), release.clone());
            std::thread::spawn(move || {
                let _pass = gate.enter(Some(token.clone())).unwrap();
                started.store(true, Ordering::SeqCst);
                while !release.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                assert!(token.is_cancelled());
            })
        };
        while !started.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let plain = gate.enter(None).unwrap();
        assert_eq!(gate.in_flight(), 2);
        assert_eq!(gate.cancel_all(), 1);
        drop(plain);
        let closer = {
            let gate = gate.clone();
            std::thread::spawn(move || gate.close(|| ()))
        };
        while !gate.is_closed() {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!closer.is_finished(), "close returned with a call in flight");
        let e = gate.enter(None).err().unwrap();
        assert_eq!((e.kind(), e.message()), ("Closed", "the thing is closed"));
        release.store(true, Ordering::SeqCst);
        worker.join().unwrap();
        closer.join().unwrap();
        assert_eq!(gate.in_flight(), 0);
        gate.close(|| ());
    }
}
