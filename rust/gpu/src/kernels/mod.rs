//! The WGSL kernels: their sources, their pipelines, and how a graph node becomes a dispatch
//! (bindings, a uniform block of shapes, strides and parameters, and a workgroup count).
//!
//! Every tensor is bound as a storage buffer range read as `array<u32>` and described by a
//! 12-word descriptor (`Desc` in `shaders/common.wgsl`): `ne[4]`, `nb[4]` in bytes, the byte
//! offset of element 0 in the bound range, and a type code. One module per op family builds the
//! dispatch of its ops.

mod elementwise;
mod flash_attn;
mod get_rows;
mod mul_mat;
mod norm;
mod recurrent;
mod rope;
mod set_rows;
mod soft_max;

use crate::buffer::GpuBuffer;
use crate::context::Context;
use std::num::NonZeroU64;
use std::sync::Arc;
use tessera_core::{DType, Error, Graph, Layout, Op, Result, TensorId};

/// Rows and columns of the MUL_MAT result computed by one workgroup.
pub const MUL_MAT_TILE: usize = mul_mat::TILE;

/// Largest head dim FLASH_ATTN_EXT takes.
pub const FLASH_ATTN_MAX_HEAD_DIM: usize = flash_attn::MAX_HEAD_DIM;

/// Source shared by every kernel, prepended to each shader file.
const COMMON: &str = include_str!("../../shaders/common.wgsl");
/// F16 decoding with integer arithmetic (adapters without `shader-f16`).
const F16_INT: &str = include_str!("../../shaders/f16_int.wgsl");
/// F16 decoding with the hardware's f16 type (adapters with `shader-f16`).
const F16_NATIVE: &str = include_str!("../../shaders/f16_native.wgsl");
/// Decoding of every weight type, for the shaders that read weights from `src0`.
const QUANT: &str = include_str!("../../shaders/quant.wgsl");
/// Reports of kernels that check their inputs.
const STATUS: &str = include_str!("../../shaders/status.wgsl");

/// A WGSL shader file (one wgpu shader module, possibly several entry points).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shader {
    /// Binary, unary and copy ops (`shaders/elementwise.wgsl`).
    Elementwise,
    /// MUL_MAT (`shaders/mul_mat.wgsl`).
    MulMat,
    /// SOFT_MAX (`shaders/soft_max.wgsl`).
    SoftMax,
    /// RMS_NORM and NORM (`shaders/rms_norm.wgsl`).
    RmsNorm,
    /// ROPE (`shaders/rope.wgsl`).
    Rope,
    /// GET_ROWS (`shaders/get_rows.wgsl`).
    GetRows,
    /// SET_ROWS (`shaders/set_rows.wgsl`).
    SetRows,
    /// FLASH_ATTN_EXT (`shaders/flash_attn.wgsl`).
    FlashAttn,
    /// CONCAT (`shaders/concat.wgsl`).
    Concat,
    /// SSM_CONV (`shaders/ssm_conv.wgsl`).
    SsmConv,
    /// GATED_DELTA_NET (`shaders/gated_delta_net.wgsl`).
    GatedDeltaNet,
}

impl Shader {
    /// Every shader file.
    pub const ALL: [Shader; 11] = [
        Shader::Elementwise,
        Shader::MulMat,
        Shader::SoftMax,
        Shader::RmsNorm,
        Shader::Rope,
        Shader::GetRows,
        Shader::SetRows,
        Shader::FlashAttn,
        Shader::Concat,
        Shader::SsmConv,
        Shader::GatedDeltaNet,
    ];

