//! The backend model on the CPU device: registry, buffers, the graph allocator, the scheduler
//! (with a test device that supports only some ops), abort and eval callbacks.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tessera_core::alloc::GraphAllocator;
use tessera_core::backend::{
    AbortCallback, Backend, BackendParams, BackendReg, Buffer, BufferType, BufferUsage, Device,
    DeviceCaps, DeviceType, GraphPlan, HostMemory, MemoryInfo,
};
use tessera_core::registry::Registry;
use tessera_core::sched::Scheduler;
use tessera_core::tensor_data::{get_f32, set_f32};
use tessera_core::{DType, Error, Graph, Op, Result, TensorId};
use tessera_cpu::buffer::{
    allocate_all, CpuBufferType, HostBuffer, OwnedHostMemory, CPU_ALIGNMENT, HUGE_PAGE_SIZE,
};
use tessera_cpu::{reference, CpuBackend, CpuBackendReg, CpuDevice};

// ---------------------------------------------------------------------------------------------
// A test device: host memory of its own buffer type, computing only ADD and MUL (and views).

#[derive(Debug)]
struct TestBufferType;

impl BufferType for TestBufferType {
    fn name(&self) -> String {
        "TEST".into()
    }
    fn alloc(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(TestBuffer(HostBuffer::new(size)?)))
    }
    fn alignment(&self) -> usize {
        32
    }
    fn is_host(&self) -> bool {
        false
    }
    fn device_name(&self) -> String {
        "TEST".into()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Host memory that claims not to be host memory, so that the CPU cannot read it directly.
#[derive(Debug)]
struct TestBuffer(HostBuffer);

impl Buffer for TestBuffer {
    fn name(&self) -> String {
        "TEST".into()
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(TestBufferType)
    }
    fn size(&self) -> usize {
        self.0.size()
    }
    fn usage(&self) -> BufferUsage {
        self.0.usage()
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.0.set_usage(usage)
    }
    fn host_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
        None
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.0.write(offset, data)
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.0.read(offset, out)
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.0.fill(offset, len, value)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct TestDevice {
    computed: Arc<Mutex<Vec<String>>>,
    software: bool,
}

impl Device for TestDevice {
    fn name(&self) -> String {
        "TEST".into()
    }
    fn description(&self) -> String {
        "test device: ADD and MUL only".into()
    }
    fn memory(&self) -> MemoryInfo {
        MemoryInfo { free: 1 << 30, total: 1 << 30 }
    }
    fn device_type(&self) -> DeviceType {
        DeviceType::Gpu
    }
    fn is_software(&self) -> bool {
        self.software
    }
    fn caps(&self) -> DeviceCaps {
        DeviceCaps::default()
    }
    fn init_backend(&self, _params: &BackendParams) -> Result<Box<dyn Backend>> {
        Ok(Box::new(TestBackend { computed: self.computed.clone() }))
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(TestBufferType)
    }
    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool {
        let t = graph.tensor(id);
        matches!(t.op, Op::Add | Op::Mul) || t.op.is_view()
    }
    fn supports_buffer_type(&self, bt: &dyn BufferType) -> bool {
        bt.name() == "TEST"
    }
}

struct TestBackend {
    computed: Arc<Mutex<Vec<String>>>,
}

impl Backend for TestBackend {
    fn name(&self) -> String {
        "TEST".into()
    }
    fn device(&self) -> Arc<dyn Device> {
        Arc::new(TestDevice { computed: self.computed.clone(), software: false })
    }
    fn graph_plan_create(&mut self, _g: &Graph, _n: &[TensorId]) -> Result<Box<dyn GraphPlan>> {
        Err(Error::InvalidArgument("no plans".into()))
    }
    fn graph_plan_compute(&mut self, _g: &Graph, _p: &dyn GraphPlan) -> Result<()> {
        Err(Error::InvalidArgument("no plans".into()))
    }
    /// Computes by copying operands to host memory, running the reference, and copying back.
    fn compute_nodes(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        for &id in nodes {
            let t = graph.tensor(id);
            if !t.op.computes() {
                continue;
            }
            assert!(matches!(t.op, Op::Add | Op::Mul), "TEST asked to compute {}", t.op.name());
            for &s in &t.src {
                let st = graph.storage_of(s).expect("operand allocated");
                assert_eq!(
                    st.buffer.name(),
                    "TEST",
                    "operand {} not copied to TEST",
                    graph.tensor(s).label(s)
                );
            }
            let mut local = Graph::new();
            let a =
                local.new_tensor(graph.tensor(t.src[0]).dtype(), &graph.tensor(t.src[0]).ne())?;
            let b =
                local.new_tensor(graph.tensor(t.src[1]).dtype(), &graph.tensor(t.src[1]).ne())?;
            let r = if matches!(t.op, Op::Add) { local.add(a, b)? } else { local.mul(a, b)? };
            allocate_all(&mut local)?;
            set_f32(&local, a, &get_f32(graph, t.src[0])?)?;
            set_f32(&local, b, &get_f32(graph, t.src[1])?)?;
            reference::compute_graph(&local, &|| false)?;
            tessera_core::tensor_data::set_f32(graph, id, &get_f32(&local, r)?)?;
            self.computed.lock().unwrap().push(t.op.name().to_string());
        }
        Ok(())
    }
}

struct TestReg {
    computed: Arc<Mutex<Vec<String>>>,
}

impl BackendReg for TestReg {
    fn name(&self) -> String {
        "TEST".into()
    }
    fn devices(&self) -> Vec<Arc<dyn Device>> {
        vec![Arc::new(TestDevice { computed: self.computed.clone(), software: false })]
    }
}

// ---------------------------------------------------------------------------------------------

#[test]
fn registry_lookups_init_best_and_failed_registration() {
    let computed = Arc::new(Mutex::new(Vec::new()));
    let mut reg = Registry::new();
    assert!(!reg.register_with("broken", || Err(Error::Backend {
        backend: "X".into(),
        message: "driver crashed".into()
    })));
    assert!(!reg.register_with("panicking", || panic!("driver panicked")));
    assert!(!reg.register_with("absent", || Ok(None)));
    reg.register(CpuBackendReg::shared());
    assert!(reg.register_with("TEST", || Ok(Some(
        Arc::new(TestReg { computed: computed.clone() }) as Arc<dyn BackendReg>
    ))));
    assert_eq!(reg.skipped().len(), 3);
    assert!(reg.skipped()[0].contains("driver crashed"));
    assert!(reg.skipped()[1].contains("driver panicked"));
    assert_eq!(reg.devices().len(), 2);
    assert_eq!(reg.regs().len(), 2);
    assert_eq!(reg.device(0).unwrap().name(), "CPU");
    assert_eq!(reg.device_by_name("test").unwrap().name(), "TEST");
    assert_eq!(reg.device_by_type(DeviceType::Cpu).unwrap().name(), "CPU");
    assert!(reg.reg_by_name("cpu").is_some());
    assert!(matches!(
        reg.init_by_name("NPU", &BackendParams::default()),
        Err(Error::UnknownDevice(_))
    ));
    assert!(matches!(
        reg.init_by_type(DeviceType::Accelerator, &BackendParams::default()),
        Err(Error::UnknownDevice(_))
    ));
    assert_eq!(reg.init_by_type(DeviceType::Cpu, &BackendParams::default()).unwrap().name(), "CPU");
    // GPU first, CPU last.
    assert_eq!(reg.init_best(&BackendParams::default()).unwrap().name(), "TEST");
    let cpu_only = {
        let mut r = Registry::new();
        r.register(CpuBackendReg::shared());
        r
    };
    assert_eq!(cpu_only.init_best(&BackendParams::default()).unwrap().name(), "CPU");
    // A software GPU (lavapipe) is listed but never preferred over the CPU.
    struct SoftReg(Arc<Mutex<Vec<String>>>);
    impl BackendReg for SoftReg {
        fn name(&self) -> String {
            "SOFT".into()
        }
        fn devices(&self) -> Vec<Arc<dyn Device>> {
            vec![Arc::new(TestDevice { computed: self.0.clone(), software: true })]
        }
    }
    let mut soft = Registry::new();
    soft.register(Arc::new(SoftReg(computed.clone())));
    soft.register(CpuBackendReg::shared());
    assert_eq!(soft.init_best(&BackendParams::default()).unwrap().name(), "CPU");
    assert_eq!(soft.devices_by_preference().last().unwrap().name(), "TEST");
}

#[test]
fn cpu_device_props_are_real() {
    let d = CpuDevice;
    let props = d.props();
    assert_eq!(props.name, "CPU");
    assert!(!props.description.is_empty());
    assert_eq!(props.device_type, DeviceType::Cpu);
    #[cfg(target_os = "linux")]
    {
        assert!(props.memory.total > 0, "MemTotal read");
        assert!(props.memory.free <= props.memory.total);
    }
    assert!(props.caps.buffer_from_host_ptr);
    let features = CpuBackendReg.features();
    assert!(!features.is_empty());
    let extra = CpuBackendReg.extra_buffer_types(&CpuDevice);
    assert_eq!(
        extra.iter().map(|b| b.name()).collect::<Vec<_>>(),
        tessera_cpu::kernels::repack::repack_buffer_type()
            .map(|b| b.name())
            .into_iter()
            .collect::<Vec<_>>()
    );
    let tier = features.iter().find(|(k, _)| k == "TIER_Q4_0").map(|(_, v)| v.clone());
    assert_eq!(tier.as_deref(), Some(tessera_cpu::kernels::tier::tier_name(DType::Q4_0)));
}

#[test]
fn thread_counts_are_checked() {
    assert!(matches!(CpuBackend::new(Some(0)), Err(Error::InvalidArgument(_))));
    assert!(matches!(CpuBackend::new(Some(100_000)), Err(Error::InvalidArgument(_))));
    let mut b = CpuBackend::new(Some(2)).unwrap();
    assert_eq!(b.threads(), 2);
    assert!(b.set_n_threads(0).is_err());
    b.set_n_threads(1).unwrap();
    assert_eq!(b.threads(), 1);
    assert!(CpuBackend::new(None).unwrap().threads() >= 1);
}

#[test]
fn buffers_align_check_bounds_wrap_and_clear() {
    let bt = CpuBufferType;
    assert_eq!(bt.alignment(), CPU_ALIGNMENT);
    assert!(bt.is_host());
    for size in [1usize, 3, 64, 1000] {
        let b = bt.alloc(size).unwrap();
        assert_eq!(b.host_ptr().unwrap().as_ptr() as usize % 64, 0);
        assert_eq!(b.size(), size);
    }
    // Large buffers: aligned to the huge page size (and advised to use huge pages), zeroed.
    let big = bt.alloc(HUGE_PAGE_SIZE + 5).unwrap();
    assert_eq!(big.host_ptr().unwrap().as_ptr() as usize % HUGE_PAGE_SIZE, 0);
    let mut tail = [1u8; 64];
    big.read(HUGE_PAGE_SIZE - 59, &mut tail).unwrap();
    assert!(tail.iter().all(|&x| x == 0));
    big.write(HUGE_PAGE_SIZE + 1, &[5, 6, 7, 8]).unwrap();
    big.read(HUGE_PAGE_SIZE + 1, &mut tail[..4]).unwrap();
    assert_eq!(tail[..4], [5, 6, 7, 8]);
    assert!(matches!(big.write(HUGE_PAGE_SIZE + 2, &[0; 4]), Err(Error::OutOfBounds(_))));
    drop(big);

    let b = bt.alloc(16).unwrap();
    b.write(4, &[1, 2, 3, 4]).unwrap();
    let mut out = [0u8; 6];
    b.read(3, &mut out).unwrap();
    assert_eq!(out, [0, 1, 2, 3, 4, 0]);
    assert!(matches!(b.write(14, &[1, 2, 3]), Err(Error::OutOfBounds(_))));
    assert!(matches!(b.read(usize::MAX, &mut out), Err(Error::OutOfBounds(_))));
    assert!(b.fill(10, 7, 0).is_err());
    b.clear(0xAB).unwrap();
    let mut all = [0u8; 16];
    b.read(0, &mut all).unwrap();
    assert!(all.iter().all(|&x| x == 0xAB));
    b.set_usage(BufferUsage::Weights);
    assert_eq!(b.usage(), BufferUsage::Weights);

    // Wrapping caller memory: the same bytes, no copy.
    let mem = Arc::new(OwnedHostMemory::new(vec![7u8; 256]));
    let addr = mem.ptr().as_ptr() as usize;
    let wrapped = CpuDevice.buffer_from_host_memory(mem.clone(), 256).unwrap();
    assert_eq!(wrapped.host_ptr().unwrap().as_ptr() as usize, addr);
    wrapped.write(0, &[9]).unwrap();
    // SAFETY: the memory is alive (held by `mem`) and 256 bytes long.
    assert_eq!(unsafe { *mem.ptr().as_ptr() }, 9);

    // Tensor-level bounds.
    let mut g = Graph::new();
    let t = g.new_tensor(DType::F32, &[4]).unwrap();
    assert!(matches!(tessera_core::tensor_data::get_tensor(&g, t), Err(Error::NotAllocated(_))));
    allocate_all(&mut g).unwrap();
    assert!(matches!(set_f32(&g, t, &[1.0; 5]), Err(Error::DataLength { .. })));
    assert!(matches!(
        tessera_core::tensor_data::write_tensor(&g, t, 12, &[0; 8]),
        Err(Error::OutOfBounds(_))
    ));
}

/// A chain of element-wise ops over a large tensor.
fn chain(g: &mut Graph, n: usize, len: usize) -> (TensorId, TensorId) {
    let x = g.input("x", DType::F32, &[len]).unwrap();
    let mut cur = x;
    for i in 0..n {
        cur = match i % 3 {
            0 => g.scale(cur, 1.5).unwrap(),
            1 => g.silu(cur).unwrap(),
            _ => g.add(cur, x).unwrap(),
        };
    }
    g.set_output(cur).unwrap();
    (x, cur)
}

#[test]
fn allocator_reuses_memory_and_keeps_results() {
    let len = 4096;
    let mut g = Graph::new();
    let (x, out) = chain(&mut g, 12, len);
    let mut alloc = GraphAllocator::new(CpuBufferType::shared());
    let plan = alloc.plan(&g);
    let measured = alloc.measure(&g);
    assert_eq!(plan.size, measured);
    let sum: usize = plan.unshared_size;
    // Input + at most two live temporaries, versus 13 tensors.
    assert!(measured <= 3 * len * 4, "peak {measured} bytes for a chain, sum {sum}");
    assert!(measured * 3 < sum, "peak {measured} not well below the sum {sum}");
    assert!(!plan.in_place.is_empty(), "element-wise chain computed in place");
    alloc.alloc_graph(&mut g).unwrap();
    let xs: Vec<f32> = (0..len).map(|i| (i as f32 / len as f32) - 0.5).collect();
    set_f32(&g, x, &xs).unwrap();
    CpuBackend::new(Some(1)).unwrap().graph_compute(&g).unwrap();
    let got = get_f32(&g, out).unwrap();
    // The same graph with every tensor in its own memory.
    let mut g2 = Graph::new();
    let (x2, out2) = chain(&mut g2, 12, len);
    allocate_all(&mut g2).unwrap();
    set_f32(&g2, x2, &xs).unwrap();
    reference::compute_graph(&g2, &|| false).unwrap();
    // SILU and ADD run on the vectorized rows: equal to the reference within 1e-7 (NMSE).
    let want = get_f32(&g2, out2).unwrap();
    let num: f64 = got.iter().zip(&want).map(|(a, b)| f64::from(a - b).powi(2)).sum();
    let den: f64 = want.iter().map(|b| f64::from(*b).powi(2)).sum();
    assert!(num <= 1e-7 * den, "nmse {:e}", num / den);
    // The input survives.
    assert_eq!(get_f32(&g, x).unwrap(), xs);
}

#[test]
fn allocator_never_reuses_inputs_outputs_or_weights() {
    let mut g = Graph::new();
    let w = g.weight("w", DType::F32, &[64, 64]).unwrap();
    let x = g.input("x", DType::F32, &[64, 1]).unwrap();
    let y = g.mul_mat(w, x).unwrap();
    let o1 = g.scale(y, 2.0).unwrap();
    g.set_output(o1).unwrap();
    let z = g.silu(o1).unwrap();
    let o2 = g.scale(z, 3.0).unwrap();
    g.set_output(o2).unwrap();
    let plan = GraphAllocator::new(CpuBufferType::shared()).plan(&g);
    let range = |id: TensorId| {
        let off = plan.offsets[id.index()].unwrap();
        off..off + g.tensor(id).nbytes()
    };
    // Nothing placed after an input, weight or output may overlap it (an output may take over
    // the memory of a dead temporary computed before it: that is in-place computation).
    for keep in [w, x, o1] {
        for other in g.ids() {
            if other <= keep || plan.offsets[other.index()].is_none() {
                continue;
            }
            let (a, b) = (range(keep), range(other));
            assert!(a.end <= b.start || b.end <= a.start, "{keep} overlaps {other}");
        }
    }
}

fn mixed_graph(g: &mut Graph) -> (TensorId, TensorId, TensorId) {
    let a = g.input("a", DType::F32, &[8, 4]).unwrap();
    let b = g.input("b", DType::F32, &[8, 4]).unwrap();
    let s = g.add(a, b).unwrap(); // TEST
    let m = g.mul(s, a).unwrap(); // TEST
    let n = g.rms_norm(m, 1e-6).unwrap(); // CPU
    let t = g.transpose(n).unwrap(); // view on CPU
    let c = g.cont(t).unwrap(); // CPU
    let back = g.reshape(c, &[8, 4]).unwrap();
    let o = g.add(back, b).unwrap(); // TEST again
    g.set_output(o).unwrap();
    (a, b, o)
}

#[test]
fn scheduler_splits_copies_and_matches_cpu_alone() {
    let computed = Arc::new(Mutex::new(Vec::new()));
    let test_dev = TestDevice { computed: computed.clone(), software: false };
    let backends: Vec<Box<dyn Backend>> = vec![
        test_dev.init_backend(&BackendParams::default()).unwrap(),
        Box::new(CpuBackend::new(Some(1)).unwrap()),
    ];
    let mut sched = Scheduler::new(backends).unwrap();
    let mut g = Graph::new();
    let (a, b, o) = mixed_graph(&mut g);
    sched.alloc_graph(&mut g).unwrap();
    let av: Vec<f32> = (0..32).map(|i| i as f32 * 0.1 - 1.0).collect();
    let bv: Vec<f32> = (0..32).map(|i| (i as f32 * 0.37).sin()).collect();
    set_f32(&g, a, &av).unwrap();
    set_f32(&g, b, &bv).unwrap();
    sched.compute().unwrap();
    let got = get_f32(&g, o).unwrap();
    let splits = sched.splits().to_vec();
    let backends_of: Vec<usize> = splits.iter().map(|s| s.backend).collect();
    assert_eq!(backends_of, vec![0, 1, 0], "TEST, CPU, TEST");
    assert_eq!(splits[0].nodes.len(), 2);
    // Exactly one tensor crosses each cut: MUL's result to the CPU, CONT's back to TEST (the
    // RESHAPE that TEST reads is a view of it; `b` lives on TEST already).
    let find = |op: &str| g.ids().find(|&id| g.tensor(id).op.name() == op).unwrap();
    assert!(splits[0].inputs.is_empty(), "TEST's first split reads only its own inputs");
    assert_eq!(splits[1].inputs, [find("MUL")], "MUL's result copied to the CPU");
    assert_eq!(splits[2].inputs, [find("CONT")], "CONT's result copied back to TEST");
    assert_eq!(computed.lock().unwrap().as_slice(), ["ADD", "MUL", "ADD"]);

    let mut g2 = Graph::new();
    let (a2, b2, o2) = mixed_graph(&mut g2);
    allocate_all(&mut g2).unwrap();
    set_f32(&g2, a2, &av).unwrap();
    set_f32(&g2, b2, &bv).unwrap();
    CpuBackend::new(Some(1)).unwrap().graph_compute(&g2).unwrap();
    assert_eq!(got, get_f32(&g2, o2).unwrap());
}

/// Output views of intermediates on both sides of a split keep their memory (issue 12): `y`
/// on TEST is seen only through the output `TRANSPOSE(y)` while later TEST nodes need memory,
/// and `a` on the CPU only through the output `RESHAPE(a)` while `TANH(a)` could run in place.
#[test]
fn output_views_keep_their_memory_across_a_split() {
    let computed = Arc::new(Mutex::new(Vec::new()));
    let test_dev = TestDevice { computed: computed.clone(), software: false };
    let backends: Vec<Box<dyn Backend>> = vec![
        test_dev.init_backend(&BackendParams::default()).unwrap(),
        Box::new(CpuBackend::new(Some(2)).unwrap()),
    ];
    let mut sched = Scheduler::new(backends).unwrap();
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[8, 4]).unwrap();
    let y = g.add(x, x).unwrap(); // TEST
    let vt = g.transpose(y).unwrap();
    g.set_output(vt).unwrap();
    let a = g.sqr(x).unwrap(); // CPU
    let va = g.reshape(a, &[32]).unwrap();
    g.set_output(va).unwrap();
    let b = g.tanh(a).unwrap(); // CPU
    let c = g.mul(b, b).unwrap(); // TEST
    let d = g.add(c, c).unwrap(); // TEST
    g.set_output(d).unwrap();
    sched.alloc_graph(&mut g).unwrap();
    let backends_of: Vec<usize> = sched.splits().iter().map(|s| s.backend).collect();
    assert_eq!(backends_of, vec![0, 1, 0], "TEST, CPU, TEST");
    let xs: Vec<f32> = (0..32).map(|i| i as f32 * 0.25 - 4.0).collect();
    set_f32(&g, x, &xs).unwrap();
    sched.compute().unwrap();
    let dense = |id| {
        tessera_core::tensor_data::get_tensor_dense(&g, id)
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect::<Vec<f32>>()
    };
    // Doubling and squaring are exact in f32.
    let transposed: Vec<f32> = (0..32).map(|k| 2.0 * xs[(k % 4) * 8 + k / 4]).collect();
    assert_eq!(dense(vt), transposed, "TRANSPOSE(y) on TEST");
    assert_eq!(dense(va), xs.iter().map(|v| v * v).collect::<Vec<f32>>(), "RESHAPE(a) on CPU");
    let want_d: Vec<f32> = xs.iter().map(|v| (v * v).tanh()).collect();
    let got_d = get_f32(&g, d).unwrap();
    for (i, (g, w)) in got_d.iter().zip(&want_d).enumerate() {
        assert!((g - 2.0 * w * w).abs() <= 1e-6, "d[{i}] = {g}, want {}", 2.0 * w * w);
    }
}

/// Every input a split copies in is made before the split's first node runs, so copies read by
/// different nodes of one split must not share memory (the second would overwrite the first
/// before its reader ran).
#[test]
fn copies_into_one_split_keep_their_own_memory() {
    let computed = Arc::new(Mutex::new(Vec::new()));
    let test_dev = TestDevice { computed, software: false };
    let backends: Vec<Box<dyn Backend>> = vec![
        test_dev.init_backend(&BackendParams::default()).unwrap(),
        Box::new(CpuBackend::new(Some(1)).unwrap()),
    ];
    let mut sched = Scheduler::new(backends).unwrap();
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[16]).unwrap();
    let y = g.input("y", DType::F32, &[16]).unwrap();
    let a = g.sqr(x).unwrap(); // CPU
    let b = g.sqr(y).unwrap(); // CPU
    let n1 = g.add(a, a).unwrap(); // TEST, reads the copy of a
    let n2 = g.add(b, b).unwrap(); // TEST, reads the copy of b
    g.set_output(n1).unwrap();
    g.set_output(n2).unwrap();
    sched.alloc_graph(&mut g).unwrap();
    let on: Vec<usize> = sched.splits().iter().map(|s| s.backend).collect();
    assert_eq!(on, vec![1, 0], "CPU, then TEST with two copied inputs");
    assert_eq!(sched.splits()[1].inputs.len(), 2);
    let xs: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let ys: Vec<f32> = (0..16).map(|i| 100.0 + i as f32).collect();
    set_f32(&g, x, &xs).unwrap();
    set_f32(&g, y, &ys).unwrap();
    sched.compute().unwrap();
    assert_eq!(get_f32(&g, n1).unwrap(), xs.iter().map(|v| 2.0 * v * v).collect::<Vec<_>>());
    assert_eq!(get_f32(&g, n2).unwrap(), ys.iter().map(|v| 2.0 * v * v).collect::<Vec<_>>());
}

