//! Malformed files, made from a small valid one (tests/common): truncated at every byte, every
//! count and length set to huge values, offsets moved, names duplicated, bad dimensions, types,
//! versions, alignments, booleans, UTF-8 and nesting, and 20000 random mutations. Each case
//! must give its own typed error naming the right byte offset; none may panic, and no parse may
//! allocate more than [`ALLOC_LIMIT`] bytes beyond its copy of the file (a counting global
//! allocator measures every parse).

mod common;

use common::{build, code, small_spec, Kind, Kv, Spec, Ti, V};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use tessera_core::DType;
use tessera_gguf::{GgufError, GgufFile, ValueType, MAX_ARRAY_DEPTH};

/// The most one parse may allocate at its peak beyond its copy of the file.
const ALLOC_LIMIT: usize = 256 << 10;

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let v = l.get() + delta;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: forwards to the system allocator and only counts sizes in thread-local cells that
// need no allocation (const-initialized, no destructor).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track(-(layout.size() as isize));
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        track(new_size as isize - layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Parses `bytes`, checking the peak of what the parse allocates on this thread.
fn parse(bytes: &[u8]) -> Result<GgufFile, GgufError> {
    let v = bytes.to_vec();
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let r = GgufFile::from_bytes(v);
    let peak = PEAK.with(Cell::get) - base;
    // `from_bytes` copies the file once (into aligned memory): that much more is allowed.
    assert!(
        peak < (bytes.len() + ALLOC_LIMIT) as isize,
        "parsing {} bytes allocated {peak} bytes at its peak ({:?})",
        bytes.len(),
        r.as_ref().err()
    );
    r
}

fn err(bytes: &[u8]) -> GgufError {
    match parse(bytes) {
        Ok(f) => panic!("a malformed file parsed: {f:?}"),
        Err(e) => e,
    }
}

fn err_of(spec: &Spec) -> GgufError {
    err(&build(spec).bytes)
}

fn patch(bytes: &[u8], at: usize, width: usize, v: u64) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
    b
}

fn field(spec: &Spec, kind: Kind, what: &str) -> (Vec<u8>, usize, usize) {
    let built = build(spec);
    let f = built
        .fields
        .iter()
        .find(|f| f.kind == kind && f.what == what)
        .unwrap_or_else(|| panic!("no field {what:?}"));
    (built.bytes, f.at, f.width)
}

#[test]
fn the_small_file_is_valid_and_reads_back() {
    let built = build(&small_spec());
    let f = parse(&built.bytes).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_offset(), built.data_offset);
    assert_eq!(f.data_offset() % 64, 0);
    assert_eq!(f.metadata().len(), small_spec().kvs.len());
    assert_eq!(f.architecture().unwrap(), "test");
    assert_eq!(f.get_u32("u8").unwrap(), 200);
    assert_eq!(f.get_u64("u32").unwrap(), 4_000_000_000);
    assert_eq!(f.get_i64("i32").unwrap(), -2_000_000_000);
    assert_eq!(f.get_i32("u16").unwrap(), 60000);
    assert_eq!(f.get_f32("f32").unwrap(), 0.25);
    assert_eq!(f.get_f64("f32").unwrap(), 0.25);
    assert_eq!(f.get_f64("f64").unwrap(), -1.5e300);
    assert!(f.get_bool("bool").unwrap());
    let tokens = f.get_array("tokens").unwrap();
    assert_eq!(tokens.as_str_slice().unwrap(), ["a", "bc"]);
    assert_eq!(f.get_array("flags").unwrap().as_bool_slice().unwrap(), [false, true]);
    let nested = f.get_array("nested").unwrap().as_array_slice().unwrap();
    assert_eq!(nested[0].as_i32_slice().unwrap(), [1, 2]);
    assert_eq!(nested[1].as_str_slice().unwrap(), ["z"]);
    let empty = f.get_array("empty").unwrap();
    assert_eq!((empty.len(), empty.element_type()), (0, ValueType::U64));

    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a.f32", "b.q8_0", "c.q4_k"]);
    let c = f.tensor("c.q4_k").unwrap();
    assert_eq!(
        (c.dtype, c.shape(), c.ne, c.n_dims),
        (DType::Q4_K, &[256, 2][..], [256, 2, 1, 1], 2)
    );
    assert_eq!((c.offset, c.size), (192, 288));
    assert_eq!(c.layout(), tessera_core::Layout::contiguous(DType::Q4_K, &[256, 2]).unwrap());
    let d = built.data_offset;
    assert_eq!(f.tensor_data(c), &built.bytes[d + 192..d + 480]);
    assert_eq!(f.tensor_bytes("b.q8_0").unwrap(), &built.bytes[d + 64..d + 132]);
    assert_eq!(f.tensor("a.f32").unwrap().size, 48);
    assert!(f.tensor("missing").is_none());
    assert_eq!(f.bytes(), &built.bytes[..]);
    assert_eq!(f.file_size(), built.bytes.len());
    let m = f.memory();
    assert!(m.read_only());
    assert_eq!(m.len(), built.bytes.len());
}

