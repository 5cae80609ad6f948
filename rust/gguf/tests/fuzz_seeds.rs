//! The fuzz seed corpus (rust/gguf/fuzz/seeds/gguf): every seed goes through the parser;
//! `valid-*` seeds must parse, `bad-*` seeds must give the error their name says. The seeds are
//! made by [`seeds`] from the test writer; `TESSERA_WRITE_FUZZ_SEEDS=1 cargo test -p
//! tessera-gguf --test fuzz_seeds` rewrites them, and this test fails when the committed ones
//! differ from what it would write.

mod common;

use common::{build, small_spec, Spec, Ti};
use std::path::Path;
use tessera_core::DType;
use tessera_gguf::{GgufError, GgufFile};

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let small = build(&small_spec());
    let mut v2 = small_spec();
    v2.version = 2u32.to_le_bytes();
    v2.kvs[1].value = common::V::U32(16);
    v2.alignment = 16;
    let mut none = small_spec();
    none.tensors.clear();
    none.data.clear();
    // One tensor of every type, one block (or element) wide.
    let mut every = small_spec();
    every.kvs.truncate(2);
    every.tensors.clear();
    let mut offset = 0u64;
    for t in DType::ALL {
        let ne0 = t.block_size() as u64;
        every.tensors.push(Ti {
            name: t.name().into(),
            dims: vec![ne0],
            type_id: t.ggml_id(),
            offset,
        });
        offset += (t.type_size() as u64).next_multiple_of(64);
    }
    every.data = vec![0x3c; offset as usize];
    let huge = {
        let f = small.fields.iter().find(|f| f.what == "count of value of \"tokens\"").unwrap();
        let mut b = small.bytes.clone();
        b[f.at..f.at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        b
    };
    let overlap = {
        let mut s: Spec = small_spec();
        s.tensors[1].offset = 0;
        build(&s).bytes
    };
    let mut be = small.bytes.clone();
    be[4..8].copy_from_slice(&3u32.to_be_bytes());
    vec![
        ("valid-small.gguf", small.bytes.clone()),
        ("valid-v2-align16.gguf", build(&v2).bytes),
        ("valid-no-tensors.gguf", build(&none).bytes),
        ("valid-every-type.gguf", build(&every).bytes),
        ("bad-truncated.gguf", small.bytes[..small.metadata_end - 3].to_vec()),
        ("bad-huge-count.gguf", huge),
        ("bad-overlap.gguf", overlap),
        ("bad-big-endian.gguf", be),
    ]
}

#[test]
fn every_seed_goes_through_the_parser() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/gguf");
    let seeds = seeds();
    if std::env::var_os("TESSERA_WRITE_FUZZ_SEEDS").is_some() {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &seeds {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();
    let mut names: Vec<String> = seeds.iter().map(|(n, _)| n.to_string()).collect();
    names.sort();
    assert_eq!(on_disk, names, "seed files differ: rewrite them with TESSERA_WRITE_FUZZ_SEEDS=1");
    for (name, bytes) in &seeds {
        let committed = std::fs::read(dir.join(name)).unwrap();
        assert!(committed == *bytes, "{name} differs: rewrite with TESSERA_WRITE_FUZZ_SEEDS=1");
        let r = GgufFile::from_bytes(committed);
        match (name.split('-').next().unwrap(), r) {
            ("valid", Ok(f)) => assert!(!f.metadata().is_empty(), "{name}"),
            ("bad", Err(e)) => {
                let ok = match *name {
                    "bad-truncated.gguf" => matches!(e, GgufError::Truncated { .. }),
                    "bad-huge-count.gguf" => matches!(e, GgufError::TooLarge { .. }),
                    "bad-overlap.gguf" => matches!(e, GgufError::Overlap { .. }),
                    "bad-big-endian.gguf" => matches!(e, GgufError::BigEndian { version: 3 }),
                    _ => false,
                };
                assert!(ok, "{name}: {e}");
            }
            (_, r) => panic!("{name}: {r:?}"),
        }
    }
}
