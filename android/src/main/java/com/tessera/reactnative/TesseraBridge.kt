package com.tessera.reactnative

import java.util.concurrent.ExecutorService
import java.util.concurrent.RejectedExecutionException
import java.util.concurrent.SynchronousQueue
import java.util.concurrent.ThreadFactory
import java.util.concurrent.ThreadPoolExecutor
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger

/**
 * The logic of the Tessera native module, free of Android and React Native types so that it
 * runs (and is tested) on a plain JVM.
 *
 * - [call] runs one JSON request of the native protocol (docs/native-protocol.md) on a
 *   background thread and hands the JSON response to `resolve`. Calls run concurrently: a
 *   `cancel` request must get through while a `compute` of the same session is running.
 *   A native failure (a missing library, an unexpected exception) still resolves, with the
 *   protocol's error response `{"error": {"kind": "Internal", ...}}`, so that JavaScript has
 *   one path for errors. `reject` is used only once the bridge is shut down.
 * - [setLogForwarding] installs or removes the log sink through which the Rust core's records
 *   reach `emit` (the module sends them to JavaScript as `TesseraLog` events).
 *
 * @param native the generated binding's `callJson(request): String`
 * @param installLogSink installs a sink `(level, target, message)` with the core, or removes it
 *   when given `null`
 * @param executor where calls run; a cached pool of daemon threads by default
 */
class TesseraBridge(
  private val native: (String) -> String,
  private val installLogSink: ((((String, String, String) -> Unit)?) -> Unit) = {},
  private val executor: ExecutorService = defaultExecutor(),
) {
  @Volatile private var logging = false
  @Volatile private var shutDown = false
  private val lock = Any()

  /**
   * Runs `request` off the calling thread.
   *
   * @param resolve receives the JSON response
   * @param reject receives an error code and message when the bridge no longer accepts calls
   */
  fun call(request: String, resolve: (String) -> Unit, reject: (String, String) -> Unit) {
    if (shutDown) {
      reject(CLOSED, "the Tessera module was invalidated")
      return
    }
    try {
      executor.execute { resolve(callNow(request)) }
    } catch (e: RejectedExecutionException) {
      reject(CLOSED, "the Tessera module was invalidated")
    }
  }

  /** Runs `request` on the calling thread; never throws. */
  fun callNow(request: String): String =
    try {
      native(request)
    } catch (e: Throwable) {
      if (e is InterruptedException) Thread.currentThread().interrupt()
      errorJson("Internal", "native call failed: ${describe(e)}")
    }

  /**
   * Starts or stops forwarding the core's log records to `emit(level, target, message)`.
   * Enabling twice keeps one sink; errors of the native side are reported through `emit`
   * as an "error" record rather than thrown.
   */
  fun setLogForwarding(enabled: Boolean, emit: (String, String, String) -> Unit) {
    synchronized(lock) {
      if (enabled == logging) return
      try {
        installLogSink(if (enabled) emit else null)
        logging = enabled
      } catch (e: Throwable) {
        emit("error", "tessera.bridge", "could not ${if (enabled) "install" else "remove"} the log listener: ${describe(e)}")
      }
    }
  }

  /** Whether log records are being forwarded. */
  val isLogForwarding: Boolean
    get() = logging

  /** Stops accepting calls, removes the log sink and lets running calls finish. */
  fun shutdown() {
    shutDown = true
    synchronized(lock) {
      if (logging) {
        try {
          installLogSink(null)
        } catch (_: Throwable) {
        }
        logging = false
      }
    }
    executor.shutdown()
  }

  companion object {
    /** The code of rejections after [shutdown]. */
    const val CLOSED = "Closed"

    /** A cached pool of daemon threads named `tessera-call-N`. */
    fun defaultExecutor(): ExecutorService {
      val count = AtomicInteger()
      val factory = ThreadFactory { r ->
        Thread(r, "tessera-call-${count.incrementAndGet()}").apply { isDaemon = true }
      }
      return ThreadPoolExecutor(0, Int.MAX_VALUE, 30L, TimeUnit.SECONDS, SynchronousQueue(), factory)
    }

    /** The protocol's error response. */
    fun errorJson(kind: String, message: String): String =
      "{\"error\":{\"kind\":${jsonString(kind)},\"message\":${jsonString(message)}}}"

    /** `s` as a JSON string literal. */
    fun jsonString(s: String): String {
      val out = StringBuilder(s.length + 2)
      out.append('"')
      for (c in s) {
        when (c) {
          '"' -> out.append("\\\"")
          '\\' -> out.append("\\\\")
          '\n' -> out.append("\\n")
          '\r' -> out.append("\\r")
          '\t' -> out.append("\\t")
          '\b' -> out.append("\\b")
          '\u000C' -> out.append("\\f")
          else ->
            if (c < ' ' || c == '\u2028' || c == '\u2029') {
              out.append(String.format(java.util.Locale.ROOT, "\\u%04x", c.code))
            } else {
              out.append(c)
            }
        }
      }
      out.append('"')
      return out.toString()
    }

    private fun describe(e: Throwable): String = "${e.javaClass.simpleName}: ${e.message ?: "no message"}"
  }
}
