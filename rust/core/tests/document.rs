//! Graph documents: valid documents build the expected graph; every invalid one is rejected
//! with an error that names the tensor or node.

use tessera_core::document::{base64_encode, GraphDocument};
use tessera_core::{DType, Error, Op};

fn build(json: &str) -> Result<tessera_core::document::BuiltGraph, Error> {
    GraphDocument::from_json(json)?.build()
}

const GOOD: &str = r#"{
  "version": 1,
  "tensors": [
    {"name": "x", "type": "F32", "shape": [64, 2]},
    {"name": "w", "type": "Q8_0", "shape": [64, 8], "values": VALUES},
    {"name": "pos", "type": "I32", "shape": [2], "values": [0, 1]}
  ],
  "nodes": [
    {"name": "p", "op": "SOFT_MAX", "src": ["y"], "params": {"scale": 0.5}},
    {"name": "y", "op": "MUL_MAT", "src": ["w", "x"]},
    {"name": "r", "op": "RESHAPE", "src": ["p"], "params": {"shape": [8, 1, 2]}},
    {"name": "q", "op": "ROPE", "src": ["r", "pos"], "params": {"n_dims": 8, "mode": 2}}
  ],
  "outputs": ["p", "q"]
}"#;

fn good() -> String {
    let values: Vec<String> = (0..512).map(|i| format!("{}", (i % 7) as f32 - 3.0)).collect();
    GOOD.replace("VALUES", &format!("[{}]", values.join(",")))
}

#[test]
fn a_valid_document_builds_in_forward_order() {
    let built = build(&good()).unwrap();
    let g = &built.graph;
    assert_eq!(built.inputs.len(), 1);
    assert_eq!(built.inputs[0].0, "x");
    assert_eq!(built.constants.len(), 2);
    assert_eq!(built.constants[0].1.len(), 8 * 2 * 34);
    let y = g.by_name("y").unwrap();
    let p = g.by_name("p").unwrap();
    assert!(y < p, "sources come first");
    assert!(matches!(g.tensor(p).op, Op::SoftMax { scale, .. } if scale == 0.5));
    assert_eq!(g.tensor(y).ne(), [8, 2, 1, 1]);
    assert_eq!(g.tensor(g.by_name("q").unwrap()).dtype(), DType::F32);
    assert_eq!(built.outputs.iter().map(|o| o.0.as_str()).collect::<Vec<_>>(), ["p", "q"]);
    assert!(g.tensor(p).flags.output);
    // Round trip through serde.
    let doc = GraphDocument::from_json(&good()).unwrap();
    assert_eq!(GraphDocument::from_json(&doc.to_json()).unwrap(), doc);
}

fn expect_err(json: &str) -> Error {
    match build(json) {
        Ok(_) => panic!("accepted: {json}"),
        Err(e) => e,
    }
}

