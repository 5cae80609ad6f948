//! Objects held for a foreign caller under numbers: the protocol's sessions and models, and a
//! session's loaded graphs. Numbers are never reused, so a number handed out before and removed
//! since answers `Closed` (the object is gone), and one never handed out `InvalidArgument`.

use crate::error::{FfiResult, TesseraError};
use std::collections::BTreeMap;

/// How a table's errors name its objects.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Names {
    /// The object, before its number in the `Closed` message ("session" 3 is closed).
    pub(crate) noun: &'static str,
    /// What happened to a removed one ("is closed", "was released").
    pub(crate) gone: &'static str,
    /// The object in the message for a number never handed out ("unknown graph handle 9").
    pub(crate) unknown: &'static str,
}

/// Objects by number, numbered from 1.
#[derive(Debug)]
pub(crate) struct HandleTable<T> {
    names: Names,
    next: u64,
    open: BTreeMap<u64, T>,
}

impl<T> HandleTable<T> {
    /// An empty table whose errors use `names`.
    pub(crate) const fn new(names: Names) -> HandleTable<T> {
        HandleTable { names, next: 1, open: BTreeMap::new() }
    }

    /// Keeps `value` and returns its number.
    pub(crate) fn insert(&mut self, value: T) -> u64 {
        let id = self.next;
        self.next += 1;
        self.open.insert(id, value);
        id
    }

    /// Whether `id` was handed out (removed since or not).
    fn issued(&self, id: u64) -> bool {
        (1..self.next).contains(&id)
    }

    /// The error for `id`, which is not open.
    fn missing(&self, id: u64) -> TesseraError {
        missing(self.names, self.issued(id), id)
    }

    /// The object numbered `id`.
    pub(crate) fn get(&self, id: u64) -> FfiResult<&T> {
        self.open.get(&id).ok_or_else(|| self.missing(id))
    }

    /// The object numbered `id`, to change.
    pub(crate) fn get_mut(&mut self, id: u64) -> FfiResult<&mut T> {
        let (names, issued) = (self.names, self.issued(id));
        self.open.get_mut(&id).ok_or_else(|| missing(names, issued, id))
    }

    /// Takes the object numbered `id` out: `None` when it was removed before (removing twice is
    /// fine), an error for a number never handed out.
    pub(crate) fn remove(&mut self, id: u64) -> FfiResult<Option<T>> {
        if !self.issued(id) {
            return Err(self.missing(id));
        }
        Ok(self.open.remove(&id))
    }

    /// Takes every object out (their numbers answer `Closed` from then on).
    pub(crate) fn drain(&mut self) -> Vec<T> {
        std::mem::take(&mut self.open).into_values().collect()
    }
}

/// The error for a number `id` that is not open (`issued`: handed out, and removed since).
fn missing(names: Names, issued: bool, id: u64) -> TesseraError {
    let Names { noun, gone, unknown } = names;
    if issued {
        TesseraError::Closed { message: format!("{noun} {id} {gone}") }
    } else {
        TesseraError::invalid_argument(format!("unknown {unknown} {id}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THINGS: Names = Names { noun: "thing", gone: "is gone", unknown: "thing number" };

    #[test]
    fn removed_numbers_are_closed_and_others_unknown() {
        let mut t = HandleTable::new(THINGS);
        let (a, b) = (t.insert('a'), t.insert('b'));
        assert_eq!((a, b), (1, 2));
        assert_eq!(t.get(a), Ok(&'a'));
        *t.get_mut(b).unwrap() = 'c';
        assert_eq!(t.remove(b), Ok(Some('c')));
        assert_eq!(t.remove(b), Ok(None));
        let closed = t.get(b).unwrap_err();
        assert_eq!((closed.kind(), closed.message()), ("Closed", "thing 2 is gone"));
        for never in [0, 3] {
            let e = t.remove(never).unwrap_err();
            assert_eq!(e.kind(), "InvalidArgument");
            assert_eq!(e.message(), format!("unknown thing number {never}"));
        }
        assert_eq!(t.drain(), vec!['a']);
        assert_eq!(t.get(a).unwrap_err().kind(), "Closed");
        // Numbers are not reused.
        assert_eq!(t.insert('d'), 3);
    }
}