#[test]
fn scheduler_pins_and_weights_pull_ops() {
    let computed = Arc::new(Mutex::new(Vec::new()));
    let test_dev = TestDevice { computed: computed.clone(), software: false };
    let mk = || -> Vec<Box<dyn Backend>> {
        vec![
            test_dev.init_backend(&BackendParams::default()).unwrap(),
            Box::new(CpuBackend::new(Some(1)).unwrap()),
        ]
    };
    // Pinning the first ADD to the CPU.
    let mut sched = Scheduler::new(mk()).unwrap();
    let mut g = Graph::new();
    let (a, b, _o) = mixed_graph(&mut g);
    let first_add = g.nodes()[0];
    sched.pin(first_add, 1).unwrap();
    sched.alloc_graph(&mut g).unwrap();
    assert_eq!(sched.assignment(first_add), Some(1));
    set_f32(&g, a, &[1.0; 32]).unwrap();
    set_f32(&g, b, &[2.0; 32]).unwrap();
    sched.compute().unwrap();
    assert!(sched.pin(first_add, 7).is_err());

    // A weight in CPU memory pulls its ADD to the CPU even though TEST comes first.
    let mut sched = Scheduler::new(mk()).unwrap();
    let mut g = Graph::new();
    let w = g.weight("w", DType::F32, &[8]).unwrap();
    let x = g.input("x", DType::F32, &[8]).unwrap();
    let y = g.add(x, w).unwrap();
    g.set_output(y).unwrap();
    let wb = CpuBufferType.alloc(32).unwrap();
    g.set_storage(w, tessera_core::Storage { buffer: wb, offset: 0 }).unwrap();
    sched.alloc_graph(&mut g).unwrap();
    assert_eq!(sched.assignment(y), Some(1));
}

