//! uniffi's bindings generator, built from this crate so that its version always matches the
//! library's uniffi (`cargo run -p tessera-ffi --features bindgen --bin uniffi-bindgen -- ...`).
//! scripts/bindgen.sh runs it in library mode.

fn main() {
    uniffi::uniffi_bindgen_main()
}
