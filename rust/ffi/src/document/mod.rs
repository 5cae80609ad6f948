//! Graph documents: a versioned, serializable description of a graph (the JSON format of
//! `docs/graph-format.md`), and its conversion into a checked [`Graph`].
//!
//! Tensors and nodes are referred to by name; nodes may be listed in any order and are sorted
//! into forward order, with cycles rejected. Every error names the tensor or node concerned.

mod base64;
mod error;
pub mod strict_json;

pub use base64::{base64_decode, base64_encode};
pub use error::{DocumentError, Result};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::HashMap;
use tessera_core::{
    AttnParams, DType, Error, GluOp, Graph, Layout, Result as CoreResult, RopeParams, TensorId,
    UnaryOp,
};

/// The newest document version this build reads (version 1 is read too: it has no `files`).
pub const GRAPH_FORMAT_VERSION: u32 = 2;

/// A model file a version-2 document reads tensors from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocumentFile {
    /// The name tensors refer to it by.
    pub name: String,
    /// Its path on the device (a GGUF file).
    pub path: String,
}

/// A leaf tensor: an input when it has no data, a constant (weight) when it has `data`,
/// `values`, or (version 2) names a tensor of a model file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocumentTensor {
    /// Unique name.
    pub name: String,
    /// Type name ("F32", "Q4_0", ...); optional for a file tensor (the file's type).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// Shape, innermost dim first (ggml's `ne`), 1 to 4 dims; optional for a file tensor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<usize>>,
    /// The file (a name of the document's `files`) holding this constant's bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The tensor's name in that file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// Constant data: the tensor's bytes in base64 (little-endian, GGUF block layout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Constant data as numbers (converted, or quantized, to the type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<f64>>,
}

/// A node: an op applied to named sources.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocumentNode {
    /// Unique name.
    pub name: String,
    /// Op name ("MUL_MAT", "SOFT_MAX", ...).
    pub op: String,
    /// Source tensor or node names, in ggml's operand order.
    #[serde(default)]
    pub src: Vec<String>,
    /// Op parameters.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub params: Map<String, Value>,
}

/// A whole graph document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphDocument {
    /// Format version: 1, or 2 ([`GRAPH_FORMAT_VERSION`]) with model files.
    pub version: u32,
    /// Model files whose tensors the document uses (version 2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<DocumentFile>,
    /// Leaf tensors.
    #[serde(default)]
    pub tensors: Vec<DocumentTensor>,
    /// Nodes, in any order.
    #[serde(default)]
    pub nodes: Vec<DocumentNode>,
    /// Names of the tensors to return.
    pub outputs: Vec<String>,
}

/// A constant whose bytes are a tensor of a model file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileTensor {
    /// The graph tensor.
    pub id: TensorId,
    /// The file's path.
    pub path: String,
    /// The tensor's name in the file.
    pub tensor: String,
}

/// Finds the tensors of model files for [`GraphDocument::build_with`] (the FFI reads GGUF files;
/// tessera-core knows no file format).
pub trait FileTensors {
    /// The layout (type and shape) of tensor `tensor` of the file at `path`.
    fn layout(&self, path: &str, tensor: &str) -> Result<Layout>;
}

/// A [`FileTensors`] for documents that use no files: every lookup is an error.
pub struct NoFiles;

impl FileTensors for NoFiles {
    fn layout(&self, path: &str, _tensor: &str) -> Result<Layout> {
        Err(DocumentError::invalid(format!(
            "file {path:?}: this caller cannot read model files (use a session)"
        )))
    }
}

/// A graph built from a document, with its named inputs, constants and outputs.
#[derive(Clone, Debug)]
pub struct BuiltGraph {
    /// The checked graph.
    pub graph: Graph,
    /// Input tensors by name, in document order.
    pub inputs: Vec<(String, TensorId)>,
    /// Constant tensors and their bytes, to be written once the graph has memory.
    pub constants: Vec<(TensorId, Vec<u8>)>,
    /// Constants whose bytes are tensors of model files (version 2), for the caller to place.
    pub file_tensors: Vec<FileTensor>,
    /// Output tensors by name, in document order.
    pub outputs: Vec<(String, TensorId)>,
}

impl GraphDocument {
    /// Parses a JSON document (strictly: an object with a key twice is an error, see
    /// [`strict_json`]).
    pub fn from_json(json: &str) -> Result<GraphDocument> {
        let value: Value = strict_json::from_str(json)
            .map_err(|e| Error::InvalidGraph(format!("not valid JSON: {e}")))?;
        if let Some(v) = value.get("version") {
            if !matches!(v.as_u64(), Some(1) | Some(2)) {
                return Err(Error::InvalidGraph(format!(
                    "unsupported version {v}: this build reads versions 1 and 2"
                ))
                .into());
            }
        }
        strict_json::from_value(value, 0).map_err(|e| DocumentError::invalid(e.to_string()))
    }