    /// The file name in `shaders/`.
    pub fn file_name(self) -> &'static str {
        match self {
            Shader::Elementwise => "elementwise.wgsl",
            Shader::MulMat => "mul_mat.wgsl",
            Shader::SoftMax => "soft_max.wgsl",
            Shader::RmsNorm => "rms_norm.wgsl",
            Shader::Rope => "rope.wgsl",
            Shader::GetRows => "get_rows.wgsl",
            Shader::SetRows => "set_rows.wgsl",
            Shader::FlashAttn => "flash_attn.wgsl",
            Shader::Concat => "concat.wgsl",
            Shader::SsmConv => "ssm_conv.wgsl",
            Shader::GatedDeltaNet => "gated_delta_net.wgsl",
        }
    }

    fn body(self) -> &'static str {
        match self {
            Shader::Elementwise => include_str!("../../shaders/elementwise.wgsl"),
            Shader::MulMat => include_str!("../../shaders/mul_mat.wgsl"),
            Shader::SoftMax => include_str!("../../shaders/soft_max.wgsl"),
            Shader::RmsNorm => include_str!("../../shaders/rms_norm.wgsl"),
            Shader::Rope => include_str!("../../shaders/rope.wgsl"),
            Shader::GetRows => include_str!("../../shaders/get_rows.wgsl"),
            Shader::SetRows => include_str!("../../shaders/set_rows.wgsl"),
            Shader::FlashAttn => include_str!("../../shaders/flash_attn.wgsl"),
            Shader::Concat => include_str!("../../shaders/concat.wgsl"),
            Shader::SsmConv => include_str!("../../shaders/ssm_conv.wgsl"),
            Shader::GatedDeltaNet => include_str!("../../shaders/gated_delta_net.wgsl"),
        }
    }

    /// The shared files this shader includes besides `common.wgsl` and the F16 decoding.
    fn includes(self) -> &'static [&'static str] {
        match self {
            Shader::MulMat => &[QUANT],
            Shader::GetRows => &[QUANT, STATUS],
            Shader::SetRows => &[STATUS],
            _ => &[],
        }
    }

    /// The complete WGSL source compiled for this shader on adapters without `shader-f16`:
    /// `f16_int.wgsl`, `common.wgsl`, the shared files it includes, then the file.
    pub fn source(self) -> String {
        self.assemble(false)
    }

    /// The source compiled on adapters with `shader-f16` (`enable f16;` and
    /// `f16_native.wgsl` instead of `f16_int.wgsl`); its results are identical.
    pub fn source_f16(self) -> String {
        self.assemble(true)
    }

    fn assemble(self, f16: bool) -> String {
        let mut s = String::new();
        if f16 {
            s.push_str("enable f16;\n\n");
        }
        s.push_str(if f16 { F16_NATIVE } else { F16_INT });
        s.push('\n');
        s.push_str(COMMON);
        for inc in self.includes() {
            s.push('\n');
            s.push_str(inc);
        }
        s.push('\n');
        s.push_str(self.body());
        s
    }

    /// The entry points (kernels) of this shader.
    pub fn kernels(self) -> Vec<Kernel> {
        Kernel::ALL.into_iter().filter(|k| k.shader() == self).collect()
    }
}

/// A compute entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// ADD, SUB, MUL, DIV with broadcasting.
    Binary,
    /// SCALE, SQR, SQRT, CLAMP, activations, and copies (CPY, CONT, DUP).
    Unary,
    /// MUL_MAT, tiled.
    MulMat,
    /// MUL_MAT with few activation rows (matrix-vector).
    MulMatVec,
    /// SOFT_MAX.
    SoftMax,
    /// RMS_NORM.
    RmsNorm,
    /// ROPE.
    Rope,
    /// GET_ROWS.
    GetRows,
    /// SET_ROWS.
    SetRows,
    /// FLASH_ATTN_EXT.
    FlashAttn,
    /// CONCAT.
    Concat,
    /// SSM_CONV.
    SsmConv,
    /// GATED_DELTA_NET.
    GatedDeltaNet,
}

impl Kernel {
    /// Every kernel.
    pub const ALL: [Kernel; 13] = [
        Kernel::Binary,
        Kernel::Unary,
        Kernel::MulMat,
        Kernel::MulMatVec,
        Kernel::SoftMax,
        Kernel::RmsNorm,
        Kernel::Rope,
        Kernel::GetRows,
        Kernel::SetRows,
        Kernel::FlashAttn,
        Kernel::Concat,
        Kernel::SsmConv,
        Kernel::GatedDeltaNet,
    ];

