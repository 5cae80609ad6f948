//! A GGUF writer for tests that records where each field lands, so that tests can build valid
//! files and then break one field at a time.
#![allow(dead_code)]

/// A metadata value as written: `Arr` is an element type code, then the items (written
/// without their own type code, as GGUF does).
#[derive(Clone, Debug)]
pub enum V {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(String),
    /// A string of arbitrary bytes.
    RawStr(Vec<u8>),
    Arr(u32, Vec<V>),
    /// Bytes written as they are.
    Raw(Vec<u8>),
}

/// One metadata entry: key, value type code, value.
#[derive(Clone, Debug)]
pub struct Kv {
    pub key: String,
    pub code: u32,
    pub value: V,
}

/// One tensor table entry.
#[derive(Clone, Debug)]
pub struct Ti {
    pub name: String,
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub offset: u64,
}

/// A whole file.
#[derive(Clone, Debug)]
pub struct Spec {
    pub magic: [u8; 4],
    /// The four version bytes (little-endian 3 for a valid file).
    pub version: [u8; 4],
    /// Counts written in the header, when not the real ones.
    pub tensor_count: Option<u64>,
    pub kv_count: Option<u64>,
    pub kvs: Vec<Kv>,
    pub tensors: Vec<Ti>,
    /// Alignment used to pad the table to the data section.
    pub alignment: usize,
    /// The data section.
    pub data: Vec<u8>,
}

/// What kind of field a recorded position holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A `u64` count: tensors, metadata entries, array elements.
    Count,
    /// A `u64` string length.
    Length,
    /// A `u32` value type code (of a value or of array elements).
    ValueType,
    /// A tensor's `u32` dimension count.
    NDims,
    /// A tensor's `u64` dimension.
    Dim,
    /// A tensor's `u32` type id.
    TensorType,
    /// A tensor's `u64` offset.
    TensorOffset,
}

/// A field's position in the built file.
#[derive(Clone, Debug)]
pub struct Field {
    pub kind: Kind,
    pub at: usize,
    pub width: usize,
    pub what: String,
}

/// A built file and where its fields and sections are.
pub struct Built {
    pub bytes: Vec<u8>,
    pub fields: Vec<Field>,
    /// End of the header (24).
    pub header_end: usize,
    /// End of the metadata.
    pub metadata_end: usize,
    /// End of the tensor table.
    pub table_end: usize,
    /// Start of the data section.
    pub data_offset: usize,
}

struct W {
    b: Vec<u8>,
    fields: Vec<Field>,
}

impl W {
    fn field(&mut self, kind: Kind, width: usize, what: String) {
        self.fields.push(Field { kind, at: self.b.len(), width, what });
    }
    fn u32(&mut self, v: u32) {
        self.b.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.b.extend_from_slice(&v.to_le_bytes());
    }
    fn string(&mut self, s: &[u8], what: &str) {
        self.field(Kind::Length, 8, format!("length of {what}"));
        self.u64(s.len() as u64);
        self.b.extend_from_slice(s);
    }
    fn value(&mut self, v: &V, what: &str) {
        match v {
            V::U8(x) => self.b.push(*x),
            V::I8(x) => self.b.extend_from_slice(&x.to_le_bytes()),
            V::U16(x) => self.b.extend_from_slice(&x.to_le_bytes()),
            V::I16(x) => self.b.extend_from_slice(&x.to_le_bytes()),
            V::U32(x) => self.u32(*x),
            V::I32(x) => self.b.extend_from_slice(&x.to_le_bytes()),
            V::F32(x) => self.b.extend_from_slice(&x.to_le_bytes()),
            V::U64(x) => self.u64(*x),
            V::I64(x) => self.b.extend_from_slice(&x.to_le_bytes()),
            V::F64(x) => self.b.extend_from_slice(&x.to_le_bytes()),
            V::Str(s) => self.string(s.as_bytes(), what),
            V::RawStr(s) => self.string(s, what),
            V::Raw(b) => self.b.extend_from_slice(b),
            V::Arr(code, items) => {
                self.field(Kind::ValueType, 4, format!("element type of {what}"));
                self.u32(*code);
                self.field(Kind::Count, 8, format!("count of {what}"));
                self.u64(items.len() as u64);
                for (i, it) in items.iter().enumerate() {
                    self.value(it, &format!("{what}[{i}]"));
                }
            }
        }
    }
}

