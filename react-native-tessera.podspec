require "json"

package = JSON.parse(File.read(File.join(__dir__, "package.json")))

Pod::Spec.new do |s|
  s.name         = "react-native-tessera"
  # The Swift module: the module's Swift code and the uniffi bindings (ios/Generated) compile
  # into it; the bindings import the C module TesseraFFI from the XCFramework.
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

  # libtessera_ffi.a for device, simulator and Mac (Catalyst-free), with the FFI header and
  # module map; built by scripts/build-ios.sh.
  s.vendored_frameworks = "ios/TesseraFFI.xcframework"
  # wgpu's Metal backend, when the GPU device is built in.
  s.frameworks = "Foundation", "Metal", "QuartzCore"

  s.pod_target_xcconfig = {
    "DEFINES_MODULE" => "YES",
  }

  install_modules_dependencies(s)
end
