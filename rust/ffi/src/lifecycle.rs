//! Releasing everything the native side holds for JavaScript: what the React Native modules call
//! from `invalidate` (a JS reload, the app's bridge torn down), so that native memory does not
//! outlive the JS objects that used it.

use crate::error::guard_or;

/// Closes every session opened through the JSON protocol (`openSession`), the sessions kept
/// for one-shot computes and every model loaded through the protocol (`loadModel`): computes
/// and generations in flight are cancelled first, so this returns soon after their next check;
/// loads in progress end with `Cancelled` (see [`crate::json_model::release_all_models`]).
/// Returns how many sessions and models were closed. Their numbers answer `Closed` from then on;
/// new ones can be opened.
#[uniffi::export]
pub fn close_all_sessions() -> u64 {
    guard_or("closeAllSessions", || 0, close_all)
}

/// The body of [`close_all_sessions`] (and of the JSON method `closeAllSessions`).
pub(crate) fn close_all() -> u64 {
    let sessions = crate::json_api::take_open_sessions();
    for s in &sessions {
        s.cancel_all();
    }
    for s in &sessions {
        s.close();
    }
    (sessions.len()
        + crate::oneshot_sessions::close_all()
        + crate::json_model::release_all_models()) as u64
}