    /// The document as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Checks the document and builds the graph; a document with file tensors needs
    /// [`GraphDocument::build_with`].
    pub fn build(&self) -> Result<BuiltGraph> {
        self.build_with(&NoFiles)
    }

    /// Checks the document and builds the graph, looking file tensors up in `files`.
    pub fn build_with(&self, files: &dyn FileTensors) -> Result<BuiltGraph> {
        if !matches!(self.version, 1 | 2) {
            return Err(Error::InvalidGraph(format!(
                "unsupported version {}: this build reads versions 1 and 2",
                self.version
            ))
            .into());
        }
        if self.version == 1 && !self.files.is_empty() {
            return Err(Error::InvalidGraph("\"files\" needs version 2".into()).into());
        }
        let mut paths: HashMap<&str, &str> = HashMap::new();
        for f in &self.files {
            if f.name.is_empty() || paths.insert(&f.name, &f.path).is_some() {
                return Err(Error::InvalidGraph(format!(
                    "files: {:?} is empty or given twice",
                    f.name
                ))
                .into());
            }
        }
        let mut graph = Graph::new();
        let mut ids: HashMap<&str, TensorId> = HashMap::new();
        let mut inputs = Vec::new();
        let mut constants = Vec::new();
        let mut file_tensors = Vec::new();
        for t in &self.tensors {
            if t.name.is_empty() {
                return Err(Error::InvalidGraph("a tensor has an empty name".into()).into());
            }
            if ids.contains_key(t.name.as_str()) {
                return Err(Error::DuplicateName(t.name.clone()).into());
            }
            if let Some(file) = &t.file {
                let source =
                    file_source(t, file, &paths, files).map_err(in_graph("tensor", &t.name))?;
                let ne = &source.layout.ne[..];
                let id = graph
                    .weight(&t.name, source.layout.dtype, ne)
                    .map_err(in_graph("tensor", &t.name))?;
                file_tensors.push(FileTensor { id, path: source.path, tensor: source.tensor });
                ids.insert(&t.name, id);
                continue;
            }
            if t.tensor.is_some() {
                let error = Error::InvalidGraph("\"tensor\" needs \"file\"".into());
                return Err(in_graph("tensor", &t.name)(error));
            }
            let (dtype_name, shape) = match (&t.dtype, &t.shape) {
                (Some(d), Some(s)) => (d, s),
                _ => {
                    return Err(in_graph("tensor", &t.name)(Error::InvalidGraph(
                        "\"type\" and \"shape\" are required (except for file tensors)".into(),
                    )))
                }
            };
            let dtype: DType = dtype_name.parse().map_err(in_graph("tensor", &t.name))?;
            let layout = Layout::contiguous(dtype, shape).map_err(in_graph("tensor", &t.name))?;
            let data = leaf_data(t, &layout).map_err(in_graph("tensor", &t.name))?;
            let id = if data.is_some() {
                graph.weight(&t.name, dtype, shape)
            } else {
                graph.input(&t.name, dtype, shape)
            }
            .map_err(in_graph("tensor", &t.name))?;
            match data {
                Some(bytes) => constants.push((id, bytes)),
                None => inputs.push((t.name.clone(), id)),
            }
            ids.insert(&t.name, id);
        }
        let by_name: HashMap<&str, &DocumentNode> = {
            let mut m = HashMap::new();
            for n in &self.nodes {
                if n.name.is_empty() {
                    return Err(Error::InvalidGraph("a node has an empty name".into()).into());
                }
                if ids.contains_key(n.name.as_str()) || m.insert(n.name.as_str(), n).is_some() {
                    return Err(Error::DuplicateName(n.name.clone()).into());
                }
            }
            m
        };
        for n in forward_order(&self.nodes, &by_name, &ids)? {
            let srcs = n
                .src
                .iter()
                .map(|s| {
                    ids.get(s.as_str()).copied().ok_or_else(|| DocumentError::UnknownTensor {
                        context: format!("node {:?}", n.name),
                        name: s.clone(),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let id = add_node(&mut graph, n, &srcs).map_err(in_graph("node", &n.name))?;
            graph.set_name(id, &n.name)?;
            ids.insert(&n.name, id);
        }
        if self.outputs.is_empty() {
            return Err(Error::InvalidGraph("the document names no outputs".into()).into());
        }
        let mut outputs = Vec::new();
        let mut listed = std::collections::HashSet::new();
        for o in &self.outputs {
            let id = ids.get(o.as_str()).copied().ok_or_else(|| DocumentError::UnknownTensor {
                context: "outputs".into(),
                name: o.clone(),
            })?;
            if !listed.insert(o.as_str()) {
                return Err(Error::InvalidGraph(format!("output {o:?} is listed twice")).into());
            }
            graph.set_output(id)?;
            outputs.push((o.clone(), id));
        }
        Ok(BuiltGraph { graph, inputs, constants, file_tensors, outputs })
    }
}

/// Where a file tensor's bytes are, and its layout.
struct FileSource {
    path: String,
    tensor: String,
    layout: Layout,
}

/// Looks a file tensor up, checking the type and shape the document states (if any) against
/// the file's.
fn file_source(
    t: &DocumentTensor,
    file: &str,
    paths: &HashMap<&str, &str>,
    files: &dyn FileTensors,
) -> Result<FileSource> {
    let path = paths.get(file).ok_or_else(|| DocumentError::UnknownTensor {
        context: "files".into(),
        name: file.into(),
    })?;
    let tensor = t
        .tensor
        .clone()
        .ok_or_else(|| Error::InvalidGraph("a file tensor needs \"tensor\" (its name)".into()))?;
    if t.data.is_some() || t.values.is_some() {
        return Err(
            Error::InvalidGraph("a file tensor has no \"data\" or \"values\"".into()).into()
        );
    }
    let layout = files.layout(path, &tensor)?;
    let stated_type = match &t.dtype {
        Some(d) => Some(d.parse::<DType>()?),
        None => None,
    };
    let stated_shape = match &t.shape {
        Some(s) => Some(tessera_core::tensor::normalize_shape(s)?),
        None => None,
    };
    if stated_type.is_some_and(|d| d != layout.dtype)
        || stated_shape.is_some_and(|s| s != layout.ne)
    {
        return Err(Error::ShapeMismatch {
            op: "file tensor".into(),
            reason: format!(
                "the document states {} {:?}, but {tensor:?} in {path} is {} {:?}",
                t.dtype.as_deref().unwrap_or("(any type)"),
                t.shape.as_deref().unwrap_or(&[]),
                layout.dtype,
                layout.ne
            ),
        }
        .into());
    }
    Ok(FileSource { path: path.to_string(), tensor, layout })
}

/// Wraps an error as one of the node or tensor `name` (`kind`: "node", "tensor").
fn in_graph<'a, E: Into<DocumentError>>(
    kind: &'static str,
    name: &'a str,
) -> impl FnOnce(E) -> DocumentError + 'a {
    move |error| DocumentError::InGraph {
        kind: kind.into(),
        name: name.into(),
        error: Box::new(error.into()),
    }
}

/// The nodes in an order where every source comes before its readers; a cycle is an error.
fn forward_order<'a>(
    nodes: &'a [DocumentNode],
    by_name: &HashMap<&str, &'a DocumentNode>,
    leaves: &HashMap<&str, TensorId>,
) -> Result<Vec<&'a DocumentNode>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut mark: HashMap<&str, Mark> =
        nodes.iter().map(|n| (n.name.as_str(), Mark::New)).collect();
    let mut order = Vec::with_capacity(nodes.len());
    for root in nodes {
        if mark[root.name.as_str()] != Mark::New {
            continue;
        }
        // Iterative depth-first search: (node, index of the next source to visit).
        let mut stack: Vec<(&DocumentNode, usize)> = vec![(root, 0)];
        mark.insert(&root.name, Mark::Open);
        while let Some((node, next)) = stack.pop() {
            if next == node.src.len() {
                mark.insert(&node.name, Mark::Done);
                order.push(node);
                continue;
            }
            stack.push((node, next + 1));
            let s = node.src[next].as_str();
            if leaves.contains_key(s) {
                continue;
            }
            let Some(&child) = by_name.get(s) else {
                return Err(DocumentError::UnknownTensor {
                    context: format!("node {:?}", node.name),
                    name: s.to_string(),
                });
            };
            match mark[s] {
                Mark::Done => {}
                Mark::Open => return Err(DocumentError::Cycle(s.to_string())),
                Mark::New => {
                    mark.insert(&child.name, Mark::Open);
                    stack.push((child, 0));
                }
            }
        }
    }
    Ok(order)
}