    /// The shader file holding the kernel.
    pub fn shader(self) -> Shader {
        match self {
            Kernel::Binary | Kernel::Unary => Shader::Elementwise,
            Kernel::MulMat | Kernel::MulMatVec => Shader::MulMat,
            Kernel::SoftMax => Shader::SoftMax,
            Kernel::RmsNorm => Shader::RmsNorm,
            Kernel::Rope => Shader::Rope,
            Kernel::GetRows => Shader::GetRows,
            Kernel::SetRows => Shader::SetRows,
            Kernel::FlashAttn => Shader::FlashAttn,
            Kernel::Concat => Shader::Concat,
            Kernel::SsmConv => Shader::SsmConv,
            Kernel::GatedDeltaNet => Shader::GatedDeltaNet,
        }
    }

    /// The entry point's name in the shader.
    pub fn entry_point(self) -> &'static str {
        match self {
            Kernel::Binary => "binary",
            Kernel::Unary => "unary",
            Kernel::MulMat => "mul_mat",
            Kernel::MulMatVec => "mul_mat_vec",
            Kernel::SoftMax => "soft_max",
            Kernel::RmsNorm => "rms_norm",
            Kernel::Rope => "rope",
            Kernel::GetRows => "get_rows",
            Kernel::SetRows => "set_rows",
            Kernel::FlashAttn => "flash_attn",
            Kernel::Concat => "concat",
            Kernel::SsmConv => "ssm_conv",
            Kernel::GatedDeltaNet => "gated_delta_net",
        }
    }

    /// Whether the kernel reads weights and is compiled once per weight type (the WGSL
    /// override `WTYPE` of `shaders/quant.wgsl`).
    pub fn weight_specialized(self) -> bool {
        matches!(self, Kernel::MulMat | Kernel::MulMatVec | Kernel::GetRows)
    }

    /// The values of `WTYPE` this kernel is compiled with: the type codes of every weight type
    /// (and I32 for GET_ROWS) for weight-specialized kernels, else just 0.
    pub fn specializations(self) -> Vec<u32> {
        if !self.weight_specialized() {
            return vec![0];
        }
        DType::ALL
            .into_iter()
            .filter(|&t| {
                crate::supports::is_weight_type(t) || self == Kernel::GetRows && t == DType::I32
            })
            .filter_map(dtype_code)
            .collect()
    }

    /// Number of storage buffer bindings (0 .. n); the uniform block is binding n.
    pub fn storage_bindings(self) -> u32 {
        match self {
            Kernel::RmsNorm => 2,
            Kernel::Rope | Kernel::GetRows | Kernel::SetRows => 4,
            Kernel::FlashAttn => 5,
            Kernel::GatedDeltaNet => 7,
            _ => 3,
        }
    }
}

/// A compiled kernel: its pipeline and bind group layout.
pub(crate) struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

impl Pipeline {
    /// Compiles `kernel` on `device`, from the `shader-f16` source when `f16`, for weights of
    /// type code `wtype` where the kernel reads weights ([`Kernel::weight_specialized`]); errors
    /// are captured by the caller's error scope.
    pub fn new(device: &wgpu::Device, kernel: Kernel, f16: bool, wtype: u32) -> Pipeline {
        let n = kernel.storage_bindings();
        let mut entries: Vec<wgpu::BindGroupLayoutEntry> = (0..n)
            .map(|binding| wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: false },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: n,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
        let label = kernel.entry_point();
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(label),
            entries: &entries,
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(label),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(kernel.shader().file_name()),
            source: wgpu::ShaderSource::Wgsl(kernel.shader().assemble(f16).into()),
        });
        let constants = [("WTYPE", f64::from(wtype))];
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(label),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(label),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: if kernel.weight_specialized() { &constants } else { &[] },
                ..Default::default()
            },
            cache: None,
        });
        Pipeline { pipeline, layout }
    }
}

/// The error of node `id` whose kernel reported bad input `value` at `coords` into the status
/// buffer.
pub(crate) fn input_error(graph: &Graph, id: TensorId, value: u32, coords: [u32; 3]) -> Error {
    match graph.tensor(id).op {
        Op::GetRows => get_rows::index_error(graph, id, value, coords),
        Op::SetRows => set_rows::index_error(graph, id, value, coords),
        ref op => Error::InvalidArgument(format!(
            "{} {}: bad input {value} at {coords:?}",
            op.name(),
            graph.tensor(id).label(id)
        )),
    }
}

