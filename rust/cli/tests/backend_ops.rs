//! The conformance harness in CI: every op on the CPU device against the scalar reference, and
//! a device that computes nothing is caught.

use std::sync::Arc;
use tessera_cli::backend_ops::{self, cases, run_case, Outcome};
use tessera_core::backend::{
    Backend, BackendParams, BackendReg, BufferType, Device, DeviceCaps, DeviceType, GraphPlan,
    MemoryInfo,
};
use tessera_core::registry::Registry;
use tessera_core::{Graph, Result, TensorId};
use tessera_cpu::CpuDevice;

/// Every device of the default registry: the CPU and, where a Vulkan driver is installed (CI
/// installs lavapipe), the GPU.
#[test]
fn every_op_on_every_device_matches_the_reference() {
    let registry = tessera_cli::registry();
    let report = backend_ops::test(&registry, None);
    eprintln!("{}", report.lines.join("\n"));
    assert!(report.failed.is_empty(), "failed:\n{}", report.failed.join("\n"));
    assert!(report.passed >= 90, "only {} cases ran", report.passed);
    let ops: std::collections::BTreeSet<&str> = cases(false).iter().map(|c| c.op).collect();
    for op in [
        "ADD",
        "SUB",
        "MUL",
        "DIV",
        "SCALE",
        "SQR",
        "SQRT",
        "CLAMP",
        "SUM",
        "SUM_ROWS",
        "MEAN",
        "ARGMAX",
        "REPEAT",
        "CONCAT",
        "SSM_CONV",
        "GATED_DELTA_NET",
        "MUL_MAT",
        "GET_ROWS",
        "SOFT_MAX",
        "DIAG_MASK_INF",
        "RMS_NORM",
        "NORM",
        "ROPE",
        "SILU",
        "GELU",
        "RELU",
        "TANH",
        "SIGMOID",
        "SOFTPLUS",
        "SWIGLU",
        "GEGLU",
        "CPY",
        "DUP",
        "CONT",
    ] {
        assert!(ops.contains(op), "no case for {op}");
    }
}

/// A device that claims every op and computes nothing.
struct Lazy;

struct LazyBackend;

impl Device for Lazy {
    fn name(&self) -> String {
        "LAZY".into()
    }
    fn description(&self) -> String {
        "computes nothing".into()
    }
    fn memory(&self) -> MemoryInfo {
        MemoryInfo::default()
    }
    fn device_type(&self) -> DeviceType {
        DeviceType::Accelerator
    }
    fn caps(&self) -> DeviceCaps {
        DeviceCaps::default()
    }
    fn init_backend(&self, _: &BackendParams) -> Result<Box<dyn Backend>> {
        Ok(Box::new(LazyBackend))
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        CpuDevice.buffer_type()
    }
    fn supports_op(&self, _: &Graph, _: TensorId) -> bool {
        true
    }
    fn supports_buffer_type(&self, bt: &dyn BufferType) -> bool {
        bt.is_host()
    }
}

impl Backend for LazyBackend {
    fn name(&self) -> String {
        "LAZY".into()
    }
    fn device(&self) -> Arc<dyn Device> {
        Arc::new(Lazy)
    }
    fn graph_plan_create(&mut self, _: &Graph, _: &[TensorId]) -> Result<Box<dyn GraphPlan>> {
        unimplemented!()
    }
    fn graph_plan_compute(&mut self, _: &Graph, _: &dyn GraphPlan) -> Result<()> {
        unimplemented!()
    }
    fn compute_nodes(&mut self, _: &Graph, _: &[TensorId]) -> Result<()> {
        Ok(())
    }
}

struct LazyReg;

impl BackendReg for LazyReg {
    fn name(&self) -> String {
        "LAZY".into()
    }
    fn devices(&self) -> Vec<Arc<dyn Device>> {
        vec![Arc::new(Lazy)]
    }
}

#[test]
fn a_wrong_device_fails_the_harness() {
    let all = cases(false);
    let mm = all.iter().find(|c| c.op == "MUL_MAT").unwrap();
    assert!(matches!(run_case(mm, &Lazy), Outcome::Fail(_)));
    let mut reg = Registry::new();
    reg.register(Arc::new(LazyReg));
    let report = backend_ops::test(&reg, Some("SOFT_MAX"));
    assert_eq!(report.passed, 0);
    assert_eq!(report.failed.len(), 3);
}

#[test]
fn support_lists_every_case() {
    let text = backend_ops::support(&tessera_cli::cpu_registry()).unwrap();
    assert!(text.contains("MUL_MAT"));
    assert!(!text.contains(" no\n"), "the CPU supports everything:\n{text}");
}

#[test]
fn the_demo_computes_and_checks_its_graph() {
    let (text, ok) = tessera_cli::info::info(&tessera_cli::registry()).unwrap();
    assert!(ok, "{text}");
    assert!(text.contains("check against f64 reference: OK"), "{text}");
    let (_, ok) = tessera_cli::info::info(&tessera_cli::cpu_registry()).unwrap();
    assert!(ok);
}

/// Each device's table ends with its total, and the totals are repeated at the end: the CPU
/// supports every case.
#[test]
fn support_totals_count_each_device() {
    let text = backend_ops::support(&tessera_cli::cpu_registry()).unwrap();
    let n = cases(false).len();
    let total = format!("CPU: {n} of {n} cases supported");
    assert_eq!(text.matches(&total).count(), 2, "{text}");
    assert!(text.contains(&format!("totals:\n  {total}\n")), "{text}");
}

/// A writer that records, at each flush, how many lines it has received.
#[derive(Default)]
struct FlushLog {
    text: Vec<u8>,
    lines_at_flush: Vec<usize>,
}

impl std::io::Write for FlushLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.lines_at_flush.push(self.text.iter().filter(|&&b| b == b'\n').count());
        Ok(())
    }
}

/// `backend-ops perf` streams: a heading per device, then one line per case, each flushed as
/// soon as it is measured (the n-th flush has n lines).
#[test]
fn perf_flushes_each_line_as_it_is_measured() {
    let mut log = FlushLog::default();
    backend_ops::perf(&tessera_cli::cpu_registry(), Some("SCALE"), Some(1), &mut log).unwrap();
    let text = String::from_utf8(log.text).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let n = cases(true).iter().filter(|c| c.op == "SCALE").count();
    assert!(n > 0);
    assert_eq!(lines.len(), n + 1, "{text}");
    assert!(lines[0].starts_with(&format!("CPU: {n} case(s)")), "{text}");
    assert!(lines[1..].iter().all(|l| l.starts_with("CPU") && l.contains(" ms ")), "{text}");
    assert_eq!(log.lines_at_flush, (1..=n + 1).collect::<Vec<_>>());
}

/// `backend-ops test` hands every result line on as its case finishes: the streamed lines are
/// the report's, in order, one per case.
#[test]
fn test_streams_every_line() {
    let mut streamed = Vec::new();
    let report =
        backend_ops::test_streaming(&tessera_cli::cpu_registry(), Some("SCALE"), &mut |l| {
            streamed.push(l.to_string())
        });
    let n = cases(false).iter().filter(|c| c.op == "SCALE").count();
    assert!(n > 0);
    assert_eq!(streamed.len(), n);
    assert_eq!(streamed, report.lines);
    assert_eq!(report.passed, n, "{streamed:?}");
}