#[test]
fn eval_callback_observes_and_stops() {
    let backends: Vec<Box<dyn Backend>> = vec![Box::new(CpuBackend::new(Some(1)).unwrap())];
    let mut sched = Scheduler::new(backends).unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    sched.set_eval_callback(Some(Box::new(move |graph: &Graph, id: TensorId| {
        let v = get_f32(graph, id).unwrap();
        assert!(v.iter().all(|x| x.is_finite()));
        s2.fetch_add(1, Ordering::SeqCst) < 4
    })));
    let mut g = Graph::new();
    let (x, _) = chain(&mut g, 12, 64);
    sched.alloc_graph(&mut g).unwrap();
    set_f32(&g, x, &[0.5; 64]).unwrap();
    assert_eq!(sched.compute(), Err(Error::Aborted));
    assert_eq!(seen.load(Ordering::SeqCst), 5);
}

#[test]
fn abort_callback_stops_a_long_graph() {
    let mut g = Graph::new();
    let w = g.weight("w", DType::F32, &[1024, 1024]).unwrap();
    let x = g.input("x", DType::F32, &[1024, 8]).unwrap();
    let mut cur = x;
    for _ in 0..64 {
        cur = g.mul_mat(w, cur).unwrap();
    }
    g.set_output(cur).unwrap();
    allocate_all(&mut g).unwrap();
    let mut b = CpuBackend::new(Some(2)).unwrap();
    // The callback asks to stop at its 10th poll (it is polled between nodes and between
    // matmul chunks): deterministic, whatever the machine's speed.
    let calls = Arc::new(AtomicUsize::new(0));
    let c2 = calls.clone();
    let cb: AbortCallback = Arc::new(move || c2.fetch_add(1, Ordering::SeqCst) + 1 >= 10);
    b.set_abort_callback(Some(cb));
    assert_eq!(b.graph_compute(&g), Err(Error::Aborted));
    // Stopped right away: a finished run polls at least once per node (64), and each thread
    // polls at most once more after the stop.
    let polls = calls.load(Ordering::SeqCst);
    assert!((10..=12).contains(&polls), "{polls} polls");
    // Without the callback the same graph runs to the end.
    b.set_abort_callback(None);
    assert_eq!(b.graph_compute(&g), Ok(()));
}

