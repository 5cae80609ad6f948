package com.tessera.reactnative

import java.util.concurrent.CountDownLatch
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
 *   A native failure still resolves, with the protocol's error response, so that JavaScript
 *   has one path for errors: a native library that is missing, cannot be loaded or does not
 *   match the generated bindings (uniffi's checksum check) is `{"error": {"kind":
 *   "NativeLibrary", ...}}` naming the library and the ABI, remembered and answered to every
 *   later call; any other exception is `Internal`. `reject` is used only once the bridge is
 *   shut down.
 * - [setLogForwarding] installs or removes the log sink through which the Rust core's records
 *   reach `emit` (the module sends them to JavaScript as `TesseraLog` events).
 * - Protocol events (model loading progress, generated tokens, tagged with their request's
 *   `requestId`) reach `emitEvent` (the module sends them as `TesseraEvent` events): the event
 *   sink is installed with the core on the first call, and removed by [shutdown] unless a newer
 *   bridge (the next JS instance) has installed its own since.
 * - [shutdown] (the module's `invalidate`: a JS reload) stops accepting calls and releases every
 *   native session through `closeAll`, so native memory does not outlive the JS instance.
 *
 * @param native the generated binding's `callJson(request): String`
 * @param installLogSink installs a sink `(level, target, message)` with the core, or removes it
 *   when given `null`
 * @param executor where calls run; a cached pool of daemon threads by default
 * @param closeAll closes every native session (the generated `closeAllSessions()`); called by
 *   [shutdown] when the native library was used
 * @param abi the ABI the process runs (Android: `Build.SUPPORTED_ABIS[0]`), for error messages
 * @param installEventSink installs a sink of protocol events (their JSON text) with the core (the
 *   generated `setEventListener`), or removes it when given `null`
 * @param emitEvent receives each protocol event, on the thread of the call that produced it
 * @param modelsDirectory the folder `downloadModel` writes to (the module: the app's
 *   `files/tessera/models`), told to the core once, before the first request that reaches it;
 *   `null` for none
 * @param openContent opens a `content://` URI through the content resolver (the module's
 *   [ContentSource]s); `null` where there are none. A `loadModel` of such a URI then reads the
 *   document in place (`/proc/self/fd/N` of a regular file) or, when the provider gives a pipe,
 *   copies it into [contentCopies] first, with `copyProgress` events (`cancelLoad` stops it)
 * @param contentCopies the folder of those copies (the module: `files/tessera/imports`)
 */
/**
 * A `content://` document opened through the content resolver ([TesseraBridge]'s
 * `openContent`); closed once the load that opened it has ended.
 */
interface ContentSource : java.io.Closeable {
  /** A path the core can open to read it in place (`/proc/self/fd/N` of a regular file), or null. */
  val inPlacePath: String?

  /** Its size in bytes, or -1 when the provider does not say. */
  val size: Long

  /** Its display name (for the name of a copy). */
  val displayName: String

  /** Its bytes from the start (for a copy). */
  fun openStream(): java.io.InputStream
}

