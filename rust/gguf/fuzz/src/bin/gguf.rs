//! Fuzz target `gguf`: any bytes through `GgufFile::from_bytes`. Errors are fine; a panic, an
//! abort (e.g. a failed huge allocation) or a hang is a finding. Files that parse are checked
//! for consistency: every tensor's bytes lie in the file where the table says, every key and
//! tensor name resolves to its own entry.

fn check(data: &[u8]) {
    let Ok(f) = tessera_gguf::GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    assert_eq!(f.bytes(), data);
    assert!(matches!(f.version(), 2 | 3));
    assert!(f.alignment().is_power_of_two());
    assert_eq!(f.data_offset() % f.alignment(), 0);
    for (key, value) in f.metadata() {
        assert!(std::ptr::eq(f.get(key).unwrap(), value));
        if let tessera_gguf::Value::Array(a) = value {
            assert_eq!(a.get(a.len()), None);
        }
    }
    for t in f.tensors() {
        let bytes = f.tensor_data(t);
        assert_eq!(bytes.len(), t.size);
        assert_eq!(bytes.as_ptr() as usize - data_start(&f), f.data_offset() + t.offset);
        assert_eq!(t.layout().nbytes(), t.size);
        assert_eq!(t.offset % f.alignment(), 0);
        assert!(std::ptr::eq(f.tensor(&t.name).unwrap(), t));
    }
}

fn data_start(f: &tessera_gguf::GgufFile) -> usize {
    f.bytes().as_ptr() as usize
}

fn main() {
    afl::fuzz!(|data: &[u8]| check(data));
}
