//! Memory and threads under hostile requests (issue 18, findings 4 and 5), measured on the
//! process itself (Linux: /proc/self): a graph over the memory budget is refused before
//! anything is allocated, a graph within it touches about its plan (not twice that for the
//! reference's row scratch), and sessions share the CPU's worker threads. One test at a time
//! (a lock), since resident memory and thread counts are the whole process's.

use serde_json::{json, Value};
use std::ffi::{CStr, CString};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn call(request: &Value) -> Value {
    let c = CString::new(request.to_string()).unwrap();
    // SAFETY: a valid NUL-terminated string; the response is freed once below.
    unsafe {
        let response = tessera_ffi::c_api::tessera_call_json(c.as_ptr());
        let text = CStr::from_ptr(response).to_str().unwrap().to_string();
        tessera_ffi::c_api::tessera_free_string(response);
        serde_json::from_str(&text).unwrap()
    }
}

/// A field of /proc/self/status in bytes (VmRSS, VmHWM).
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Resets the peak resident size (VmHWM) to the current one.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("clear_refs (Linux 4.0 or later)");
}

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Waits up to 10 s for the thread count to drop to at most `n` (ended pools' threads exit on
/// their own time); returns the count then.
fn threads_settle_to(n: usize) -> usize {
    let start = Instant::now();
    while threads_now() > n && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    threads_now()
}

/// REPEAT of one value to `n` F32 values, then SUM: the issue's 328-byte request.
fn repeat_sum(n: u64) -> Value {
    json!({
        "version": 1,
        "tensors": [{"name": "a", "type": "F32", "shape": [1], "values": [0.25]}],
        "nodes": [{"name": "r", "op": "REPEAT", "src": ["a"], "params": {"shape": [n]}},
                  {"name": "s", "op": "SUM", "src": ["r"]}],
        "outputs": ["s"]
    })
}

fn open(options: Value) -> u64 {
    let r = call(&json!({"method": "openSession", "options": options}));
    r["ok"]["session"].as_u64().unwrap_or_else(|| panic!("{r}"))
}

const MIB: u64 = 1 << 20;

/// Finding 4: REPEAT to 1 GiB then SUM on a session with a 300 MiB budget is refused with
/// `OutOfMemory` naming what it needs, and resident memory does not grow (less than 16 MiB);
/// a budget that holds a 128 MiB REPEAT computes the right sum with a peak of about the plan
/// (less than 1.25 times it: the reference's SUM reads its row in spans, it took another whole
/// row before); and with the default budget (a fraction of free memory), a request for 2^48
/// bytes is refused without allocating.
#[test]
fn graphs_over_the_budget_are_refused_before_allocating() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let s = open(json!({"device": "CPU", "threads": 2, "memoryBudget": 300 * MIB}));
    let before = status_bytes("VmRSS:");
    reset_peak();
    let r = call(&json!({"method": "compute", "session": s, "graph": repeat_sum(1 << 28)}));
    assert_eq!(r["error"]["kind"], "OutOfMemory", "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(message.contains("107374") && message.contains(&(300 * MIB).to_string()), "{message}");
    let grown = status_bytes("VmHWM:").saturating_sub(before);
    assert!(grown < 16 * MIB, "refused, yet the peak grew by {grown} bytes");

    let n = 32 << 20; // 128 MiB of F32
    let before = status_bytes("VmRSS:");
    reset_peak();
    let r = call(&json!({"method": "compute", "session": s, "graph": repeat_sum(n)}));
    assert!(r["ok"].is_object(), "{r}");
    let out = tessera_ffi::document::base64_decode(r["ok"]["outputs"][0]["data"].as_str().unwrap())
        .unwrap();
    // 2^25 x 0.25, exact in f64 and in f32.
    assert_eq!(f32::from_le_bytes([out[0], out[1], out[2], out[3]]), (n / 4) as f32);
    let peak = status_bytes("VmHWM:").saturating_sub(before);
    let plan = n * 4;
    assert!(peak >= plan / 2, "the 128 MiB REPEAT was not resident? peak grew by {peak}");
    assert!(peak < plan + plan / 4, "peak grew by {peak} bytes for a plan of {plan}");
    call(&json!({"method": "closeSession", "session": s}));

    let s = open(json!({"device": "CPU", "threads": 2}));
    let before = status_bytes("VmRSS:");
    reset_peak();
    let r = call(&json!({"method": "compute", "session": s, "graph": {
        "version": 1,
        "tensors": [{"name": "a", "type": "F32", "shape": [1], "values": [1]}],
        "nodes": [{"name": "r", "op": "REPEAT", "src": ["a"], "params": {"shape": [1u64 << 23, 1u64 << 23]}},
                  {"name": "s", "op": "SUM", "src": ["r"]}],
        "outputs": ["s"]}}));
    assert_eq!(r["error"]["kind"], "OutOfMemory", "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("281474976710"), "{r}");
    let grown = status_bytes("VmHWM:").saturating_sub(before);
    assert!(grown < 16 * MIB, "refused, yet the peak grew by {grown} bytes");
    call(&json!({"method": "closeSession", "session": s}));
}

/// Finding 5: sessions share the CPU's worker threads. Ten sessions of 8 threads each start
/// one set of workers between them (they started 80 threads); a 512-thread session's workers go
/// away when it closes (each session kept its pool until closed, and there was one per session).
/// A set of workers for `n` threads is a crew of `n - 1` helpers (the calling thread is the
/// n-th).
#[test]
fn sessions_share_the_cpu_worker_threads() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let graph = repeat_sum(1 << 16);
    // Every device registered (a GPU driver may start threads of its own), then the count.
    call(&json!({"method": "devices"}));
    std::thread::sleep(Duration::from_millis(200));
    let base = threads_now();
    let sessions: Vec<u64> =
        (0..10).map(|_| open(json!({"device": "CPU", "threads": 8}))).collect();
    for &s in &sessions {
        let r = call(&json!({"method": "compute", "session": s, "graph": graph}));
        assert!(r["ok"].is_object(), "{r}");
    }
    let workers = |n: usize| n - 1;
    let with_ten = threads_now();
    assert!(
        with_ten <= base + workers(8),
        "10 sessions of 8 threads: {base} threads before, {with_ten} now"
    );
    assert!(
        with_ten >= base + workers(8) - 1,
        "the 8-thread workers are running: {base} threads before, {with_ten} now"
    );

    let big = open(json!({"device": "CPU", "threads": 512}));
    let r = call(&json!({"method": "compute", "session": big, "graph": graph}));
    assert!(r["ok"].is_object(), "{r}");
    // The 8-thread pool was replaced by one of 512; its threads end on their own time.
    let with_big = threads_settle_to(base + workers(512));
    assert!(with_big <= base + workers(512), "{with_big} threads with the 512-thread session");
    assert!(with_big >= base + 500, "{with_big} threads with the 512-thread session");
    call(&json!({"method": "closeSession", "session": big}));
    // Back to the 8-thread sessions' pool once they compute again.
    for &s in &sessions {
        call(&json!({"method": "compute", "session": s, "graph": graph}));
    }
    let after = threads_settle_to(base + workers(8));
    assert!(
        after <= base + workers(8),
        "closing the 512-thread session left {after} threads (base {base})"
    );
    for s in sessions {
        call(&json!({"method": "closeSession", "session": s}));
    }
    let end = threads_settle_to(base);
    assert!(end <= base, "every session closed: {end} threads, {base} before");
}
