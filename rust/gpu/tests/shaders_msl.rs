//! Every WGSL kernel, in both variants (integer F16 decoding, and the `shader-f16` one) and for
//! every weight type it is specialized for (the `WTYPE` override), is validated by naga and
//! translated to Metal Shading Language 2.0, 2.4 and 3.0 the way wgpu's Metal backend does it
//! (overrides resolved, then MSL), since no Apple machine runs the tests.

use naga::back::msl;
use tessera_gpu::kernels::{Kernel, Shader};

/// The two sources of `shader` with the naga capabilities each needs.
fn variants(shader: Shader) -> [(&'static str, String, naga::valid::Capabilities); 2] {
    [
        ("integer f16", shader.source(), naga::valid::Capabilities::empty()),
        (
            "shader-f16",
            shader.source_f16(),
            naga::valid::Capabilities::SHADER_FLOAT16
                | naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32,
        ),
    ]
}

fn parse_and_validate(
    shader: Shader,
    src: &str,
    caps: naga::valid::Capabilities,
) -> (naga::Module, naga::valid::ModuleInfo) {
    let module = naga::front::wgsl::parse_str(src)
        .unwrap_or_else(|e| panic!("{}: {}", shader.file_name(), e.emit_to_string(src)));
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
        .validate(&module)
        .unwrap_or_else(|e| panic!("{}: {}", shader.file_name(), e.emit_to_string(src)));
    (module, info)
}

/// Resource slots as wgpu-hal's Metal backend assigns them: buffers in binding order, then the
/// buffer of runtime array sizes.
fn resources(kernel: Kernel) -> msl::EntryPointResources {
    let n = kernel.storage_bindings();
    let mut map = msl::BindingMap::new();
    for binding in 0..=n {
        map.insert(
            naga::ResourceBinding { group: 0, binding },
            msl::BindTarget {
                buffer: Some(binding as u8),
                mutable: binding < n,
                ..Default::default()
            },
        );
    }
    msl::EntryPointResources {
        resources: map,
        immediates_buffer: None,
        sizes_buffer: Some(n as u8 + 1),
    }
}

#[test]
fn every_kernel_translates_to_msl() {
    let mut translated = 0;
    for shader in Shader::ALL {
        for (variant, src, caps) in variants(shader) {
            let (module, info) = parse_and_validate(shader, &src, caps);
            let kernels = shader.kernels();
            assert!(!kernels.is_empty(), "{} has no kernel", shader.file_name());
            for kernel in kernels {
                assert!(
                    module.entry_points.iter().any(|e| e.name == kernel.entry_point()),
                    "{} has no entry point {}",
                    shader.file_name(),
                    kernel.entry_point()
                );
                for wtype in kernel.specializations() {
                    let mut constants = naga::back::PipelineConstants::default();
                    if kernel.weight_specialized() {
                        constants.insert("WTYPE".to_string(), f64::from(wtype));
                    }
                    let ep = (naga::ShaderStage::Compute, kernel.entry_point());
                    let (module, info) = naga::back::pipeline_constants::process_overrides(
                        &module,
                        &info,
                        Some(ep),
                        &constants,
                    )
                    .unwrap_or_else(|e| panic!("{kernel:?} WTYPE {wtype}: {e:?}"));
                    for lang_version in [(2, 0), (2, 4), (3, 0)] {
                        let options = msl::Options {
                            lang_version,
                            fake_missing_bindings: false,
                            per_entry_point_map: msl::EntryPointResourceMap::from([(
                                kernel.entry_point().to_string(),
                                resources(kernel),
                            )]),
                            bounds_check_policies: naga::proc::BoundsCheckPolicies {
                                index: naga::proc::BoundsCheckPolicy::ReadZeroSkipWrite,
                                buffer: naga::proc::BoundsCheckPolicy::ReadZeroSkipWrite,
                                image_load: naga::proc::BoundsCheckPolicy::ReadZeroSkipWrite,
                                binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
                            },
                            ..Default::default()
                        };
                        let pipeline = msl::PipelineOptions {
                            entry_point: Some((
                                naga::ShaderStage::Compute,
                                kernel.entry_point().to_string(),
                            )),
                            ..Default::default()
                        };
                        let (msl_src, _) = msl::write_string(&module, &info, &options, &pipeline)
                        .unwrap_or_else(|e| {
                            panic!("{kernel:?} WTYPE {wtype} ({variant}) to MSL {lang_version:?}: {e:?}")
                        });
                        assert!(msl_src.contains("kernel void"), "{kernel:?}: no kernel function");
                        assert!(
                            msl_src.contains(kernel.entry_point()),
                            "{kernel:?}: no entry point"
                        );
                        translated += 1;
                    }
                }
            }
        }
    }
    eprintln!("translated {translated} kernel / weight type / variant / MSL version tuples");
    let pipelines: usize = Kernel::ALL.iter().map(|k| k.specializations().len()).sum();
    assert_eq!(translated, pipelines * 2 * 3);
    // MUL_MAT's two kernels for 15 weight types, GET_ROWS for those and I32, 10 other kernels
    // (CONCAT, SSM_CONV and GATED_DELTA_NET among them).
    assert_eq!(pipelines, 2 * 15 + 16 + 10);
}

#[test]
fn the_f16_variant_enables_f16_and_decodes_in_hardware() {
    for shader in Shader::ALL {
        let src = shader.source_f16();
        assert!(src.starts_with("enable f16;"), "{}", shader.file_name());
        assert!(src.contains("unpack2x16float"), "{}", shader.file_name());
        assert!(!shader.source().contains("enable f16"), "{}", shader.file_name());
        // Without the capability the f16 variant does not validate: it really is compiled
        // as an f16 module.
        let module = naga::front::wgsl::parse_str(&src).unwrap();
        let plain = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        )
        .validate(&module);
        assert!(plain.is_err(), "{} validates without SHADER_FLOAT16", shader.file_name());
    }
}

#[test]
fn msl_of_every_kernel_is_written_for_inspection() {
    // Also writes the MSL of each kernel next to the build output, for reading by hand.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("msl");
    std::fs::create_dir_all(&dir).unwrap();
    for shader in Shader::ALL {
        for (variant, src, caps) in variants(shader) {
            let (module, info) = parse_and_validate(shader, &src, caps);
            // The default weight type (F32) where the shader has the override.
            let (module, info) = naga::back::pipeline_constants::process_overrides(
                &module,
                &info,
                None,
                &Default::default(),
            )
            .unwrap_or_else(|e| panic!("{}: {e:?}", shader.file_name()));
            let (msl_src, _) =
                msl::write_string(&module, &info, &msl::Options::default(), &Default::default())
                    .unwrap_or_else(|e| panic!("{}: {e:?}", shader.file_name()));
            let suffix = if variant == "shader-f16" { "_f16.metal" } else { ".metal" };
            let name = shader.file_name().replace(".wgsl", suffix);
            std::fs::write(dir.join(name), msl_src).unwrap();
        }
    }
}