#[test]
fn typed_getters_say_what_is_wrong() {
    let f = parse(&build(&small_spec()).bytes).unwrap();
    assert!(matches!(f.get_u32("nope"), Err(GgufError::MissingKey(k)) if k == "nope"));
    assert!(matches!(f.opt_u32("nope"), Ok(None)));
    assert_eq!(f.opt_u32("u16").unwrap(), Some(60000));
    assert!(matches!(f.get_u32("i8"), Err(GgufError::OutOfRange { .. })));
    assert!(matches!(f.get_u32("u64"), Err(GgufError::OutOfRange { .. })));
    assert!(matches!(f.get_i32("u32"), Err(GgufError::OutOfRange { .. })));
    assert!(matches!(f.get_u32("f32"), Err(GgufError::TypeMismatch { found: ValueType::F32, .. })));
    assert!(matches!(f.opt_str("u8"), Err(GgufError::TypeMismatch { found: ValueType::U8, .. })));
    assert!(matches!(f.get_f32("u8"), Err(GgufError::TypeMismatch { .. })));
    assert!(matches!(f.get_bool("u8"), Err(GgufError::TypeMismatch { .. })));
    assert!(matches!(f.get_array("u8"), Err(GgufError::TypeMismatch { .. })));
    let msg = f.get_u32("f32").unwrap_err().to_string();
    assert!(msg.contains("\"f32\"") && msg.contains("FLOAT32"), "{msg}");
}

/// Cut at every byte: the header, the metadata and the table give Truncated (the field that
/// runs past the end, with the cut as the file's length) or TooLarge (a count the bytes left
/// cannot hold); a cut in the padding or the data section gives OutOfData for the first tensor
/// that no longer fits.
#[test]
fn truncated_at_every_byte() {
    let spec = small_spec();
    let built = build(&spec);
    let full = parse(&built.bytes).unwrap();
    let (mut truncated, mut too_large, mut out_of_data) = (0, 0, 0);
    for cut in 0..built.bytes.len() {
        match err(&built.bytes[..cut]) {
            GgufError::Truncated { offset, need, len, .. } => {
                assert!(cut < built.table_end, "cut {cut}: Truncated in the data section");
                assert_eq!(len, cut);
                assert!(
                    offset <= cut && offset as u64 + need > cut as u64,
                    "cut {cut}: {offset} + {need}"
                );
                truncated += 1;
            }
            GgufError::TooLarge { count, min_size, remaining, offset, .. } => {
                assert!(cut < built.table_end && offset < cut, "cut {cut}");
                assert!(count * min_size as u64 > remaining as u64, "cut {cut}");
                too_large += 1;
            }
            GgufError::OutOfData { tensor, data_offset, data_size, .. } => {
                assert!(cut >= built.table_end, "cut {cut}: OutOfData in the table");
                assert_eq!(data_offset, built.data_offset);
                assert_eq!(data_size, cut.saturating_sub(built.data_offset));
                let first_cut =
                    full.tensors().iter().find(|t| t.offset + t.size > data_size).unwrap();
                assert_eq!(tensor, first_cut.name, "cut {cut}");
                out_of_data += 1;
            }
            GgufError::BadMagic { .. } => panic!("cut {cut}: a prefix of the magic is not bad"),
            e => panic!("cut {cut}: unexpected {e}"),
        }
    }
    assert!(
        truncated > 100 && too_large > 20 && out_of_data > 400,
        "{truncated} {too_large} {out_of_data}"
    );
    // A file cut right after the last tensor's bytes is whole.
    assert!(parse(&built.bytes).is_ok());
}

