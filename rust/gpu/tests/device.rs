//! Registration, device properties, buffers and transfers, errors (foreign memory, unsupported
//! ops, aborts, a lost device).

mod common;

use common::{gpu, open_device};
use std::sync::Arc;
use tessera_core::backend::{copy_between, BufferType, Device, DeviceType};
use tessera_core::tensor_data::{get_f32, set_f32};
use tessera_core::{DType, Error, Graph};
use tessera_gpu::{allocate_graph, api_name, register, register_with, wgpu};

#[test]
fn registration_offers_every_adapter_named_after_the_api() {
    let Some(dev) = gpu() else { return };
    let reg = register().expect("registration").expect("a registration");
    assert_eq!(reg.name(), api_name());
    let devices = reg.devices();
    assert!(!devices.is_empty());
    let first = &devices[0];
    let expected = if api_name() == "Metal" && devices.len() == 1 {
        "Metal".to_string()
    } else {
        format!("{}0", api_name())
    };
    assert_eq!(first.name(), expected);
    let info = dev.adapter_info();
    assert_eq!(first.description(), info.name);
    assert!(!first.description().is_empty());
    let props = first.props();
    eprintln!(
        "{}: {:?}, type {:?} (wgpu {:?}, backend {:?}, driver {} {}), memory {:?}, shader-f16 {}",
        props.name,
        props.description,
        props.device_type,
        info.device_type,
        info.backend,
        info.driver,
        info.driver_info,
        props.memory,
        dev.has_shader_f16()
    );
    let l = dev.limits();
    eprintln!(
        "limits: max buffer {}, max storage binding {}, storage offset alignment {}, \
         workgroup storage {}, invocations {}, workgroups per dim {}",
        l.max_buffer_size,
        l.max_storage_buffer_binding_size,
        l.min_storage_buffer_offset_alignment,
        l.max_compute_workgroup_storage_size,
        l.max_compute_invocations_per_workgroup,
        l.max_compute_workgroups_per_dimension
    );
    assert!(matches!(props.device_type, DeviceType::Gpu | DeviceType::IntegratedGpu));
    if dev.is_software() {
        assert_eq!(props.device_type, DeviceType::IntegratedGpu);
    }
    assert!(props.memory.total > 0 && props.memory.free <= props.memory.total);
    let bt = first.buffer_type();
    assert_eq!(bt.name(), first.name());
    assert!(!bt.is_host());
    assert!(bt.alignment() >= 16 && bt.alignment().is_power_of_two());
    assert!(first.supports_buffer_type(bt.as_ref()));
    assert!(!first.supports_buffer_type(&tessera_cpu::buffer::CpuBufferType));
    let features = reg.features();
    assert!(features.iter().any(|(k, _)| k == &format!("{}.SOFTWARE", first.name())));
}

#[test]
fn no_backends_means_no_device_and_no_panic() {
    assert!(register_with(wgpu::Backends::empty()).expect("no error").is_none());
    // A backend that this build does not include finds no adapter either.
    let other = if api_name() == "Metal" { wgpu::Backends::VULKAN } else { wgpu::Backends::METAL };
    assert!(register_with(other).expect("no error").is_none());
}

#[test]
fn buffer_transfers_at_any_offset() {
    if gpu().is_none() {
        return;
    }
    // A device of its own, so that its memory figures are not changed by other tests.
    let dev = open_device().expect("a device");
    let bt = dev.buffer_type();
    let before = dev.memory().free;
    let buf = bt.alloc(1001).unwrap();
    assert_eq!(buf.size(), 1001);
    assert!(buf.host_ptr().is_none());
    assert!(dev.memory().free < before);

    let data: Vec<u8> = (0..1001u32).map(|i| (i * 7 + 3) as u8).collect();
    buf.write(0, &data).unwrap();
    let mut out = vec![0u8; 1001];
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, data);

    // Unaligned writes keep the bytes around them.
    let mut want = data.clone();
    for (off, len) in [(1usize, 1usize), (3, 2), (5, 9), (998, 3), (17, 100), (1000, 1)] {
        let patch: Vec<u8> = (0..len).map(|i| (200 + i) as u8).collect();
        buf.write(off, &patch).unwrap();
        want[off..off + len].copy_from_slice(&patch);
    }
    let mut out = vec![0u8; 1001];
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, want);
    let mut part = vec![0u8; 13];
    buf.read(7, &mut part).unwrap();
    assert_eq!(part, want[7..20]);

    // Fills: unaligned value fills and zero fills (aligned or up to the end).
    buf.fill(3, 10, 0xab).unwrap();
    want[3..13].fill(0xab);
    buf.fill(100, 200, 0).unwrap();
    want[100..300].fill(0);
    buf.fill(997, 4, 0).unwrap();
    want[997..1001].fill(0);
    let mut out = vec![0u8; 1001];
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, want);

    // GPU-side copies between buffers, and through the host when unaligned.
    let other = bt.alloc(64).unwrap();
    assert!(other.copy_from(buf.as_ref(), 0, 0, 64).unwrap());
    let mut out = vec![0u8; 64];
    other.read(0, &mut out).unwrap();
    assert_eq!(out, want[..64]);
    assert!(!other.copy_from(buf.as_ref(), 1, 0, 8).unwrap());
    copy_between(buf.as_ref(), 1, other.as_ref(), 3, 8).unwrap();
    other.read(3, &mut out[..8]).unwrap();
    assert_eq!(out[..8], want[1..9]);

    // Bounds.
    assert!(matches!(buf.write(1000, &[1, 2]), Err(Error::OutOfBounds(_))));
    assert!(matches!(buf.read(990, &mut [0u8; 20]), Err(Error::OutOfBounds(_))));
    assert!(matches!(buf.fill(1001, 1, 0), Err(Error::OutOfBounds(_))));
    buf.clear(0).unwrap();
    let mut out = vec![1u8; 1001];
    buf.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0));
    drop(buf);
    drop(other);
    assert_eq!(dev.memory().free, before);
}