#[test]
fn graph_plans_compute_like_graph_compute() {
    let mut g = Graph::new();
    let (x, out) = chain(&mut g, 6, 32);
    allocate_all(&mut g).unwrap();
    set_f32(&g, x, &[0.25; 32]).unwrap();
    let mut b = CpuBackend::new(Some(1)).unwrap();
    let plan = b.graph_plan_create(&g, &g.nodes()).unwrap();
    assert_eq!(plan.nodes().len(), 6);
    b.graph_plan_compute(&g, plan.as_ref()).unwrap();
    let first = get_f32(&g, out).unwrap();
    b.graph_compute(&g).unwrap();
    assert_eq!(first, get_f32(&g, out).unwrap());
}

#[test]
fn unallocated_or_foreign_memory_is_an_error() {
    let mut g = Graph::new();
    let (_x, _) = chain(&mut g, 2, 8);
    let mut b = CpuBackend::new(Some(1)).unwrap();
    assert!(matches!(b.graph_compute(&g), Err(Error::NotAllocated(_))));
    // Memory the CPU cannot address.
    let mut g = Graph::new();
    let (_x, _) = chain(&mut g, 2, 8);
    let mut alloc = GraphAllocator::new(Arc::new(TestBufferType));
    alloc.alloc_graph(&mut g).unwrap();
    assert!(matches!(b.graph_compute(&g), Err(Error::Backend { .. })));
    let _ = HostMemory::len(&OwnedHostMemory::new(vec![]));
}