/// Every count set to huge values gives TooLarge at that count; every string length,
/// Truncated at the bytes it promises.
#[test]
fn every_count_and_length_set_huge() {
    let built = build(&small_spec());
    let len = built.bytes.len() as u64;
    let mut n = 0;
    for f in built.fields.iter().filter(|f| matches!(f.kind, Kind::Count | Kind::Length)) {
        for huge in [u64::MAX, 1 << 63, 1 << 40, 1 << 32, len + 1, len - f.at as u64] {
            let b = patch(&built.bytes, f.at, 8, huge);
            match (f.kind, err(&b)) {
                (Kind::Count, GgufError::TooLarge { count, offset, .. }) => {
                    assert_eq!((count, offset), (huge, f.at), "{}", f.what);
                }
                (Kind::Length, GgufError::Truncated { need, offset, .. }) => {
                    assert_eq!((need, offset), (huge, f.at + 8), "{}", f.what);
                }
                (_, e) => panic!("{} = {huge}: {e}", f.what),
            }
            n += 1;
        }
    }
    assert!(n > 150, "{n} cases");
}

#[test]
fn tensor_offsets_out_of_range_misaligned_or_overlapping() {
    let spec = small_spec();
    let (b, at, w) = field(&spec, Kind::TensorOffset, "offset of \"c.q4_k\"");
    for (v, aligned) in [(193u64, false), (192 + 32, false), (448, true), (512, true), (!63, true)]
    {
        match err(&patch(&b, at, w, v)) {
            GgufError::Misaligned { tensor, tensor_offset, alignment: 64, offset } if !aligned => {
                assert_eq!((tensor.as_str(), tensor_offset, offset), ("c.q4_k", v, at));
            }
            GgufError::OutOfData { tensor, tensor_offset, size: 288, offset, .. } if aligned => {
                assert_eq!((tensor.as_str(), tensor_offset, offset), ("c.q4_k", v, at));
            }
            e => panic!("offset {v}: {e}"),
        }
    }
    let (b, at, w) = field(&spec, Kind::TensorOffset, "offset of \"b.q8_0\"");
    match err(&patch(&b, at, w, 0)) {
        GgufError::Overlap { a, b, a_range, b_range } => {
            assert_eq!(
                (a.as_str(), b.as_str(), a_range, b_range),
                ("a.f32", "b.q8_0", (0, 48), (0, 68))
            );
        }
        e => panic!("{e}"),
    }
    let (b, at, w) = field(&spec, Kind::TensorOffset, "offset of \"c.q4_k\"");
    match err(&patch(&b, at, w, 128)) {
        GgufError::Overlap { a, b, .. } => {
            assert_eq!((a.as_str(), b.as_str()), ("b.q8_0", "c.q4_k"))
        }
        e => panic!("{e}"),
    }
    // Touching is fine: a.f32 grown to 64 bytes ends where b.q8_0 starts.
    let mut s = small_spec();
    s.tensors[0].dims = vec![16];
    assert!(parse(&build(&s).bytes).is_ok());
}

#[test]
fn duplicate_keys_and_tensor_names() {
    let mut s = small_spec();
    s.kvs[5].key = "u8".into();
    let built = build(&s);
    let second =
        built.fields.iter().filter(|f| f.what == "length of key \"u8\"").nth(1).unwrap().at;
    match err(&built.bytes) {
        GgufError::DuplicateKey { key, offset } => {
            assert_eq!((key.as_str(), offset), ("u8", second))
        }
        e => panic!("{e}"),
    }
    let mut s = small_spec();
    s.tensors[2].name = "a.f32".into();
    let built = build(&s);
    let second =
        built.fields.iter().filter(|f| f.what == "length of name \"a.f32\"").nth(1).unwrap().at;
    match err(&built.bytes) {
        GgufError::DuplicateTensor { name, offset } => {
            assert_eq!((name.as_str(), offset), ("a.f32", second))
        }
        e => panic!("{e}"),
    }
}

