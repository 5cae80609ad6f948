//! Sessions kept for one-shot computes (a `compute` request without a session), so that
//! computing the same document again does not rebuild it.
//!
//! A session keeps the graph of its last successful compute, weights uploaded and repacked
//! (see [`crate::prepared`]). A one-shot compute therefore borrows an idle session opened with
//! the same options, or opens one, and gives it back afterwards: the next one-shot compute of
//! the same document with the same options finds its graph built. At most one idle session is
//! kept per options (the most recently used), so the memory held is that of the last document
//! computed per device and thread count; concurrent one-shot computes open sessions of their
//! own, closed when they are done if one is already kept. [`close_all`] closes the kept
//! sessions (the modules' `invalidate`, through [`crate::lifecycle`]).

use crate::error::FfiResult;
use crate::gate::CancelToken;
use crate::session::{Session, SessionOptions, TensorData};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// What sessions are shared by: the device as asked for (case-insensitive, trimmed), the
/// thread count and the memory budget.
type Key = (String, Option<u32>, Option<u64>);

#[derive(Default)]
struct Pool {
    /// Bumped by [`close_all`]: a session borrowed before is closed when it comes back.
    generation: u64,
    idle: HashMap<Key, Arc<Session>>,
}

fn pool() -> MutexGuard<'static, Pool> {
    static POOL: OnceLock<Mutex<Pool>> = OnceLock::new();
    POOL.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

fn key(options: &SessionOptions) -> Key {
    (options.device.trim().to_ascii_lowercase(), options.threads, options.memory_budget)
}

/// Computes `graph_json` on a kept session for `options` (opened on first use).
pub(crate) fn compute(
    options: SessionOptions,
    graph_json: &str,
    inputs: Vec<TensorData>,
) -> FfiResult<Vec<TensorData>> {
    let key = key(&options);
    let (borrowed, generation) = {
        let mut pool = pool();
        (pool.idle.remove(&key), pool.generation)
    };
    let session = match borrowed {
        Some(s) => s,
        None => Arc::new(Session::open(options)?),
    };
    let result = session.run(Arc::new(CancelToken::default()), graph_json, inputs);
    let surplus = {
        let mut pool = pool();
        if pool.generation != generation {
            Some(session)
        } else {
            // The session just used holds this document: keep it, close the one it replaces.
            pool.idle.insert(key, session)
        }
    };
    if let Some(s) = surplus {
        s.close();
    }
    result
}

/// Closes every kept session and makes sessions borrowed now close when they come back.
/// Returns how many idle sessions were closed.
pub(crate) fn close_all() -> usize {
    let idle: Vec<Arc<Session>> = {
        let mut pool = pool();
        pool.generation += 1;
        pool.idle.drain().map(|(_, s)| s).collect()
    };
    for s in &idle {
        s.close();
    }
    idle.len()
}

/// How many sessions are kept idle now.
#[cfg(test)]
pub(crate) fn idle_count() -> usize {
    pool().idle.len()
}

/// Whether the kept session for `options` has built `n` documents (None: none kept).
#[cfg(test)]
pub(crate) fn builds_of_kept(options: &SessionOptions) -> Option<usize> {
    pool().idle.get(&key(options)).map(|s| s.builds())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::{base64_decode, base64_encode};
    use crate::json_api::handle;
    use serde_json::json;

    fn f32s(b64: &str) -> Vec<f32> {
        base64_decode(b64)
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// One-shot computes (no session in the request) of the same document with the same options
    /// build it once and compute each call's inputs; another document is built on the kept
    /// session, which then holds that one.
    #[test]
    fn one_shot_computes_reuse_the_built_document() {
        // Options of this test only (3 threads), so that no other test shares the kept session.
        let options = json!({"device": "CPU", "threads": 3});
        let doc = |w: [f32; 4]| {
            json!({
                "version": 1,
                "tensors": [
                    {"name": "w", "type": "F32", "shape": [2, 2], "values": w},
                    {"name": "x", "type": "F32", "shape": [2]}
                ],
                "nodes": [{"name": "y", "op": "MUL_MAT", "src": ["w", "x"]}],
                "outputs": ["y"]
            })
        };
        let run = |graph: &serde_json::Value, x: [f32; 2]| {
            let data: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            let request = json!({
                "method": "compute", "graph": graph, "options": options,
                "inputs": [{"name": "x", "dtype": "F32", "shape": [2], "data": base64_encode(&data)}]
            });
            let reply = handle(&request.to_string());
            f32s(reply["ok"]["outputs"][0]["data"].as_str().expect("an output"))
        };
        let key = SessionOptions { device: "CPU".into(), threads: Some(3), ..Default::default() };
        let (a, b) = (doc([1., 2., 3., 4.]), doc([0., 1., 1., 0.]));
        // y[i] = sum_k w[k + 2 i] x[k]
        assert_eq!(run(&a, [1., 0.]), [1., 3.]);
        assert_eq!(run(&a, [0., 1.]), [2., 4.]);
        assert_eq!(run(&a, [1., -1.]), [-1., -1.]);
        assert_eq!(builds_of_kept(&key), Some(1), "the document was rebuilt");
        assert_eq!(run(&b, [5., 7.]), [7., 5.]);
        assert_eq!(builds_of_kept(&key), Some(2));
        assert_eq!(run(&a, [2., 1.]), [4., 10.]);
        assert_eq!(builds_of_kept(&key), Some(3));
        assert!(idle_count() >= 1);
    }
}