/// An event that counts how it is used.
#[derive(Default)]
struct CountingEvent {
    signalled: AtomicBool,
    records: Arc<AtomicUsize>,
    waits: Arc<AtomicUsize>,
}

impl tessera_core::backend::Event for CountingEvent {
    fn synchronize(&self) -> Result<()> {
        self.waits.fetch_add(1, Ordering::SeqCst);
        assert!(self.signalled.load(Ordering::SeqCst), "waited on an event never recorded");
        Ok(())
    }
    fn reset(&self) {
        self.signalled.store(false, Ordering::SeqCst);
    }
    fn signal(&self) {
        self.records.fetch_add(1, Ordering::SeqCst);
        self.signalled.store(true, Ordering::SeqCst);
    }
}

/// The test device, with events.
struct EventDevice {
    inner: TestDevice,
    records: Arc<AtomicUsize>,
    waits: Arc<AtomicUsize>,
}

impl Device for EventDevice {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn description(&self) -> String {
        self.inner.description()
    }
    fn memory(&self) -> MemoryInfo {
        self.inner.memory()
    }
    fn device_type(&self) -> DeviceType {
        self.inner.device_type()
    }
    fn caps(&self) -> DeviceCaps {
        DeviceCaps { events: true, ..Default::default() }
    }
    fn init_backend(&self, params: &BackendParams) -> Result<Box<dyn Backend>> {
        self.inner.init_backend(params)
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.inner.buffer_type()
    }
    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool {
        self.inner.supports_op(graph, id)
    }
    fn supports_buffer_type(&self, bt: &dyn BufferType) -> bool {
        self.inner.supports_buffer_type(bt)
    }
    fn new_event(&self) -> Option<Arc<dyn tessera_core::backend::Event>> {
        Some(Arc::new(CountingEvent {
            signalled: AtomicBool::new(false),
            records: self.records.clone(),
            waits: self.waits.clone(),
        }))
    }
}