fn leaf_data(t: &DocumentTensor, layout: &Layout) -> Result<Option<Vec<u8>>> {
    let nbytes = layout.nbytes();
    // The shape as the document gives it (`[3]`, not `Some([3])`).
    let shape = t.shape.as_deref().unwrap_or_default();
    match (&t.data, &t.values) {
        (Some(_), Some(_)) => {
            Err(DocumentError::invalid("give either \"data\" or \"values\", not both"))
        }
        (None, None) => Ok(None),
        (Some(b64), None) => {
            let bytes = base64_decode(b64)?;
            if bytes.len() != nbytes {
                return Err(Error::DataLength {
                    context: format!("data of {} {shape:?}", layout.dtype),
                    expected: nbytes,
                    actual: bytes.len(),
                }
                .into());
            }
            Ok(Some(bytes))
        }
        (None, Some(values)) => {
            let n = layout.nelements();
            if values.len() != n {
                return Err(DocumentError::ValueCount {
                    context: format!("values of {} {shape:?}", layout.dtype),
                    expected: n,
                    actual: values.len(),
                });
            }
            Ok(Some(values_to_bytes(layout.dtype, values)?))
        }
    }
}

/// Converts numbers to the bytes of `dtype` (quantizing row by row for block types).
pub fn values_to_bytes(dtype: DType, values: &[f64]) -> CoreResult<Vec<u8>> {
    if dtype == DType::I32 {
        return values
            .iter()
            .map(|&v| {
                if v.fract() != 0.0 || v < i32::MIN as f64 || v > i32::MAX as f64 {
                    Err(Error::InvalidGraph(format!("{v} is not an I32 value")))
                } else {
                    Ok((v as i32).to_le_bytes())
                }
            })
            .collect::<CoreResult<Vec<_>>>()
            .map(|v| v.concat());
    }
    let f: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    let mut out = vec![0u8; dtype.row_size(f.len())?];
    tessera_core::quant::quantize_row(dtype, &f, &mut out)?;
    Ok(out)
}