fn doc(tensors: &str, nodes: &str, outputs: &str) -> String {
    format!(r#"{{"version":1,"tensors":[{tensors}],"nodes":[{nodes}],"outputs":[{outputs}]}}"#)
}

const X: &str = r#"{"name":"x","type":"F32","shape":[4,2]}"#;

/// SSM_CONV in a document: two operands, the rule's shape; a wrong width is refused naming the
/// node.
#[test]
fn ssm_conv_builds_from_a_document() {
    let t = r#"{"name":"sx","type":"F32","shape":[6,8]},{"name":"c","type":"F32","shape":[3,8]}"#;
    let built =
        build(&doc(t, r#"{"name":"y","op":"SSM_CONV","src":["sx","c"]}"#, r#""y""#)).unwrap();
    let y = built.graph.tensor(built.graph.by_name("y").unwrap());
    assert_eq!((y.op.clone(), y.dtype(), y.ne()), (Op::SsmConv, DType::F32, [8, 4, 1, 1]));
    let t = r#"{"name":"sx","type":"F32","shape":[6,8]},{"name":"c","type":"F32","shape":[3,4]}"#;
    let e = expect_err(&doc(t, r#"{"name":"y","op":"SSM_CONV","src":["sx","c"]}"#, r#""y""#));
    assert!(
        matches!(&e, Error::InGraph { name, error, .. } if name == "y" && matches!(**error, Error::ShapeMismatch { .. })),
        "{e}"
    );
}

#[test]
fn unknown_op_names_the_node() {
    let e = expect_err(&doc(X, r#"{"name":"y","op":"FROBNICATE","src":["x"]}"#, r#""y""#));
    assert!(
        matches!(&e, Error::InGraph { name, error, .. } if name == "y" && matches!(**error, Error::UnknownOp(_))),
        "{e}"
    );
    assert!(e.to_string().contains("FROBNICATE"));
}

#[test]
fn unknown_type_names_the_tensor() {
    let e = expect_err(&doc(r#"{"name":"x","type":"Q9_9","shape":[4]}"#, "", r#""x""#));
    assert!(
        matches!(&e, Error::InGraph { name, error, .. } if name == "x" && matches!(**error, Error::UnknownType(_))),
        "{e}"
    );
}

#[test]
fn missing_source_is_named() {
    let e = expect_err(&doc(X, r#"{"name":"y","op":"SILU","src":["nope"]}"#, r#""y""#));
    assert!(
        matches!(&e, Error::UnknownTensor { name, context } if name == "nope" && context.contains("\"y\"")),
        "{e}"
    );
    let e = expect_err(&doc(X, "", r#""ghost""#));
    assert!(matches!(&e, Error::UnknownTensor { name, .. } if name == "ghost"), "{e}");
}

#[test]
fn shape_mismatch_names_node_op_and_shapes() {
    let t = r#"{"name":"x","type":"F32","shape":[4,2]},{"name":"w","type":"F32","shape":[5,3]}"#;
    let e = expect_err(&doc(t, r#"{"name":"y","op":"MUL_MAT","src":["w","x"]}"#, r#""y""#));
    let msg = e.to_string();
    assert!(
        matches!(&e, Error::InGraph { error, .. } if matches!(**error, Error::ShapeMismatch { .. })),
        "{e}"
    );
    assert!(
        msg.contains("\"y\"") && msg.contains("MUL_MAT") && msg.contains("[5, 3, 1, 1]"),
        "{msg}"
    );
}

#[test]
fn wrong_data_length_is_rejected() {
    let data = base64_encode(&[0u8; 12]);
    let t = format!(r#"{{"name":"c","type":"F32","shape":[4],"data":"{data}"}}"#);
    let e = expect_err(&doc(&t, "", r#""c""#));
    assert!(
        matches!(&e, Error::InGraph { name, error, .. } if name == "c" && matches!(**error, Error::DataLength { expected: 16, actual: 12, .. })),
        "{e}"
    );
    let e =
        expect_err(&doc(r#"{"name":"c","type":"F32","shape":[4],"values":[1,2,3]}"#, "", r#""c""#));
    assert!(
        matches!(&e, Error::InGraph { error, .. } if matches!(**error, Error::ValueCount { expected: 4, actual: 3, .. })),
        "{e}"
    );
    let e = expect_err(&doc(r#"{"name":"c","type":"F32","shape":[1],"data":"@@"}"#, "", r#""c""#));
    assert!(e.to_string().contains("base64"), "{e}");
    let e =
        expect_err(&doc(r#"{"name":"c","type":"I32","shape":[1],"values":[1.5]}"#, "", r#""c""#));
    assert!(e.to_string().contains("I32"), "{e}");
}

#[test]
fn duplicate_names_are_rejected() {
    let e = expect_err(&doc(&format!("{X},{X}"), "", r#""x""#));
    assert_eq!(e, Error::DuplicateName("x".into()));
    let e = expect_err(&doc(X, r#"{"name":"x","op":"SILU","src":["x"]}"#, r#""x""#));
    assert_eq!(e, Error::DuplicateName("x".into()));
    let e = expect_err(&doc(
        X,
        r#"{"name":"y","op":"SILU","src":["x"]},{"name":"y","op":"RELU","src":["x"]}"#,
        r#""y""#,
    ));
    assert_eq!(e, Error::DuplicateName("y".into()));
    let e = expect_err(&doc(X, "", r#""x","x""#));
    assert_eq!(e, Error::InvalidGraph("output \"x\" is listed twice".into()));
}

#[test]
fn unsupported_version_is_rejected() {
    for v in ["3", "0"] {
        let e = expect_err(&good().replacen("\"version\": 1", &format!("\"version\": {v}"), 1));
        let want = format!("unsupported version {v}");
        assert!(matches!(&e, Error::InvalidGraph(m) if m.contains(&want)), "{e}");
    }
    // Version 2 reads every version-1 document.
    build(&good().replacen("\"version\": 1", "\"version\": 2", 1)).unwrap();
}

#[test]
fn cycles_are_rejected() {
    let e = expect_err(&doc(
        X,
        r#"{"name":"a","op":"ADD","src":["x","b"]},{"name":"b","op":"ADD","src":["a","x"]}"#,
        r#""b""#,
    ));
    assert!(matches!(&e, Error::Cycle(n) if n == "a" || n == "b"), "{e}");
    let e = expect_err(&doc(X, r#"{"name":"s","op":"SILU","src":["s"]}"#, r#""s""#));
    assert!(matches!(&e, Error::Cycle(n) if n == "s"), "{e}");
}

#[test]
fn bad_params_and_arity_are_rejected() {
    for (nodes, want) in [
        (r#"{"name":"y","op":"SCALE","src":["x"]}"#, "missing field `scale`"),
        (
            r#"{"name":"y","op":"SCALE","src":["x"],"params":{"scale":1,"zoom":2}}"#,
            "unknown field `zoom`",
        ),
        (r#"{"name":"y","op":"SILU","src":["x"],"params":{"a":1}}"#, "takes no params"),
        (r#"{"name":"y","op":"ADD","src":["x"]}"#, "takes 2 sources"),
        (r#"{"name":"y","op":"PERMUTE","src":["x"],"params":{"axes":[0,0,1,2]}}"#, "permutation"),
        (r#"{"name":"y","op":"VIEW","src":["x"],"params":{"shape":[4,3]}}"#, "out of bounds"),
        (r#"{"name":"y","op":"RESHAPE","src":["x"],"params":{"shape":[0]}}"#, "zero"),
        (r#"{"name":"y","op":"ROPE","src":["x","x"],"params":{"n_dims":2}}"#, "I32"),
    ] {
        let e = expect_err(&doc(X, nodes, r#""y""#));
        assert!(e.to_string().contains(want), "{nodes}: {e}");
        assert!(e.to_string().contains("\"y\""), "{nodes}: {e}");
    }
    let e = expect_err(r#"{"version":1,"tensors":[],"nodes":[],"outputs":[],"extra":1}"#);
    assert!(e.to_string().contains("unknown field"), "{e}");
    let e = expect_err("{not json");
    assert!(matches!(e, Error::InvalidGraph(_)));
    let e = expect_err(&doc(X, "", ""));
    assert!(e.to_string().contains("no outputs"), "{e}");
    let e = expect_err(&doc(
        r#"{"name":"h","type":"F32","shape":[1099511627776,1099511627776]}"#,
        "",
        r#""h""#,
    ));
    assert!(
        matches!(&e, Error::InGraph { error, .. } if matches!(**error, Error::InvalidShape { .. } | Error::Overflow { .. })),
        "{e}"
    );
}