/// A backend on the event device (the scheduler asks the backend for its device's caps).
struct EventBackend {
    inner: Box<dyn Backend>,
    device: Arc<EventDevice>,
}

impl Backend for EventBackend {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn device(&self) -> Arc<dyn Device> {
        self.device.clone()
    }
    fn graph_plan_create(&mut self, g: &Graph, n: &[TensorId]) -> Result<Box<dyn GraphPlan>> {
        self.inner.graph_plan_create(g, n)
    }
    fn graph_plan_compute(&mut self, g: &Graph, p: &dyn GraphPlan) -> Result<()> {
        self.inner.graph_plan_compute(g, p)
    }
    fn compute_nodes(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        self.inner.compute_nodes(graph, nodes)
    }
}

#[test]
fn pipelined_copy_sets_rotate_with_events() {
    let computed = Arc::new(Mutex::new(Vec::new()));
    let records = Arc::new(AtomicUsize::new(0));
    let waits = Arc::new(AtomicUsize::new(0));
    let device = Arc::new(EventDevice {
        inner: TestDevice { computed: computed.clone(), software: false },
        records: records.clone(),
        waits: waits.clone(),
    });
    let inner = device.inner.init_backend(&BackendParams::default()).unwrap();
    let backends: Vec<Box<dyn Backend>> = vec![
        Box::new(EventBackend { inner, device: device.clone() }),
        Box::new(CpuBackend::new(Some(1)).unwrap()),
    ];
    let mut sched = Scheduler::new(backends).unwrap();
    assert!(sched.set_n_copies(0).is_err());
    assert!(sched.set_n_copies(9).is_err());
    sched.set_n_copies(2).unwrap();
    let mut g = Graph::new();
    let (a, b, o) = mixed_graph(&mut g);
    sched.alloc_graph(&mut g).unwrap();
    let (set0, set1) = (sched.copy_storages(0), sched.copy_storages(1));
    assert!(!set0.is_empty() && set0.len() == set1.len());
    for s0 in &set0 {
        for s1 in &set1 {
            let same = Arc::ptr_eq(&s0.buffer, &s1.buffer) && s0.offset == s1.offset;
            assert!(!same, "copy sets share memory");
        }
    }
    for round in 0..4 {
        assert_eq!(sched.current_copy(), round % 2);
        let av: Vec<f32> = (0..32).map(|i| (i + round) as f32 * 0.1 - 1.0).collect();
        let bv: Vec<f32> = (0..32).map(|i| ((i * (round + 1)) as f32 * 0.37).sin()).collect();
        set_f32(&g, a, &av).unwrap();
        set_f32(&g, b, &bv).unwrap();
        sched.compute().unwrap();
        let got = get_f32(&g, o).unwrap();
        let mut g2 = Graph::new();
        let (a2, b2, o2) = mixed_graph(&mut g2);
        allocate_all(&mut g2).unwrap();
        set_f32(&g2, a2, &av).unwrap();
        set_f32(&g2, b2, &bv).unwrap();
        CpuBackend::new(Some(1)).unwrap().graph_compute(&g2).unwrap();
        assert_eq!(got, get_f32(&g2, o2).unwrap(), "round {round}");
    }
    // Each of the 2 copy sets has an event per TEST split (2), signalled at allocation: 4.
    // Each compute waits on its set's event before each TEST split's copies (2) and records it
    // after the split (2), and the CPU split waits on the first TEST split's event (1).
    assert_eq!(records.load(Ordering::SeqCst), 4 + 4 * 2);
    assert_eq!(waits.load(Ordering::SeqCst), 4 * 3);
}