#[test]
fn too_large_a_buffer_is_out_of_memory() {
    let Some(dev) = gpu() else { return };
    let bt = dev.buffer_type();
    let huge = bt.max_size().saturating_add(1);
    assert!(matches!(bt.alloc(huge), Err(Error::OutOfMemory { .. })));
}

fn small_graph() -> (Graph, tessera_core::TensorId, tessera_core::TensorId, tessera_core::TensorId)
{
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[4, 2]).unwrap();
    let b = g.input("b", DType::F32, &[4, 2]).unwrap();
    let c = g.add(a, b).unwrap();
    let d = g.scale(c, 2.0).unwrap();
    (g, a, b, d)
}

#[test]
fn compute_and_plans() {
    let Some(dev) = gpu() else { return };
    let (mut g, a, b, d) = small_graph();
    let bt: Arc<dyn BufferType> = dev.buffer_type();
    let _buf = allocate_graph(&mut g, &bt).unwrap().unwrap();
    assert!(allocate_graph(&mut g, &bt).unwrap().is_none());
    set_f32(&g, a, &[1., 2., 3., 4., 5., 6., 7., 8.]).unwrap();
    set_f32(&g, b, &[0.5; 8]).unwrap();
    let mut backend = dev.init_backend(&Default::default()).unwrap();
    assert_eq!(backend.name(), dev.name());
    backend.graph_compute(&g).unwrap();
    assert_eq!(get_f32(&g, d).unwrap(), vec![3., 5., 7., 9., 11., 13., 15., 17.]);
    let plan = backend.graph_plan_create(&g, &g.nodes()).unwrap();
    set_f32(&g, b, &[1.0; 8]).unwrap();
    backend.graph_plan_compute(&g, plan.as_ref()).unwrap();
    backend.synchronize().unwrap();
    assert_eq!(get_f32(&g, d).unwrap(), vec![4., 6., 8., 10., 12., 14., 16., 18.]);
}

#[test]
fn tensors_in_other_memory_are_rejected() {
    let Some(dev) = gpu() else { return };
    let (mut g, a, b, _) = small_graph();
    let _buf = tessera_cpu::buffer::allocate_all(&mut g).unwrap();
    set_f32(&g, a, &[1.0; 8]).unwrap();
    set_f32(&g, b, &[1.0; 8]).unwrap();
    let mut backend = dev.init_backend(&Default::default()).unwrap();
    match backend.graph_compute(&g) {
        Err(Error::Backend { message, .. }) => assert!(message.contains("CPU"), "{message}"),
        other => panic!("expected a backend error, got {other:?}"),
    }
    // Memory of another GPU device (another registration) is rejected too.
    let Some(other) = open_device() else { return };
    let (mut g, _, _, _) = small_graph();
    let bt: Arc<dyn BufferType> = other.buffer_type();
    let _buf = allocate_graph(&mut g, &bt).unwrap();
    assert!(matches!(backend.graph_compute(&g), Err(Error::Backend { .. })));
}

#[test]
fn unsupported_ops_are_refused() {
    let Some(dev) = gpu() else { return };
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[4, 2]).unwrap();
    let s = g.sum_rows(a).unwrap();
    let v = g.reshape(a, &[8]).unwrap();
    assert!(!dev.supports_op(&g, s));
    assert!(dev.supports_op(&g, v));
    assert!(dev.supports_op(&g, a));
    let bt: Arc<dyn BufferType> = dev.buffer_type();
    let _buf = allocate_graph(&mut g, &bt).unwrap();
    let mut backend = dev.init_backend(&Default::default()).unwrap();
    assert!(matches!(backend.graph_compute(&g), Err(Error::UnsupportedOp { .. })));
    // Q8_K (an activation type GGUF files do not use for weights) is not supported as weights.
    let mut g = Graph::new();
    let w = g.weight("w", DType::Q8_K, &[256, 4]).unwrap();
    let x = g.input("x", DType::F32, &[256, 1]).unwrap();
    let y = g.mul_mat(w, x).unwrap();
    assert!(!dev.supports_op(&g, y));
}