#[test]
fn bad_dimensions() {
    let cases: [(Vec<u64>, u32, &str); 8] = [
        (vec![], code::U8, "0 dimensions"),
        (vec![4, 1, 1, 1, 1], 0, "5 dimensions"),
        (vec![4, 0], 0, "dimension 1 of [4, 0] is zero"),
        (vec![0], 0, "is zero"),
        (vec![1 << 32, 1 << 32], 0, "overflows"),
        (vec![u64::MAX], 0, ""),
        (vec![1 << 41], 0, "larger than"),
        (vec![1 << 30, 1 << 30], 0, "exceed the limit"),
    ];
    for (dims, type_id, reason_part) in cases {
        let mut s = small_spec();
        s.tensors[1] = Ti { name: "bad".into(), dims: dims.clone(), type_id, offset: 64 };
        let (_, at, _) = field(&s, Kind::NDims, "n_dims of \"bad\"");
        match err_of(&s) {
            GgufError::BadDims { tensor, reason, offset } => {
                assert_eq!((tensor.as_str(), offset), ("bad", at), "{dims:?}");
                assert!(reason.contains(reason_part), "{dims:?}: {reason}");
            }
            e => panic!("{dims:?}: {e}"),
        }
    }
    let mut s = small_spec();
    s.tensors[1].dims = vec![48, 1];
    let (_, at, _) = field(&s, Kind::NDims, "n_dims of \"b.q8_0\"");
    match err_of(&s) {
        GgufError::NotWholeBlocks { tensor, dtype, ne0, block, offset } => {
            assert_eq!(
                (tensor.as_str(), dtype, ne0, block, offset),
                ("b.q8_0", DType::Q8_0, 48, 32, at)
            );
        }
        e => panic!("{e}"),
    }
}

#[test]
fn unknown_tensor_and_value_types() {
    let spec = small_spec();
    let (b, at, w) = field(&spec, Kind::TensorType, "type of \"b.q8_0\"");
    for code in [4u32, 16, 24, 28, 31, 43, 1000, u32::MAX] {
        match err(&patch(&b, at, w, code.into())) {
            GgufError::UnknownTensorType { tensor, code: c, offset } => {
                assert_eq!((tensor.as_str(), c, offset), ("b.q8_0", code, at));
            }
            e => panic!("type {code}: {e}"),
        }
    }
    let msg = err(&patch(&b, at, w, 21)).to_string();
    assert!(msg.contains("IQ3_S") && msg.contains("not supported by Tessera"), "{msg}");
    for (what, code) in [
        ("type of \"u8\"", 13u32),
        ("type of \"i8\"", u32::MAX),
        ("element type of value of \"tokens\"", 13),
    ] {
        let (b, at, w) = field(&spec, Kind::ValueType, what);
        match err(&patch(&b, at, w, code.into())) {
            GgufError::UnknownValueType { code: c, offset, .. } => {
                assert_eq!((c, offset), (code, at), "{what}")
            }
            e => panic!("{what}: {e}"),
        }
    }
}

#[test]
fn bad_magic_versions_and_big_endian() {
    let b = build(&small_spec()).bytes;
    let mut bad = b.clone();
    bad[..4].copy_from_slice(b"GGML");
    assert!(matches!(err(&bad), GgufError::BadMagic { found } if found == b"GGML"));
    assert!(matches!(err(b"XY"), GgufError::BadMagic { .. }));
    assert!(matches!(err(b"GG"), GgufError::Truncated { .. }));
    assert!(matches!(err(b""), GgufError::Truncated { offset: 0, need: 4, len: 0, .. }));
    for v in [0u32, 1, 4, 0x0102] {
        assert!(
            matches!(err(&patch(&b, 4, 4, v.into())), GgufError::UnsupportedVersion(x) if x == v)
        );
    }
    let msg = err(&patch(&b, 4, 4, 1)).to_string();
    assert!(msg.contains("version 1"), "{msg}");
    for v in [2u32, 3] {
        let mut be = b.clone();
        be[4..8].copy_from_slice(&v.to_be_bytes());
        assert!(matches!(err(&be), GgufError::BigEndian { version } if version == v));
    }
    let f = parse(&patch(&b, 4, 4, 2)).unwrap();
    assert_eq!(f.version(), 2);
}