/// Type codes of `common.wgsl`.
pub(crate) fn dtype_code(dtype: DType) -> Option<u32> {
    match dtype {
        DType::F32 => Some(0),
        DType::F16 => Some(1),
        DType::Q4_0 => Some(2),
        DType::Q8_0 => Some(3),
        DType::I32 => Some(4),
        DType::BF16 => Some(5),
        DType::Q4_1 => Some(6),
        DType::Q5_0 => Some(7),
        DType::Q5_1 => Some(8),
        DType::Q2_K => Some(9),
        DType::Q3_K => Some(10),
        DType::Q4_K => Some(11),
        DType::Q5_K => Some(12),
        DType::Q6_K => Some(13),
        DType::IQ4_NL => Some(14),
        DType::IQ4_XS => Some(15),
        DType::Q8_1 | DType::Q8_K => None,
    }
}

/// Number of 32-bit words of a tensor descriptor.
pub(crate) const DESC_WORDS: usize = 12;

/// A tensor as a kernel sees it: a bound range of a buffer and its descriptor.
#[derive(Clone)]
pub(crate) struct Operand {
    buffer: wgpu::Buffer,
    base: u64,
    size: u64,
    desc: [u32; DESC_WORDS],
}

/// Words of the status buffer that checking kernels report into (`shaders/status.wgsl`).
pub(crate) const STATUS_WORDS: usize = 8;

/// Where the checking kernels of a compute report bad input, and which node is planned.
pub(crate) struct Checks<'a> {
    /// The status buffer (`STATUS_WORDS` words, cleared before the first checking kernel).
    pub status: &'a wgpu::Buffer,
    /// The node's position in the compute, reported back with a failure.
    pub tag: u32,
}

impl Checks<'_> {
    /// The status buffer as an operand.
    fn operand(&self) -> Operand {
        Operand {
            buffer: self.status.clone(),
            base: 0,
            size: (STATUS_WORDS * 4) as u64,
            desc: [0; DESC_WORDS],
        }
    }
}

fn to_u32(ctx: &Context, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| ctx.error(format!("{what} = {v} does not fit in 32 bits")))
}