class TesseraBridge(
  private val native: (String) -> String,
  private val installLogSink: ((((String, String, String) -> Unit)?) -> Unit) = {},
  private val executor: ExecutorService = defaultExecutor(),
  private val closeAll: () -> Unit = {},
  private val abi: () -> String = { System.getProperty("os.arch") ?: "unknown" },
  private val installEventSink: (((String) -> Unit)?) -> Unit = {},
  private val emitEvent: (String) -> Unit = {},
  private val modelsDirectory: () -> String? = { null },
  private val openContent: ((String) -> ContentSource)? = null,
  private val contentCopies: () -> java.io.File? = { null },
) {
  /** Copies of content documents in progress, by requestId: set to true by `cancelLoad`. */
  private val copying = java.util.concurrent.ConcurrentHashMap<String, java.util.concurrent.atomic.AtomicBoolean>()
  @Volatile private var configured = false
  @Volatile private var logging = false
  @Volatile private var shutDown = false
  @Volatile private var nativeUsed = false
  @Volatile private var libraryFailure: String? = null
  private val lock = Any()
  private val finished = CountDownLatch(1)

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
  fun callNow(request: String): String {
    libraryFailure?.let { return errorJson(NATIVE_LIBRARY, it) }
    return try {
      ensureEventSink()
      configure()
      if (openContent != null && request.startsWith(LOAD_CONTENT)) return loadContent(request, openContent)
      if (request.startsWith(CANCEL_LOAD)) stringField(request, "requestId")?.let { copying[it]?.set(true) }
      native(request).also { nativeUsed = true }
    } catch (e: Throwable) {
      if (e is InterruptedException) Thread.currentThread().interrupt()
      val library = libraryProblem(e)
      if (library != null) {
        // The first failure says why; later ones only say the class could not be initialized.
        synchronized(lock) { if (libraryFailure == null) libraryFailure = library }
        errorJson(NATIVE_LIBRARY, libraryFailure ?: library)
      } else {
        errorJson("Internal", "native call failed: ${describe(e)}")
      }
    }
  }

  /** Installs the event sink once (the core keeps one process-wide listener). */
  private fun ensureEventSink() {
    if (eventOwner === this) return
    synchronized(EVENT_LOCK) {
      if (shutDown || eventOwner === this) return
      installEventSink(emitEvent)
      eventOwner = this
    }
  }

  /**
   * A `loadModel` of a `content://` URI: the core loads the document in place when the provider
   * gives a regular file, else a copy in [contentCopies] (reused while its size matches).
   */
  private fun loadContent(request: String, open: (String) -> ContentSource): String {
    val uri = stringField(request, "path") ?: return errorJson("InvalidArgument", "loadModel: a malformed path")
    val requestId = stringField(request, "requestId")
    val source =
      try {
        open(uri)
      } catch (e: Exception) {
        return errorJson("InvalidModel", "$uri: the content resolver cannot open it (${describe(e)})")
      }
    return source.use {
      val path = it.inPlacePath ?: copyOf(uri, it, requestId) ?: return@use errorJson("Cancelled", "loadModel: $uri: cancelled while copying it")
      native(withPath(request, path)).also { nativeUsed = true }
    }
  }

  /** Copies `source` into [contentCopies]; `null` when `cancelLoad` stopped it. */
  private fun copyOf(uri: String, source: ContentSource, requestId: String?): String? {
    val dir = contentCopies() ?: throw java.io.IOException("no folder for copies of content documents")
    dir.mkdirs()
    val digest = java.security.MessageDigest.getInstance("SHA-256").digest(uri.toByteArray()).take(8).joinToString("") { "%02x".format(it) }
    val safe = source.displayName.replace(Regex("[^A-Za-z0-9._-]"), "_").take(100)
    val copy = java.io.File(dir, "$digest-$safe")
    if (source.size >= 0 && copy.length() == source.size) return copy.absolutePath
    val cancelled = java.util.concurrent.atomic.AtomicBoolean(false)
    requestId?.let { copying[it] = cancelled }
    val part = java.io.File(dir, "${copy.name}.part")
    try {
      var received = 0L
      var reported = -1L
      val step = if (source.size > 0) maxOf(source.size / 100, 1L) else 4L shl 20
      source.openStream().use { input ->
        java.io.FileOutputStream(part).use { out ->
          val buffer = ByteArray(256 * 1024)
          while (true) {
            if (cancelled.get()) return null
            val n = input.read(buffer)
            if (n < 0) break
            out.write(buffer, 0, n)
            received += n
            if (requestId != null && (reported < 0 || received - reported >= step)) {
              reported = received
              emitEvent(copyEvent(requestId, received, source.size))
            }
          }
        }
      }
      if (requestId != null && reported != received) emitEvent(copyEvent(requestId, received, source.size))
      if (!part.renameTo(copy)) throw java.io.IOException("cannot rename $part to $copy")
      return copy.absolutePath
    } finally {
      requestId?.let { copying.remove(it) }
      part.delete()
    }
  }

  private fun copyEvent(requestId: String, received: Long, total: Long): String =
    "{\"type\":\"copyProgress\",\"requestId\":${jsonString(requestId)},\"received\":$received," +
      "\"total\":${if (total >= 0) total.toString() else "null"}}"

  /**
   * Tells the core the models folder once (`setModelsDirectory`). A failure is logged by the
   * core's answer and not retried: `downloadModel` then says that no folder is set.
   */
  private fun configure() {
    if (configured) return
    synchronized(lock) {
      if (configured) return
      configured = true
      val dir = modelsDirectory() ?: return
      native("{\"method\":\"setModelsDirectory\",\"params\":{\"path\":${jsonString(dir)}}}")
    }
  }

  /** Whether this bridge's event sink is the one installed. */
  val isForwardingEvents: Boolean
    get() = eventOwner === this

  /** The message of a native-library failure, or null when `e` is something else. */
  private fun libraryProblem(e: Throwable): String? {
    val chain = generateSequence(e) { it.cause }.take(8).toList()
    val where = "$LIBRARY_FILE for ABI ${abi()}"
    chain.firstOrNull { (it.message ?: "").contains("checksum mismatch", ignoreCase = true) }?.let {
      return "react-native-tessera: $where does not match the generated Kotlin bindings " +
        "(${it.message}); the bindings and the library must come from one build: rebuild the " +
        "app (the Gradle task buildTesseraRust) or rerun scripts/build-android.sh"
    }
    chain.firstOrNull { (it.message ?: "").contains("contract version mismatch", ignoreCase = true) }?.let {
      return "react-native-tessera: $where was built with another uniffi version than the " +
        "Kotlin bindings (${it.message}); rebuild the library and the bindings together"
    }
    chain.firstOrNull { it is UnsatisfiedLinkError }?.let {
      val message = it.message ?: "no message"
      val unbound = message.contains("Error looking up function") || message.contains("undefined symbol")
      if (unbound || !message.contains("tessera_ffi")) {
        // The library loaded, but JNA found no symbol or class it binds by name: a library of
        // another build, or names changed by a minifier.
        return "react-native-tessera: could not bind to $where ($message): the library lacks a " +
          "function of the generated Kotlin bindings (they must come from one build), or JNA and " +
          "the bindings were renamed by a minified release build without the keep rules of the " +
          "package's android/consumer-rules.pro"
      }
      return "react-native-tessera: could not load $where ($message); the app " +
        "was built without it or with another ABI: build from source (Rust and the NDK, the " +
        "Gradle task buildTesseraRust) or ship prebuilt android/src/main/jniLibs/${abi()}/$LIBRARY_FILE"
    }
    if (chain.any { it is NoClassDefFoundError && (it.message ?: "").contains("com.tessera.") }) {
      return "react-native-tessera: $where could not be initialized (${describe(e)})"
    }
    return null
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

  /**
   * Stops accepting calls, removes the log sink, and closes every native session: at once
   * (computes in flight are cancelled, so this returns soon), and once more when the calls still
   * running have finished, in case one of them opened a session meanwhile. Does not load the
   * native library if no call used it.
   */
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
    synchronized(EVENT_LOCK) {
      if (eventOwner === this) {
        try {
          installEventSink(null)
        } catch (_: Throwable) {
        }
        eventOwner = null
      }
    }
    executor.shutdown()
    if (!nativeUsed) return
    closeAllQuietly()
    val finisher =
      Thread({
        try {
          executor.awaitTermination(60, TimeUnit.SECONDS)
        } catch (_: InterruptedException) {
        }
        closeAllQuietly()
        finished.countDown()
      }, "tessera-shutdown")
    finisher.isDaemon = true
    finisher.start()
  }

  /** Waits until [shutdown] has closed the sessions of the calls that were still running. */
  fun awaitShutdown(timeout: Long, unit: TimeUnit): Boolean = !nativeUsed || finished.await(timeout, unit)

  private fun closeAllQuietly() {
    try {
      closeAll()
    } catch (_: Throwable) {
    }
  }

  companion object {
    private val EVENT_LOCK = Any()

    /** The bridge whose event sink is installed (one per process, as the core's listener). */
    @Volatile private var eventOwner: TesseraBridge? = null

    /** How the JavaScript client writes a `loadModel` of a content URI (JSON.stringify keeps key order). */
    private const val LOAD_CONTENT = "{\"method\":\"loadModel\",\"path\":\"content://"

    /** How it writes `cancelLoad`. */
    private const val CANCEL_LOAD = "{\"method\":\"cancelLoad\""

    /** The string value of the top-level `field` of a request (unescaped), or null. */
    fun stringField(request: String, field: String): String? {
      val m = Regex("\"" + Regex.escape(field) + "\":\"((?:[^\"\\\\]|\\\\.)*)\"").find(request) ?: return null
      return m.groupValues[1].replace(Regex("\\\\(u[0-9a-fA-F]{4}|.)")) { e ->
        val c = e.groupValues[1]
        when {
          c.length == 5 -> c.substring(1).toInt(16).toChar().toString()
          c == "n" -> "\n"
          c == "t" -> "\t"
          c == "r" -> "\r"
          c == "b" -> "\b"
          c == "f" -> "\u000C"
          else -> c
        }
      }
    }

    /** `request` with its `path` replaced by `path`. */
    fun withPath(request: String, path: String): String {
      val m = Regex("\"path\":\"((?:[^\"\\\\]|\\\\.)*)\"").find(request) ?: return request
      return request.replaceRange(m.range, "\"path\":" + jsonString(path))
    }

    /** The code of rejections after [shutdown]. */
    const val CLOSED = "Closed"

    /** The error kind of a missing, unloadable or mismatched native library. */
    const val NATIVE_LIBRARY = "NativeLibrary"

    /** The file of the Rust core on Android. */
    const val LIBRARY_FILE = "libtessera_ffi.so"

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
