import Foundation

/// The work of the Tessera native module, in Swift: runs JSON requests of the native protocol
/// (docs/native-protocol.md) through the generated uniffi binding `callJson(request:)` on a
/// concurrent background queue, and forwards the Rust core's log records.
///
/// `Tessera.mm` registers the TurboModule and only converts between React Native's types and
/// these methods. Calls run concurrently so that a `cancel` request gets through while a
/// `compute` of the same session is running.
@objc(TesseraImpl)
public final class TesseraImpl: NSObject {
  private let queue = DispatchQueue(
    label: "com.tessera.call", qos: .userInitiated, attributes: .concurrent)
  private let lock = NSLock()
  private var forwarding = false
  private var invalidated = false

  /// Runs `request` off the calling thread and hands the JSON response to `resolve`; after
  /// `invalidate()`, calls `reject` with the code "Closed" instead.
  @objc public func call(
    _ request: String,
    resolve: @escaping (String) -> Void,
    reject: @escaping (String, String) -> Void
  ) {
    lock.lock()
    let closed = invalidated
    lock.unlock()
    if closed {
      reject("Closed", "the Tessera module was invalidated")
      return
    }
    queue.async {
      // The Rust side answers every request, errors included, with a JSON response and
      // catches its own panics.
      resolve(callJson(request: request))
    }
  }

  /// Starts or stops forwarding log records to `emit(level, target, message)`.
  @objc public func setLogForwarding(
    _ enabled: Bool, emit: @escaping (String, String, String) -> Void
  ) {
    lock.lock()
    defer { lock.unlock() }
    guard enabled != forwarding, !invalidated || !enabled else { return }
    setLogListener(listener: enabled ? LogForwarder(emit: emit) : nil)
    forwarding = enabled
  }

  /// Stops accepting calls and removes the log listener; running calls finish.
  @objc public func invalidate() {
    lock.lock()
    defer { lock.unlock() }
    invalidated = true
    if forwarding {
      setLogListener(listener: nil)
      forwarding = false
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
