//! uniffi's bindings generator, at the uniffi version tessera-ffi links (scripts/bindgen.sh
//! checks that the two Cargo.lock files agree). scripts/bindgen.sh runs it in library mode on
//! the tessera-ffi library that was already built.

fn main() {
    uniffi::uniffi_bindgen_main()
}
