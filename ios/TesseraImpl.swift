import Foundation

/// The work of the Tessera native module, in Swift: runs JSON requests of the native protocol
/// (docs/native-protocol.md) through the generated uniffi binding `callJson(request:)` on a
/// concurrent background queue, and forwards the Rust core's log records and protocol events
/// (loading progress, generated tokens: `setEventEmitter`; the core's event listener is
/// installed on the first call and removed by `invalidate()` unless a newer instance, after a JS
/// reload, installed its own; the same as the Android module's TesseraBridge).
///
/// `Tessera.mm` registers the TurboModule and only converts between React Native's types and
/// these methods. Calls run concurrently so that a `cancel` request gets through while a
/// `compute` of the same session is running.
///
/// Before the first use of the generated bindings, `tesseraBindingsMismatch()` (generated with
/// them by scripts/bindgen.sh) compares the linked library with the bindings as uniffi's own
/// check would; on a mismatch, every call answers a `NativeLibrary` error and the generated
/// code, whose check ends in `fatalError`, is never reached.
@objc(TesseraImpl)
public final class TesseraImpl: NSObject {
  private let queue = DispatchQueue(
    label: "com.tessera.call", qos: .userInitiated, attributes: .concurrent)
  private let lock = NSLock()
  private var forwarding = false
  private var eventEmitter: ((String) -> Void)?
  /// The instance whose event listener is installed with the core (one per process).
  private static let events = EventListenerOwner()
  private var invalidated = false
  private var used = false

  /// nil when the library matches the bindings, else the `NativeLibrary` error's message.
  private static let libraryProblem: String? = {
    guard let mismatch = tesseraBindingsMismatch() else { return nil }
    return "react-native-tessera: libtessera_ffi.a (\(architecture)) does not match the "
      + "generated Swift bindings (\(mismatch)); the bindings and the library must come from "
      + "one build: rerun pod install and rebuild the app (the pod's Rust build phase), or "
      + "rebuild ios/TesseraFFI.xcframework with scripts/build-ios.sh"
  }()

  private static var architecture: String {
    #if arch(arm64)
      let arch = "arm64"
    #elseif arch(x86_64)
      let arch = "x86_64"
    #else
      let arch = "unknown architecture"
    #endif
    #if targetEnvironment(simulator)
      return "\(arch) simulator"
    #else
      return arch
    #endif
  }

  /// The protocol's error response.
  static func errorJson(kind: String, message: String) -> String {
    let body: [String: Any] = ["error": ["kind": kind, "message": message]]
    guard let data = try? JSONSerialization.data(withJSONObject: body),
      let text = String(data: data, encoding: .utf8)
    else {
      return "{\"error\":{\"kind\":\"Internal\",\"message\":\"could not encode an error\"}}"
    }
    return text
  }

  /// Runs `request` off the calling thread and hands the JSON response to `resolve`; after
  /// `invalidate()`, calls `reject` with the code "Closed" instead.
  @objc public func call(
    _ request: String,
    resolve: @escaping (String) -> Void,
    reject: @escaping (String, String) -> Void
  ) {
    lock.lock()
    let closed = invalidated
    if !closed { used = true }
    lock.unlock()
    if closed {
      reject("Closed", "the Tessera module was invalidated")
      return
    }
    queue.async {
      if let problem = TesseraImpl.libraryProblem {
        resolve(TesseraImpl.errorJson(kind: "NativeLibrary", message: problem))
        return
      }
      self.ensureEventListener()
      TesseraImpl.configureModelsDirectory()
      // The Rust side answers every request, errors included, with a JSON response and
      // catches its own panics.
      resolve(callJson(request: request))
    }
  }

