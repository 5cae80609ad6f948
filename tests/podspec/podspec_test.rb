# Evaluates react-native-tessera.podspec the way `pod install` does (Ruby, with `__dir__` the
# package folder), under a stand-in of CocoaPods' Pod::Spec DSL that records every attribute,
# in three packages laid out in temporary folders:
#   - with the prebuilt ios/TesseraFFI.xcframework: vendored, no script phase;
#   - with only the Rust sources: the script phase runs ios/build-rust.sh, the Swift compiler
#     gets the TesseraFFI module map, the app links libtessera_ffi.a from the phase's output
#     (the pod itself when USE_FRAMEWORKS=dynamic);
#   - with neither: evaluating the podspec fails, naming both.
# Prints "N passed, M failed". Run: ruby tests/podspec/podspec_test.rb
require "fileutils"
require "json"
require "tmpdir"

module Pod
  class Spec
    attr_reader :attributes

    def initialize
      @attributes = {}
      yield self if block_given?
    end

    def method_missing(name, *args)
      key = name.to_s
      return @attributes[key] if args.empty? && @attributes.key?(key)
      return super unless key.end_with?("=")
      @attributes[key.chomp("=")] = args.length == 1 ? args[0] : args
    end

    def respond_to_missing?(name, include_private = false)
      name.to_s.end_with?("=") || @attributes.key?(name.to_s) || super
    end
  end
end

# React Native's helpers that podspecs of native modules call.
def min_ios_version_supported
  "15.1"
end

def install_modules_dependencies(spec)
  spec.attributes["install_modules_dependencies"] = true
end

ROOT = File.expand_path("../..", __dir__)
$passed = 0
$failed = 0

def test(name)
  yield
  $passed += 1
  puts "ok   #{name}"
rescue StandardError, ScriptError => e
  $failed += 1
  puts "FAIL #{name}: #{e.class}: #{e.message}"
end

def check(condition, message)
  raise message unless condition
end

# A package folder with the podspec, package.json and the given extra files.
def package_with(files)
  dir = Dir.mktmpdir("tessera-podspec")
  FileUtils.cp(File.join(ROOT, "react-native-tessera.podspec"), dir)
  FileUtils.cp(File.join(ROOT, "package.json"), dir)
  files.each do |f|
    path = File.join(dir, f)
    FileUtils.mkdir_p(File.dirname(path))
    File.write(path, "")
  end
  dir
end

def evaluate(dir, env = {})
  saved = env.keys.to_h { |k| [k, ENV[k]] }
  env.each { |k, v| ENV[k] = v }
  spec = eval(File.read(File.join(dir, "react-native-tessera.podspec")), binding, File.join(dir, "react-native-tessera.podspec"))
  spec.attributes
ensure
  saved&.each { |k, v| ENV[k] = v }
end

version = JSON.parse(File.read(File.join(ROOT, "package.json")))["version"]

test "prebuilt XCFramework: vendored, no script phase" do
  a = evaluate(package_with(["ios/TesseraFFI.xcframework/Info.plist", "Cargo.toml"]))
  check(a["vendored_frameworks"] == "ios/TesseraFFI.xcframework", "vendored_frameworks #{a['vendored_frameworks'].inspect}")
  check(a["script_phase"].nil?, "script phase #{a['script_phase'].inspect}")
  check(a["version"] == version && a["module_name"] == "Tessera", "version/module #{a['version']} #{a['module_name']}")
  check(a["source_files"] == ["ios/*.{h,m,mm,swift}", "ios/Generated/*.swift"], "source_files #{a['source_files'].inspect}")
  check(a["install_modules_dependencies"], "install_modules_dependencies not called")
end

test "sources only: a script phase builds the library, the app links it" do
  a = evaluate(package_with(["Cargo.toml", "rust/ffi/Cargo.toml"]))
  check(a["vendored_frameworks"].nil?, "vendored #{a['vendored_frameworks'].inspect}")
  phase = a["script_phase"]
  check(phase[:script] == 'bash "${PODS_TARGET_SRCROOT}/ios/build-rust.sh"', "script #{phase[:script].inspect}")
  check(phase[:execution_position] == :before_compile, "position #{phase[:execution_position].inspect}")
  x = a["pod_target_xcconfig"]
  check(x["OTHER_SWIFT_FLAGS"].include?('-fmodule-map-file="${PODS_TARGET_SRCROOT}/ios/Generated/TesseraFFI.modulemap"'), "swift flags #{x['OTHER_SWIFT_FLAGS']}")
  u = a["user_target_xcconfig"]
  check(u["OTHER_LDFLAGS"].include?('-l"tessera_ffi"'), "ldflags #{u.inspect}")
  check(u["LIBRARY_SEARCH_PATHS"].include?("$(PODS_CONFIGURATION_BUILD_DIR)/react-native-tessera-rust"), "search paths #{u.inspect}")
  check(!x.key?("OTHER_LDFLAGS"), "the static pod links too: #{x.inspect}")
  check(File.exist?(File.join(ROOT, "ios/build-rust.sh")), "ios/build-rust.sh is missing")
end

test "sources with USE_FRAMEWORKS=dynamic: the framework links the library, not the app" do
  a = evaluate(package_with(["Cargo.toml"]), "USE_FRAMEWORKS" => "dynamic")
  check(a["pod_target_xcconfig"]["OTHER_LDFLAGS"].include?('-l"tessera_ffi"'), "pod ldflags #{a['pod_target_xcconfig'].inspect}")
  check(a["user_target_xcconfig"].nil?, "app links too: #{a['user_target_xcconfig'].inspect}")
end

test "neither: pod install fails, naming both" do
  begin
    evaluate(package_with([]))
    raise "evaluated without a native library"
  rescue RuntimeError => e
    raise e if e.message == "evaluated without a native library"
    check(e.message.include?("neither ios/TesseraFFI.xcframework nor the Rust sources"), e.message)
  end
end

puts "#{$passed} passed, #{$failed} failed"
exit($failed.zero? ? 0 : 1)