/// Binds tensor `id` of `graph`: its memory must be a buffer of this device.
pub(crate) fn operand(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Operand> {
    operand_rows(ctx, graph, id, None)
}

/// The largest binding the kernels use: the device's limit, within 32 bits.
pub(crate) fn max_binding(ctx: &Context) -> u64 {
    ctx.max_binding
}

/// Ranges of dim-1 rows of a tensor of `layout` that each fit in one binding, given a binding
/// limit of `max_binding` bytes and offsets aligned to `align`: the whole tensor when it fits,
/// else consecutive ranges (the tensor must then be one matrix, `ne2 = ne3 = 1`, whose every
/// row fits; see [`crate::supports`]).
pub(crate) fn row_chunks(layout: &Layout, max_binding: u64, align: u64) -> Vec<(usize, usize)> {
    let rows = layout.ne[1];
    if layout.nbytes() as u64 + align <= max_binding || rows <= 1 {
        return vec![(0, rows)];
    }
    let mut one = *layout;
    one.ne[1] = 1;
    let row_span = one.nbytes() as u64;
    let per = ((max_binding.saturating_sub(align + row_span)) / layout.nb[1].max(1) as u64 + 1)
        .max(1) as usize;
    (0..rows).step_by(per).map(|r0| (r0, (r0 + per).min(rows))).collect()
}

/// Binds tensor `id` of `graph`, or only its dim-1 rows `r0..r1` (the descriptor then has
/// `ne1 = r1 - r0` and starts at row `r0`).
pub(crate) fn operand_rows(
    ctx: &Arc<Context>,
    graph: &Graph,
    id: TensorId,
    rows: Option<(usize, usize)>,
) -> Result<Operand> {
    let t = graph.get(id)?;
    let storage = graph.storage_of(id).ok_or_else(|| Error::NotAllocated(t.label(id)))?;
    let buf = storage.buffer.as_any().downcast_ref::<GpuBuffer>().ok_or_else(|| {
        ctx.error(format!(
            "tensor {} lives in a {} buffer, not in this device's memory",
            t.label(id),
            storage.buffer.name()
        ))
    })?;
    if !Arc::ptr_eq(buf.context(), ctx) {
        return Err(ctx.error(format!(
            "tensor {} lives in the memory of another device ({})",
            t.label(id),
            buf.context().name
        )));
    }
    let code = dtype_code(t.dtype()).ok_or_else(|| Error::UnsupportedOp {
        device: ctx.name.clone(),
        op: format!("{} of {}", t.op.name(), t.dtype()),
    })?;
    let elem_align = match t.dtype() {
        DType::F32 | DType::I32 => 4,
        _ => 2,
    };
    let mut layout = t.layout;
    let mut start = 0u64;
    if let Some((r0, r1)) = rows {
        if r0 >= r1 || r1 > layout.ne[1] {
            return Err(ctx.error(format!("rows {r0}..{r1} of tensor {}", t.label(id))));
        }
        layout.ne[1] = r1 - r0;
        start = (r0 * layout.nb[1]) as u64;
    }
    let abs = storage.offset as u64 + start;
    if !abs.is_multiple_of(elem_align) {
        return Err(ctx.error(format!(
            "tensor {} of {} at byte offset {abs} is not {elem_align}-byte aligned",
            t.label(id),
            t.dtype()
        )));
    }
    let align = u64::from(ctx.limits.min_storage_buffer_offset_alignment.max(4));
    let base = abs - abs % align;
    let end = (abs + layout.nbytes() as u64).div_ceil(4) * 4;
    let size = (end - base).min(buf.allocated_size() - base);
    if size > max_binding(ctx) {
        return Err(ctx.error(format!(
            "tensor {} spans {size} bytes, more than a binding can hold ({})",
            t.label(id),
            ctx.max_binding
        )));
    }
    let mut desc = [0u32; DESC_WORDS];
    for i in 0..4 {
        desc[i] = to_u32(ctx, "ne", layout.ne[i])?;
        desc[4 + i] = to_u32(ctx, "nb", layout.nb[i])?;
    }
    desc[8] = (abs - base) as u32;
    desc[9] = code;
    Ok(Operand { buffer: buf.raw().clone(), base, size, desc })
}

/// The uniform block of a dispatch, as 32-bit words in the order of the shader's `Params`.
#[derive(Default)]
pub(crate) struct Params(Vec<u32>);

impl Params {
    /// Appends a tensor descriptor (16-byte aligned in the block).
    pub fn desc(&mut self, op: &Operand) -> &mut Self {
        debug_assert!(self.0.len().is_multiple_of(4), "descriptors come first");
        self.0.extend_from_slice(&op.desc);
        self
    }
    /// Appends a u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.push(v);
        self
    }
    /// Appends an f32.
    pub fn f32(&mut self, v: f32) -> &mut Self {
        self.0.push(v.to_bits());
        self
    }
    fn bytes(&self) -> Vec<u8> {
        let mut b: Vec<u8> = self.0.iter().flat_map(|w| w.to_le_bytes()).collect();
        b.resize(b.len().div_ceil(16).max(1) * 16, 0);
        b
    }
}

/// One kernel launch: a kernel, its storage bindings in order, its uniform block and its
/// workgroup counts.
pub(crate) struct Dispatch {
    pub kernel: Kernel,
    /// The weight type code the pipeline is specialized for (0 for other kernels).
    pub wtype: u32,
    pub operands: Vec<Operand>,
    pub params: Params,
    pub groups: [u32; 3],
    /// Whether the kernel reports bad input into the status buffer.
    pub checks: bool,
}

/// Most workgroups per dispatch dimension that every adapter allows.
const MAX_GROUPS: u32 = 65535;

/// Workgroup counts covering `n` groups in a 2D grid (x fastest).
pub(crate) fn grid(ctx: &Context, n: usize) -> Result<[u32; 3]> {
    let lim = ctx.limits.max_compute_workgroups_per_dimension.clamp(1, MAX_GROUPS) as usize;
    let n = n.max(1);
    let x = n.min(lim);
    let y = n.div_ceil(x);
    if y > lim {
        return Err(ctx.error(format!("{n} workgroups exceed the dispatch limit")));
    }
    Ok([x as u32, y as u32, 1])
}