fn param_map(n: &DocumentNode) -> Value {
    Value::Object(n.params.clone())
}

fn params<T: for<'de> Deserialize<'de>>(n: &DocumentNode) -> CoreResult<T> {
    strict_json::from_value(param_map(n), 0)
        .map_err(|e| Error::param(&n.op, format!("params: {e}")))
}

fn no_params(n: &DocumentNode) -> CoreResult<()> {
    if n.params.is_empty() {
        Ok(())
    } else {
        let keys: Vec<&String> = n.params.keys().collect();
        Err(Error::param(&n.op, format!("takes no params, got {keys:?}")))
    }
}

fn arity(n: &DocumentNode, srcs: &[TensorId], allowed: &[usize]) -> CoreResult<()> {
    if allowed.contains(&srcs.len()) {
        Ok(())
    } else {
        let want: Vec<String> = allowed.iter().map(|a| a.to_string()).collect();
        Err(Error::InvalidGraph(format!(
            "{} takes {} sources, got {}",
            n.op,
            want.join(" or "),
            srcs.len()
        )))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScaleParams {
    scale: f32,
    #[serde(default)]
    bias: f32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClampParams {
    min: f32,
    max: f32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DimParams {
    dim: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShapeParams {
    shape: Vec<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ViewParams {
    shape: Vec<usize>,
    #[serde(default)]
    strides: Option<Vec<usize>>,
    #[serde(default)]
    offset: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AxesParams {
    axes: [usize; 4],
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SoftMaxParams {
    #[serde(default = "one")]
    scale: f32,
    #[serde(default)]
    max_bias: f32,
}

fn one() -> f32 {
    1.0
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NPastParams {
    n_past: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EpsParams {
    #[serde(default = "default_eps")]
    eps: f32,
}

fn default_eps() -> f32 {
    1e-6
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GluParams {
    #[serde(default)]
    swapped: bool,
}

fn add_node(g: &mut Graph, n: &DocumentNode, s: &[TensorId]) -> CoreResult<TensorId> {
    let unary = |op: UnaryOp| -> Option<UnaryOp> { Some(op) };
    let un = match n.op.as_str() {
        "SILU" => unary(UnaryOp::Silu),
        "GELU" => unary(UnaryOp::Gelu),
        "RELU" => unary(UnaryOp::Relu),
        "TANH" => unary(UnaryOp::Tanh),
        "SIGMOID" => unary(UnaryOp::Sigmoid),
        "SOFTPLUS" => unary(UnaryOp::Softplus),
        _ => None,
    };
    if let Some(u) = un {
        arity(n, s, &[1])?;
        no_params(n)?;
        return g.unary(s[0], u);
    }
    match n.op.as_str() {
        "ADD" | "SUB" | "MUL" | "DIV" | "MUL_MAT" | "GET_ROWS" | "CPY" => {
            arity(n, s, &[2])?;
            no_params(n)?;
            match n.op.as_str() {
                "ADD" => g.add(s[0], s[1]),
                "SUB" => g.sub(s[0], s[1]),
                "MUL" => g.mul(s[0], s[1]),
                "DIV" => g.div(s[0], s[1]),
                "MUL_MAT" => g.mul_mat(s[0], s[1]),
                "GET_ROWS" => g.get_rows(s[0], s[1]),
                _ => g.cpy(s[0], s[1]),
            }
        }
        "DUP" | "CONT" | "SQR" | "SQRT" | "SUM" | "SUM_ROWS" | "MEAN" | "ARGMAX" | "TRANSPOSE" => {
            arity(n, s, &[1])?;
            no_params(n)?;
            match n.op.as_str() {
                "DUP" => g.dup(s[0]),
                "CONT" => g.cont(s[0]),
                "SQR" => g.sqr(s[0]),
                "SQRT" => g.sqrt(s[0]),
                "SUM" => g.sum(s[0]),
                "SUM_ROWS" => g.sum_rows(s[0]),
                "MEAN" => g.mean(s[0]),
                "ARGMAX" => g.argmax(s[0]),
                _ => g.transpose(s[0]),
            }
        }
        "SCALE" => {
            arity(n, s, &[1])?;
            let p: ScaleParams = params(n)?;
            g.scale_bias(s[0], p.scale, p.bias)
        }
        "CLAMP" => {
            arity(n, s, &[1])?;
            let p: ClampParams = params(n)?;
            g.clamp(s[0], p.min, p.max)
        }
        "REPEAT" => {
            arity(n, s, &[1])?;
            let p: ShapeParams = params(n)?;
            g.repeat_to(s[0], &p.shape)
        }
        "CONCAT" => {
            arity(n, s, &[2])?;
            let p: DimParams = params(n)?;
            g.concat(s[0], s[1], p.dim)
        }
        "SSM_CONV" => {
            arity(n, s, &[2])?;
            g.ssm_conv(s[0], s[1])
        }
        "GATED_DELTA_NET" => {
            arity(n, s, &[6])?;
            g.gated_delta_net(s[0], s[1], s[2], s[3], s[4], s[5])
        }
        "SOFT_MAX" => {
            arity(n, s, &[1, 2])?;
            let p: SoftMaxParams = params(n)?;
            g.soft_max_ext(s[0], s.get(1).copied(), p.scale, p.max_bias)
        }
        "DIAG_MASK_INF" => {
            arity(n, s, &[1])?;
            let p: NPastParams = params(n)?;
            g.diag_mask_inf(s[0], p.n_past)
        }
        "RMS_NORM" | "NORM" => {
            arity(n, s, &[1])?;
            let p: EpsParams = params(n)?;
            if n.op == "NORM" {
                g.norm(s[0], p.eps)
            } else {
                g.rms_norm(s[0], p.eps)
            }
        }
        "SET_ROWS" => {
            arity(n, s, &[3])?;
            no_params(n)?;
            g.set_rows(s[0], s[1], s[2])
        }
        "FLASH_ATTN_EXT" => {
            arity(n, s, &[3, 4])?;
            let p: AttnParams = params(n)?;
            g.flash_attn_ext(s[0], s[1], s[2], s.get(3).copied(), p)
        }
        "ROPE" => {
            arity(n, s, &[2, 3])?;
            let p: RopeParams = params(n)?;
            g.rope_ext(s[0], s[1], s.get(2).copied(), p)
        }
        "SWIGLU" | "GEGLU" => {
            arity(n, s, &[1, 2])?;
            let p: GluParams = params(n)?;
            let op = if n.op == "SWIGLU" { GluOp::Swiglu } else { GluOp::Geglu };
            g.glu_node(op, p.swapped, s)
        }
        "RESHAPE" => {
            arity(n, s, &[1])?;
            let p: ShapeParams = params(n)?;
            g.reshape(s[0], &p.shape)
        }
        "VIEW" => {
            arity(n, s, &[1])?;
            let p: ViewParams = params(n)?;
            let strides = match p.strides {
                Some(st) => st,
                None => {
                    // Default: the source's strides for dims 1.. (a sub-block of it).
                    let nb = g.get(s[0])?.nb();
                    nb[1..p.shape.len().clamp(1, 4)].to_vec()
                }
            };
            g.view(s[0], &p.shape, &strides, p.offset)
        }
        "PERMUTE" => {
            arity(n, s, &[1])?;
            let p: AxesParams = params(n)?;
            g.permute(s[0], p.axes)
        }
        other => Err(Error::UnknownOp(other.to_string())),
    }
}