#[test]
fn alignment_must_be_a_power_of_two() {
    for v in [V::U32(0), V::U32(3), V::U32(48), V::U64(1 << 40), V::I32(-64)] {
        let mut s = small_spec();
        s.kvs[1].code = match v {
            V::U64(_) => code::U64,
            V::I32(_) => code::I32,
            _ => code::U32,
        };
        s.kvs[1].value = v.clone();
        let built = build(&s);
        let at =
            built.fields.iter().find(|f| f.what == "type of \"general.alignment\"").unwrap().at + 4;
        match err(&built.bytes) {
            GgufError::BadAlignment { offset, .. } => assert_eq!(offset, at, "{v:?}"),
            e => panic!("{v:?}: {e}"),
        }
    }
    let mut s = small_spec();
    s.kvs[1] =
        Kv { key: "general.alignment".into(), code: code::STRING, value: V::Str("64".into()) };
    assert!(matches!(err_of(&s), GgufError::TypeMismatch { found: ValueType::String, .. }));
    // Another alignment the offsets fit, taken from any integer type: the data section moves.
    for (code, value) in [(code::U32, V::U32(16)), (code::U8, V::U8(16)), (code::U64, V::U64(16))] {
        let mut s = small_spec();
        s.kvs[1] = Kv { key: "general.alignment".into(), code, value };
        s.alignment = 16;
        let built = build(&s);
        let f = parse(&built.bytes).unwrap();
        assert_eq!((f.alignment(), f.data_offset()), (16, built.data_offset));
    }
    // Without the key, 32.
    let mut s = small_spec();
    s.kvs.remove(1);
    s.alignment = 32;
    let f = parse(&build(&s).bytes).unwrap();
    assert_eq!(f.alignment(), 32);
}

#[test]
fn bad_booleans_utf8_and_nesting() {
    let mut s = small_spec();
    s.kvs[9].value = V::U8(2);
    assert!(matches!(err_of(&s), GgufError::BadBool { key, value: 2, .. } if key == "bool"));
    let mut s = small_spec();
    s.kvs[15].value = V::Arr(code::BOOL, vec![V::U8(1), V::U8(255)]);
    assert!(matches!(err_of(&s), GgufError::BadBool { key, value: 255, .. } if key == "flags"));

    let mut s = small_spec();
    s.kvs[0].value = V::RawStr(vec![b'a', 0xc3]);
    let at = build(&s)
        .fields
        .iter()
        .find(|f| f.what == "length of value of \"general.architecture\"")
        .unwrap()
        .at
        + 8;
    assert!(matches!(err_of(&s), GgufError::BadUtf8 { offset, .. } if offset == at));
    let mut s = small_spec();
    s.tensors[0].name = "x".into();
    let built = build(&s);
    let at = built.fields.iter().find(|f| f.what == "length of name \"x\"").unwrap().at + 8;
    let mut b = built.bytes;
    b[at] = 0x80;
    assert!(matches!(err(&b), GgufError::BadUtf8 { offset, .. } if offset == at));

    let nest = |depth: usize| {
        let mut v = V::Arr(code::U8, vec![V::U8(7)]);
        for _ in 1..depth {
            v = V::Arr(code::ARRAY, vec![v]);
        }
        let mut s = small_spec();
        s.kvs.push(Kv { key: "deep".into(), code: code::ARRAY, value: v });
        build(&s).bytes
    };
    let f = parse(&nest(MAX_ARRAY_DEPTH)).unwrap();
    let mut a = f.get_array("deep").unwrap();
    for _ in 1..MAX_ARRAY_DEPTH {
        a = &a.as_array_slice().unwrap()[0];
    }
    assert_eq!(a.as_u8_slice().unwrap(), [7]);
    assert!(matches!(
        err(&nest(MAX_ARRAY_DEPTH + 1)),
        GgufError::NestingTooDeep { key, max: MAX_ARRAY_DEPTH, .. } if key == "deep"
    ));
    // Much deeper (would overflow the stack if recursion were unbounded): still the same error.
    let mut raw = Vec::new();
    for _ in 0..100_000 {
        raw.extend_from_slice(&code::ARRAY.to_le_bytes());
        raw.extend_from_slice(&1u64.to_le_bytes());
    }
    raw.extend_from_slice(&code::U8.to_le_bytes());
    raw.extend_from_slice(&1u64.to_le_bytes());
    raw.push(7);
    let mut s = small_spec();
    s.kvs.push(Kv { key: "deep".into(), code: code::ARRAY, value: V::Raw(raw) });
    assert!(matches!(err_of(&s), GgufError::NestingTooDeep { .. }));
}