/// Workgroups of 256 invocations covering `n` elements.
pub(crate) fn grid_256(ctx: &Context, n: usize) -> Result<[u32; 3]> {
    grid(ctx, n.div_ceil(256))
}

/// The dispatches that compute node `id`, in order: none for leaves and views, several where
/// the weights span more than one binding. Operands must be supported (see
/// [`crate::supports::supports_op`]).
pub(crate) fn plan(
    ctx: &Arc<Context>,
    graph: &Graph,
    id: TensorId,
    checks: &Checks,
) -> Result<Vec<Dispatch>> {
    let t = graph.get(id)?;
    let d = match &t.op {
        Op::None | Op::Reshape | Op::View | Op::Permute { .. } | Op::Transpose => {
            return Ok(Vec::new())
        }
        Op::MulMat => return mul_mat::plan(ctx, graph, id),
        Op::GetRows => return get_rows::plan(ctx, graph, id, checks),
        Op::SetRows => set_rows::plan(ctx, graph, id, checks)?,
        Op::FlashAttnExt(_) => flash_attn::plan(ctx, graph, id)?,
        Op::Add | Op::Sub | Op::Mul | Op::Div => elementwise::binary(ctx, graph, id)?,
        Op::Scale { .. }
        | Op::Sqr
        | Op::Sqrt
        | Op::Clamp { .. }
        | Op::Unary(_)
        | Op::Cpy
        | Op::Cont
        | Op::Dup => elementwise::unary(ctx, graph, id)?,
        Op::Glu { .. } => elementwise::glu(ctx, graph, id)?,
        Op::SoftMax { .. } => soft_max::plan(ctx, graph, id)?,
        Op::RmsNorm { .. } | Op::Norm { .. } => norm::plan(ctx, graph, id)?,
        Op::Rope(_) => rope::plan(ctx, graph, id)?,
        Op::Concat { .. } => recurrent::concat(ctx, graph, id)?,
        Op::SsmConv => recurrent::ssm_conv(ctx, graph, id)?,
        Op::GatedDeltaNet => recurrent::gated_delta_net(ctx, graph, id)?,
        other => {
            return Err(Error::UnsupportedOp {
                device: ctx.name.clone(),
                op: other.name().to_string(),
            })
        }
    };
    Ok(vec![d])
}

/// Encodes `dispatches` into one command buffer, one compute pass each, with their uniform
/// blocks packed into one buffer.
pub(crate) fn encode(ctx: &Context, dispatches: &[Dispatch]) -> Result<wgpu::CommandBuffer> {
    let align = u64::from(ctx.limits.min_uniform_buffer_offset_alignment.max(16));
    let mut uniforms: Vec<u8> = Vec::new();
    let mut ranges = Vec::with_capacity(dispatches.len());
    for d in dispatches {
        let start = (uniforms.len() as u64).div_ceil(align) * align;
        uniforms.resize(start as usize, 0);
        let bytes = d.params.bytes();
        ranges.push((start, bytes.len() as u64));
        uniforms.extend_from_slice(&bytes);
    }
    let uniform_buf = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("tessera params"),
        size: (uniforms.len() as u64).max(16),
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    ctx.queue.write_buffer(&uniform_buf, 0, &uniforms);

    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("tessera compute") });
    for (d, &(start, len)) in dispatches.iter().zip(&ranges) {
        let pipeline = ctx.pipeline(d.kernel, d.wtype)?;
        let mut entries: Vec<wgpu::BindGroupEntry> = d
            .operands
            .iter()
            .enumerate()
            .map(|(i, op)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &op.buffer,
                    offset: op.base,
                    size: NonZeroU64::new(op.size),
                }),
            })
            .collect();
        entries.push(wgpu::BindGroupEntry {
            binding: d.operands.len() as u32,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &uniform_buf,
                offset: start,
                size: NonZeroU64::new(len),
            }),
        });
        let bind_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(d.kernel.entry_point()),
            layout: &pipeline.layout,
            entries: &entries,
        });
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(d.kernel.entry_point()),
            timestamp_writes: None,
        });
        pass.set_pipeline(&pipeline.pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
    }
    Ok(encoder.finish())
}