/// Bytes that must never be written, as a read-only file mapping is.
struct ReadOnlyBytes(Box<[u8]>);

// SAFETY: the boxed bytes never move or change while the value lives, and `read_only` tells
// every buffer wrapping them to refuse writes.
unsafe impl HostMemory for ReadOnlyBytes {
    fn ptr(&self) -> std::ptr::NonNull<u8> {
        std::ptr::NonNull::new(self.0.as_ptr().cast_mut()).unwrap()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn read_only(&self) -> bool {
        true
    }
}

#[test]
fn read_only_memory_is_computed_from_in_place_and_never_written() {
    let w: Vec<f32> = vec![1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 0.25, 2.0];
    let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let memory = Arc::new(ReadOnlyBytes(bytes.clone().into_boxed_slice()));
    let base = memory.0.as_ptr() as usize;
    let buffer = CpuDevice.buffer_from_host_memory(memory, bytes.len()).unwrap();
    assert!(buffer.is_read_only());
    assert!(matches!(buffer.write(0, &[0; 4]), Err(Error::ReadOnly(_))));
    assert!(matches!(buffer.fill(0, 4, 0), Err(Error::ReadOnly(_))));

    let mut g = Graph::new();
    let wt = g.weight("w", DType::F32, &[4, 2]).unwrap();
    g.set_storage(wt, tessera_core::Storage { buffer: buffer.clone(), offset: 0 }).unwrap();
    let x = g.input("x", DType::F32, &[4, 1]).unwrap();
    let y = g.mul_mat(wt, x).unwrap();
    g.set_output(y).unwrap();
    let mut sched = Scheduler::new(vec![Box::new(CpuBackend::new(Some(1)).unwrap())]).unwrap();
    sched.alloc_graph(&mut g).unwrap();
    // The weight is read where it lies: its data pointer is the caller's memory.
    assert_eq!(g.storage_of(wt).unwrap().buffer.host_ptr().unwrap().as_ptr() as usize, base);
    set_f32(&g, x, &[1.0, 1.0, 1.0, 1.0]).unwrap();
    sched.compute().unwrap();
    assert_eq!(get_f32(&g, y).unwrap(), vec![10.0, 1.75]);

    // A graph that would write into the weight is refused when built.
    let mut g2 = Graph::new();
    let wt2 = g2.weight("w", DType::F32, &[4, 2]).unwrap();
    let src = g2.input("src", DType::F32, &[4, 2]).unwrap();
    assert!(matches!(g2.cpy(src, wt2), Err(Error::WriteToConstant { .. })));
    // A write into the read-only memory through a tensor that is not a weight is refused when
    // computed, and leaves the memory unchanged.
    let mut g2 = Graph::new();
    let wt2 = g2.new_tensor(DType::F32, &[4, 2]).unwrap();
    g2.set_storage(wt2, tessera_core::Storage { buffer: buffer.clone(), offset: 0 }).unwrap();
    let src = g2.input("src", DType::F32, &[4, 2]).unwrap();
    let c = g2.cpy(src, wt2).unwrap();
    g2.set_output(c).unwrap();
    let mut sched2 = Scheduler::new(vec![Box::new(CpuBackend::new(Some(1)).unwrap())]).unwrap();
    sched2.alloc_graph(&mut g2).unwrap();
    set_f32(&g2, src, &[9.0; 8]).unwrap();
    assert!(matches!(sched2.compute(), Err(Error::ReadOnly(_))));
    let mut now = vec![0u8; bytes.len()];
    buffer.read(0, &mut now).unwrap();
    assert_eq!(now, bytes);
}
