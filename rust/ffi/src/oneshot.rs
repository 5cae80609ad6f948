//! A one-value channel whose receiving end is a future: how `compute_async` awaits the thread
//! that does the work, without an async runtime. The foreign side (Kotlin coroutines, Swift
//! tasks) polls the future through uniffi and is woken when the value arrives.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

struct Slot<T> {
    value: Option<T>,
    sender_gone: bool,
    waker: Option<Waker>,
}

/// The sending end; dropping it without sending makes the receiver yield `None`.
pub(crate) struct Sender<T>(Arc<Mutex<Slot<T>>>);

/// The receiving end: a future of `Some(value)`, or `None` if the sender was dropped.
pub(crate) struct Receiver<T>(Arc<Mutex<Slot<T>>>);

/// A new channel.
pub(crate) fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let slot = Arc::new(Mutex::new(Slot { value: None, sender_gone: false, waker: None }));
    (Sender(slot.clone()), Receiver(slot))
}

fn lock<T>(slot: &Mutex<Slot<T>>) -> std::sync::MutexGuard<'_, Slot<T>> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T> Sender<T> {
    /// Sends the value and wakes the receiver.
    pub(crate) fn send(self, value: T) {
        let waker = {
            let mut slot = lock(&self.0);
            slot.value = Some(value);
            slot.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut slot = lock(&self.0);
            slot.sender_gone = true;
            slot.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Future for Receiver<T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut slot = lock(&self.0);
        if let Some(value) = slot.value.take() {
            return Poll::Ready(Some(value));
        }
        if slot.sender_gone {
            return Poll::Ready(None);
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn delivers_and_wakes() {
        let flag = Arc::new(Flag(false.into()));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let (tx, mut rx) = channel::<u32>();
        assert!(Pin::new(&mut rx).poll(&mut cx).is_pending());
        let t = std::thread::spawn(move || tx.send(7));
        t.join().unwrap();
        assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(Pin::new(&mut rx).poll(&mut cx), Poll::Ready(Some(7)));
    }

    #[test]
    fn dropped_sender_gives_none() {
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let (tx, mut rx) = channel::<u32>();
        drop(tx);
        assert_eq!(Pin::new(&mut rx).poll(&mut cx), Poll::Ready(None));
    }
}