/// 20000 deterministic random mutations of the small file (bytes changed, u32/u64 fields
/// overwritten with edge values, cuts, splices): every parse returns, within the allocation
/// limit. Most are errors; the ones that parse must be consistent.
#[test]
fn random_mutations_never_panic() {
    let base = build(&small_spec()).bytes;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let edges = [
        0u64,
        1,
        2,
        3,
        4,
        5,
        9,
        12,
        13,
        31,
        32,
        63,
        64,
        255,
        1 << 31,
        1 << 32,
        1 << 40,
        1 << 63,
        u64::MAX,
    ];
    let (mut ok, mut errs) = (0, 0);
    for _ in 0..20_000 {
        let mut b = base.clone();
        for _ in 0..1 + rnd() % 3 {
            let at = (rnd() % b.len() as u64) as usize;
            match rnd() % 4 {
                0 => b[at] = rnd() as u8,
                1 => b[at] ^= 1 << (rnd() % 8),
                2 if at + 8 <= b.len() => {
                    let v = edges[(rnd() % edges.len() as u64) as usize];
                    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
                }
                _ if at + 4 <= b.len() => {
                    let v = edges[(rnd() % edges.len() as u64) as usize] as u32;
                    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
                }
                _ => b.truncate(at),
            }
        }
        match parse(&b) {
            Ok(f) => {
                for t in f.tensors() {
                    assert_eq!(f.tensor_data(t).len(), t.size);
                }
                ok += 1;
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                errs += 1;
            }
        }
    }
    assert!(ok > 0 && errs > 10_000, "{ok} parsed, {errs} errors");
}

#[test]
fn open_maps_the_file_read_only() {
    let dir = std::env::temp_dir().join(format!("tessera_gguf_open_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("small.gguf");
    let built = build(&small_spec());
    std::fs::write(&path, &built.bytes).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert!(f.is_mapped());
    assert_eq!(f.bytes(), &built.bytes[..]);
    let m = f.memory();
    assert!(m.read_only());
    let (start, len) = (m.ptr().as_ptr() as usize, m.len());
    let t = f.tensor("c.q4_k").unwrap();
    let p = f.tensor_data(t).as_ptr() as usize;
    assert_eq!(p, start + f.data_offset() + t.offset);
    assert!(p + t.size <= start + len);
    // The memory outlives the file value.
    drop(f);
    assert_eq!(m.len(), built.bytes.len());

    std::fs::write(&path, b"").unwrap();
    assert!(matches!(GgufFile::open(&path), Err(GgufError::Truncated { len: 0, .. })));
    let missing = dir.join("missing.gguf");
    match GgufFile::open(&missing) {
        Err(GgufError::Io { path, .. }) => assert_eq!(path, missing),
        other => panic!("{other:?}"),
    }
    // A directory is refused as one, without being opened.
    match GgufFile::open(&dir) {
        Err(e @ GgufError::NotRegular { .. }) => {
            assert!(e.to_string().contains("is a directory, not a model file"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
