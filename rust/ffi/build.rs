//! Records the target triple and the enabled cargo features for `build_info()`.

fn main() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=TESSERA_FFI_TARGET={target}");
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| {
            k.strip_prefix("CARGO_FEATURE_").map(|f| f.to_lowercase().replace('_', "-"))
        })
        .collect();
    features.sort();
    println!("cargo:rustc-env=TESSERA_FFI_FEATURES={}", features.join(","));
    println!("cargo:rerun-if-changed=build.rs");
}