/// Writes `spec`.
pub fn build(spec: &Spec) -> Built {
    let mut w = W { b: Vec::new(), fields: Vec::new() };
    w.b.extend_from_slice(&spec.magic);
    w.b.extend_from_slice(&spec.version);
    w.field(Kind::Count, 8, "tensor count".into());
    w.u64(spec.tensor_count.unwrap_or(spec.tensors.len() as u64));
    w.field(Kind::Count, 8, "metadata count".into());
    w.u64(spec.kv_count.unwrap_or(spec.kvs.len() as u64));
    let header_end = w.b.len();
    for kv in &spec.kvs {
        w.string(kv.key.as_bytes(), &format!("key {:?}", kv.key));
        w.field(Kind::ValueType, 4, format!("type of {:?}", kv.key));
        w.u32(kv.code);
        w.value(&kv.value, &format!("value of {:?}", kv.key));
    }
    let metadata_end = w.b.len();
    for t in &spec.tensors {
        w.string(t.name.as_bytes(), &format!("name {:?}", t.name));
        w.field(Kind::NDims, 4, format!("n_dims of {:?}", t.name));
        w.u32(t.dims.len() as u32);
        for (d, &n) in t.dims.iter().enumerate() {
            w.field(Kind::Dim, 8, format!("dim {d} of {:?}", t.name));
            w.u64(n);
        }
        w.field(Kind::TensorType, 4, format!("type of {:?}", t.name));
        w.u32(t.type_id);
        w.field(Kind::TensorOffset, 8, format!("offset of {:?}", t.name));
        w.u64(t.offset);
    }
    let table_end = w.b.len();
    let data_offset = table_end.next_multiple_of(spec.alignment);
    w.b.resize(data_offset, 0);
    w.b.extend_from_slice(&spec.data);
    Built { bytes: w.b, fields: w.fields, header_end, metadata_end, table_end, data_offset }
}

fn kv(key: &str, code: u32, value: V) -> Kv {
    Kv { key: key.into(), code, value }
}

/// Value type codes.
pub mod code {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// ggml type ids used by the small file.
pub const T_F32: u32 = 0;
pub const T_Q8_0: u32 = 8;
pub const T_Q4_K: u32 = 12;

/// A small valid file: every value type, arrays (of strings, of arrays), alignment 64, three
/// tensors (F32 [4, 3], Q8_0 [64], Q4_K [256, 2]) with padding between them.
pub fn small_spec() -> Spec {
    use code::*;
    let kvs = vec![
        kv("general.architecture", STRING, V::Str("test".into())),
        kv("general.alignment", U32, V::U32(64)),
        kv("u8", U8, V::U8(200)),
        kv("i8", I8, V::I8(-100)),
        kv("u16", U16, V::U16(60000)),
        kv("i16", I16, V::I16(-30000)),
        kv("u32", U32, V::U32(4_000_000_000)),
        kv("i32", I32, V::I32(-2_000_000_000)),
        kv("f32", F32, V::F32(0.25)),
        kv("bool", BOOL, V::U8(1)),
        kv("u64", U64, V::U64(1 << 60)),
        kv("i64", I64, V::I64(-(1 << 60))),
        kv("f64", F64, V::F64(-1.5e300)),
        kv("tokens", ARRAY, V::Arr(STRING, vec![V::Str("a".into()), V::Str("bc".into())])),
        kv("scores", ARRAY, V::Arr(F32, vec![V::F32(1.0), V::F32(-2.0), V::F32(0.5)])),
        kv("flags", ARRAY, V::Arr(BOOL, vec![V::U8(0), V::U8(1)])),
        kv(
            "nested",
            ARRAY,
            V::Arr(
                ARRAY,
                vec![
                    V::Arr(I32, vec![V::I32(1), V::I32(2)]),
                    V::Arr(STRING, vec![V::Str("z".into())]),
                ],
            ),
        ),
        kv("empty", ARRAY, V::Arr(U64, vec![])),
    ];
    // F32 [4, 3] = 48 bytes at 0; Q8_0 [64] = 68 bytes at 64; Q4_K [256, 2] = 288 bytes at 192.
    let tensors = vec![
        Ti { name: "a.f32".into(), dims: vec![4, 3], type_id: T_F32, offset: 0 },
        Ti { name: "b.q8_0".into(), dims: vec![64], type_id: T_Q8_0, offset: 64 },
        Ti { name: "c.q4_k".into(), dims: vec![256, 2], type_id: T_Q4_K, offset: 192 },
    ];
    let data: Vec<u8> = (0..480u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
    Spec {
        magic: *b"GGUF",
        version: 3u32.to_le_bytes(),
        tensor_count: None,
        kv_count: None,
        kvs,
        tensors,
        alignment: 64,
        data,
    }
}