  /// Tells the core, once per process, where `downloadModel` writes: Application Support/
  /// tessera/models (kept out of iCloud backups: models are downloaded again, not restored).
  private static let modelsDirectoryOnce: Void = {
    guard
      let support = FileManager.default.urls(
        for: .applicationSupportDirectory, in: .userDomainMask
      ).first
    else { return }
    var dir = support.appendingPathComponent("tessera/models", isDirectory: true)
    try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    var values = URLResourceValues()
    values.isExcludedFromBackup = true
    try? dir.setResourceValues(values)
    let body: [String: Any] = ["method": "setModelsDirectory", "params": ["path": dir.path]]
    if let data = try? JSONSerialization.data(withJSONObject: body),
      let text = String(data: data, encoding: .utf8)
    {
      _ = callJson(request: text)
    }
  }()

  private static func configureModelsDirectory() {
    _ = modelsDirectoryOnce
  }

  /// Where protocol events go (their JSON text, on the thread of the call producing them);
  /// `Tessera.mm` sends them to JavaScript as `TesseraEvent` events.
  @objc public func setEventEmitter(_ emit: @escaping (String) -> Void) {
    lock.lock()
    eventEmitter = emit
    lock.unlock()
  }

  private func ensureEventListener() {
    lock.lock()
    let emit = eventEmitter
    let closed = invalidated
    lock.unlock()
    guard let emit = emit, !closed else { return }
    TesseraImpl.events.install(for: self) { EventForwarder(emit: emit) }
  }

  /// Starts or stops forwarding log records to `emit(level, target, message)`.
  @objc public func setLogForwarding(
    _ enabled: Bool, emit: @escaping (String, String, String) -> Void
  ) {
    lock.lock()
    defer { lock.unlock() }
    guard enabled != forwarding, !invalidated || !enabled else { return }
    if let problem = TesseraImpl.libraryProblem {
      emit("error", "tessera.bridge", problem)
      return
    }
    setLogListener(listener: enabled ? LogForwarder(emit: emit) : nil)
    forwarding = enabled
  }

  /// Stops accepting calls, removes the log listener and closes every native session (a JS
  /// reload must not keep the previous instance's memory): computes in flight are cancelled,
  /// and the sessions are closed on the call queue once the calls already queued have run.
  @objc public func invalidate() {
    lock.lock()
    invalidated = true
    let wasUsed = used
    if forwarding {
      setLogListener(listener: nil)
      forwarding = false
    }
    lock.unlock()
    guard wasUsed, TesseraImpl.libraryProblem == nil else { return }
    TesseraImpl.events.remove(for: self)
    _ = closeAllSessions()
    // Once more after every call queued before invalidate, in case one opened a session.
    queue.async(flags: .barrier) {
      _ = closeAllSessions()
    }
  }
}

/// Receives the core's log records (on the thread that logs) and passes them on. The generated
/// `LogListener` protocol is `Sendable`; `emit` only hands the record to React Native's event
/// emitter, which may be called from any thread.
private final class LogForwarder: LogListener, @unchecked Sendable {
  private let emit: (String, String, String) -> Void

  init(emit: @escaping (String, String, String) -> Void) {
    self.emit = emit
  }

  func onLog(level: LogLevel, target: String, message: String) {
    emit(String(describing: level).lowercased(), target, message)
  }
}

/// Receives the core's protocol events and passes their JSON text on.
private final class EventForwarder: EventListener, @unchecked Sendable {
  private let emit: (String) -> Void

  init(emit: @escaping (String) -> Void) {
    self.emit = emit
  }

  func onEvent(eventJson: String) {
    emit(eventJson)
  }
}

/// Which module instance's event listener the core holds: installed by an instance's first
/// call, removed only by that instance.
private final class EventListenerOwner: @unchecked Sendable {
  private let lock = NSLock()
  private weak var owner: TesseraImpl?

  func install(for impl: TesseraImpl, _ make: () -> EventListener) {
    lock.lock()
    defer { lock.unlock() }
    if owner === impl { return }
    setEventListener(listener: make())
    owner = impl
  }

  func remove(for impl: TesseraImpl) {
    lock.lock()
    defer { lock.unlock() }
    guard owner === impl else { return }
    setEventListener(listener: nil)
    owner = nil
  }
}
