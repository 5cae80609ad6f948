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