#[test]
fn abort_stops_compute() {
    let Some(dev) = gpu() else { return };
    let (mut g, _, _, _) = small_graph();
    let bt: Arc<dyn BufferType> = dev.buffer_type();
    let _buf = allocate_graph(&mut g, &bt).unwrap();
    let mut backend = dev.init_backend(&Default::default()).unwrap();
    backend.set_abort_callback(Some(Arc::new(|| true)));
    assert!(matches!(backend.graph_compute(&g), Err(Error::Aborted)));
    backend.set_abort_callback(None);
    backend.graph_compute(&g).unwrap();
}

#[test]
fn a_lost_device_fails_with_a_backend_error() {
    if gpu().is_none() {
        return;
    }
    // A device of its own, since it is destroyed.
    let dev = open_device().expect("a device");
    let (mut g, a, _, _) = small_graph();
    let bt: Arc<dyn BufferType> = dev.buffer_type();
    let buf = allocate_graph(&mut g, &bt).unwrap().unwrap();
    let mut backend = dev.init_backend(&Default::default()).unwrap();
    backend.graph_compute(&g).unwrap();
    dev.destroy();
    assert!(dev.is_lost());
    assert!(matches!(backend.graph_compute(&g), Err(Error::Backend { .. })));
    assert!(matches!(set_f32(&g, a, &[0.0; 8]), Err(Error::Backend { .. })));
    assert!(matches!(buf.read(0, &mut [0u8; 4]), Err(Error::Backend { .. })));
    assert!(matches!(bt.alloc(16), Err(Error::Backend { .. })));
    assert!(dev.init_backend(&Default::default()).is_err());
}

/// Bytes of the pattern at `i`.
fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

#[test]
fn buffers_from_host_memory_and_large_writes_hold_the_bytes() {
    let Some(dev) = gpu() else { return };
    // Odd length: the last word is merged.
    let n = (20 << 20) + 3;
    let bytes: Vec<u8> = (0..n).map(pattern).collect();
    let mem = Arc::new(tessera_cpu::buffer::OwnedHostMemory::new(bytes.clone()));
    let buf = dev.buffer_from_host_memory(mem, n).unwrap();
    assert_eq!(buf.size(), n);
    assert!(!buf.buffer_type().is_host());
    let mut back = vec![0u8; n];
    buf.read(0, &mut back).unwrap();
    assert!(back == bytes, "buffer_from_host_memory: bytes differ");
    // A large write at an odd offset: head and tail merged, the middle written in pieces.
    let big = dev.buffer_type().alloc(n + 10).unwrap();
    big.fill(0, n + 10, 0xee).unwrap();
    big.write(5, &bytes).unwrap();
    let mut back = vec![0u8; n + 10];
    big.read(0, &mut back).unwrap();
    assert_eq!(&back[..5], &[0xee; 5]);
    assert!(back[5..5 + n] == bytes[..], "a large write at offset 5: bytes differ");
    assert_eq!(&back[5 + n..], &[0xee; 5]);
}

/// The peak resident memory of this process, and its current one, in bytes.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Uploading weights takes the device memory they need plus a bounded window of staging
/// memory, not a second copy of the whole data. Measured in a child process of its own, where
/// no other test allocates meanwhile.
#[test]
fn an_upload_needs_no_second_copy_of_the_data() {
    let Some(_) = gpu() else { return };
    if !std::path::Path::new("/proc/self/clear_refs").exists() {
        eprintln!("no /proc/self/clear_refs: cannot measure peak memory, skipped");
        return;
    }
    const CHILD: &str = "TESSERA_UPLOAD_MEMORY_CHILD";
    let n: usize = 160 << 20;
    if std::env::var(CHILD).is_err() {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args(["an_upload_needs_no_second_copy_of_the_data", "--exact", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "{}",
            log.lines().filter(|l| l.contains("upload")).collect::<Vec<_>>().join("\n")
        );
        assert!(
            out.status.success(),
            "child failed:\n{log}\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(log.contains("upload of"), "the child measured nothing:\n{log}");
        return;
    }
    let dev = open_device().unwrap();
    let mem = Arc::new(tessera_cpu::buffer::OwnedHostMemory::new((0..n).map(pattern).collect()));
    // Reset the peak to the current resident size (Linux: "5" > clear_refs).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let (_, before) = rss();
    let buf = dev.buffer_from_host_memory(mem.clone(), n).unwrap();
    let (peak, after) = rss();
    let grew = peak.saturating_sub(before);
    eprintln!(
        "upload of {} MiB: peak resident memory +{} MiB, after +{} MiB",
        n >> 20,
        grew >> 20,
        after.saturating_sub(before) >> 20
    );
    // lavapipe's device memory is host memory (+n); the staging window adds 32 MiB.
    assert!(grew < (n + (64 << 20)) as u64, "peak +{} MiB for {} MiB", grew >> 20, n >> 20);
    let mut probe = [0u8; 64];
    buf.read(n - 64, &mut probe).unwrap();
    assert!(probe.iter().enumerate().all(|(i, &b)| b == pattern(n - 64 + i)));
}
