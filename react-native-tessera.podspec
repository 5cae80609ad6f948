require "json"

package = JSON.parse(File.read(File.join(__dir__, "package.json")))

# The Rust library libtessera_ffi.a comes from one of two places:
# - prebuilt: ios/TesseraFFI.xcframework (device and simulator slices, with the C header and
#   module map), built by scripts/build-ios.sh on macOS before publishing; used when present;
# - built from source: the npm package ships the Rust workspace (Cargo.toml, Cargo.lock, rust/),
#   and a script phase of this pod (ios/build-rust.sh) runs cargo for the platform and
#   architectures Xcode builds; the app needs only rustup (https://rustup.rs).
xcframework = File.join(__dir__, "ios", "TesseraFFI.xcframework")
prebuilt = File.exist?(File.join(xcframework, "Info.plist"))
from_source = !prebuilt && File.exist?(File.join(__dir__, "Cargo.toml"))
unless prebuilt || from_source
  raise "react-native-tessera: neither ios/TesseraFFI.xcframework nor the Rust sources (Cargo.toml, rust/) are in #{__dir__}"
end

Pod::Spec.new do |s|
  s.name         = "react-native-tessera"
  # The Swift module: the module's Swift code and the uniffi bindings (ios/Generated) compile
  # into it; the bindings import the C module TesseraFFI.
  s.module_name  = "Tessera"
  s.version      = package["version"]
  s.summary      = package["description"]
  s.homepage     = package["repository"]["url"]
  s.license      = package["license"]
  s.authors      = "The Tessera authors"
  s.platforms    = { :ios => min_ios_version_supported }
  s.source       = { :git => package["repository"]["url"], :tag => "v#{s.version}" }

  s.source_files = "ios/*.{h,m,mm,swift}", "ios/Generated/*.swift"
  s.swift_version = "5.9"
  # wgpu's Metal backend, when the GPU device is built in.
  s.frameworks = "Foundation", "Metal", "QuartzCore"

  xcconfig = { "DEFINES_MODULE" => "YES" }
  if prebuilt
    # libtessera_ffi.a with the FFI header and module map, per platform.
    s.vendored_frameworks = "ios/TesseraFFI.xcframework"
  else
    rust_out = "$(PODS_CONFIGURATION_BUILD_DIR)/react-native-tessera-rust"
    s.preserve_paths = "ios/build-rust.sh", "ios/Generated/*.{h,modulemap}", "Cargo.toml", "Cargo.lock", "rust/**/*"
    s.script_phase = {
      :name => "Build the Rust library (tessera-ffi)",
      :script => 'bash "${PODS_TARGET_SRCROOT}/ios/build-rust.sh"',
      :execution_position => :before_compile,
      :always_out_of_date => "1",
    }
    # The C module TesseraFFI that the generated Swift imports.
    xcconfig["OTHER_SWIFT_FLAGS"] = '$(inherited) -Xcc -fmodule-map-file="${PODS_TARGET_SRCROOT}/ios/Generated/TesseraFFI.modulemap"'
    xcconfig["HEADER_SEARCH_PATHS"] = '$(inherited) "${PODS_TARGET_SRCROOT}/ios/Generated"'
    # The script writes outside the pod's declared outputs.
    xcconfig["ENABLE_USER_SCRIPT_SANDBOXING"] = "NO"
    link = {
      "LIBRARY_SEARCH_PATHS" => "$(inherited) \"#{rust_out}\"",
      "OTHER_LDFLAGS" => "$(inherited) -l\"tessera_ffi\"",
    }
    if ENV["USE_FRAMEWORKS"] == "dynamic"
      # A dynamic framework links the static library itself.
      xcconfig.merge!(link)
    else
      # A static library (or static framework) pod is linked into the app, which must link
      # libtessera_ffi.a too.
      s.user_target_xcconfig = link
    end
  end
  s.pod_target_xcconfig = xcconfig

  install_modules_dependencies(s)
end
