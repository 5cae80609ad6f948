// JVM tests of com.tessera.reactnative.TesseraBridge with a fake native function.
// Run with scripts/kotlin-bridge-test.sh (kotlinc, no Android, no Gradle).

import com.tessera.reactnative.ContentSource
import com.tessera.reactnative.TesseraBridge
import java.util.concurrent.CountDownLatch
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicReference

private var passed = 0
private var failed = 0

private fun test(name: String, body: () -> Unit) {
  try {
    body()
    passed++
    println("ok   $name")
  } catch (e: Throwable) {
    failed++
    println("FAIL $name: ${e.javaClass.simpleName}: ${e.message}")
  }
}

private fun check(condition: Boolean, message: () -> String) {
  if (!condition) throw AssertionError(message())
}

private fun <T> eq(actual: T, expected: T) = check(actual == expected) { "expected <$expected>, got <$actual>" }

/** Calls the bridge and waits for resolve or reject. */
private fun callAndWait(bridge: TesseraBridge, request: String): Pair<String?, String?> {
  val latch = CountDownLatch(1)
  val resolved = AtomicReference<String?>()
  val rejected = AtomicReference<String?>()
  bridge.call(request, { resolved.set(it); latch.countDown() }, { code, message -> rejected.set("$code: $message"); latch.countDown() })
  check(latch.await(5, TimeUnit.SECONDS)) { "no answer within 5 s" }
  return resolved.get() to rejected.get()
}

/** A content document for the tests: in place at `path`, or a stream of `bytes`. */
private class FakeContent(
  override val inPlacePath: String?,
  private val bytes: ByteArray = ByteArray(0),
  override val size: Long = -1,
  private val stream: (() -> java.io.InputStream)? = null,
) : ContentSource {
  @Volatile var closed = false
  override val displayName = "My Model (1).gguf"
  override fun openStream(): java.io.InputStream = stream?.invoke() ?: java.io.ByteArrayInputStream(bytes)
  override fun close() {
    closed = true
  }
}

fun main() {
  test("resolves with the native response") {
    val bridge = TesseraBridge(native = { req -> "{\"ok\":$req}" })
    eq(callAndWait(bridge, "{\"method\":\"devices\"}"), "{\"ok\":{\"method\":\"devices\"}}" to null)
    bridge.shutdown()
  }

  test("runs off the calling thread, on a tessera-call thread") {
    val seen = AtomicReference<String>()
    val bridge = TesseraBridge(native = { seen.set(Thread.currentThread().name); "{\"ok\":{}}" })
    callAndWait(bridge, "{}")
    check(seen.get() != Thread.currentThread().name) { "ran on the caller's thread" }
    check(seen.get().startsWith("tessera-call-")) { "thread ${seen.get()}" }
    bridge.shutdown()
  }

  test("a blocked call does not hold up the next one (cancel during compute)") {
    val release = CountDownLatch(1)
    val bridge =
      TesseraBridge(
        native = { req ->
          if (req.contains("compute")) {
            release.await(5, TimeUnit.SECONDS)
            "{\"error\":{\"kind\":\"Cancelled\",\"message\":\"computation cancelled\"}}"
          } else {
            release.countDown()
            "{\"ok\":{\"cancelled\":true}}"
          }
        }
      )
    val computeDone = CountDownLatch(1)
    val computeResult = AtomicReference<String>()
    bridge.call("{\"method\":\"compute\"}", { computeResult.set(it); computeDone.countDown() }, { _, _ -> })
    eq(callAndWait(bridge, "{\"method\":\"cancel\"}").first, "{\"ok\":{\"cancelled\":true}}")
    check(computeDone.await(5, TimeUnit.SECONDS)) { "compute never finished" }
    check(computeResult.get().contains("Cancelled")) { computeResult.get() }
    bridge.shutdown()
  }

  test("a native exception resolves with an Internal error response") {
    val bridge = TesseraBridge(native = { throw IllegalArgumentException("bad \"input\"\n") })
    val (resolved, rejected) = callAndWait(bridge, "{}")
    eq(rejected, null)
    eq(
      resolved,
      "{\"error\":{\"kind\":\"Internal\",\"message\":\"native call failed: IllegalArgumentException: bad \\\"input\\\"\\n\"}}",
    )
  }

  test("errorJson escapes every control character") {
    eq(TesseraBridge.jsonString("a\"b\\c\u0001\t\u2028"), "\"a\\\"b\\\\c\\u0001\\t\\u2028\"")
    eq(TesseraBridge.errorJson("Closed", "x"), "{\"error\":{\"kind\":\"Closed\",\"message\":\"x\"}}")
  }

  test("after shutdown, calls are rejected with Closed") {
    val bridge = TesseraBridge(native = { "{\"ok\":{}}" })
    bridge.shutdown()
    eq(callAndWait(bridge, "{}"), null to "Closed: the Tessera module was invalidated")
  }

  test("many concurrent calls all resolve, each with its own response") {
    val bridge = TesseraBridge(native = { req -> Thread.sleep(2); "{\"ok\":$req}" })
    val n = 64
    val latch = CountDownLatch(n)
    val results = CopyOnWriteArrayList<String>()
    for (i in 0 until n) bridge.call("$i", { results.add(it); latch.countDown() }, { _, _ -> latch.countDown() })
    check(latch.await(10, TimeUnit.SECONDS)) { "only ${results.size} of $n answered" }
    eq(results.map { it.removePrefix("{\"ok\":").removeSuffix("}").toInt() }.sorted(), (0 until n).toList())
    bridge.shutdown()
  }

  test("log forwarding installs one sink, forwards records, and removes it") {
    var sink: ((String, String, String) -> Unit)? = null
    var installs = 0
    val bridge = TesseraBridge(native = { "" }, installLogSink = { s -> sink = s; installs++ })
    val events = mutableListOf<String>()
    val emit: (String, String, String) -> Unit = { level, target, message -> events.add("$level $target $message") }
    bridge.setLogForwarding(true, emit)
    bridge.setLogForwarding(true, emit)
    eq(installs, 1)
    check(bridge.isLogForwarding) { "not forwarding" }
    sink!!("info", "tessera_cpu", "hello")
    eq(events, listOf("info tessera_cpu hello"))
    bridge.setLogForwarding(false, emit)
    eq(sink, null)
    eq(installs, 2)
    check(!bridge.isLogForwarding) { "still forwarding" }
    bridge.setLogForwarding(true, emit)
    bridge.shutdown()
    eq(sink, null)
  }

  test("a failing log sink installation is reported as an error record, not thrown") {
    val bridge = TesseraBridge(native = { "" }, installLogSink = { throw IllegalStateException("no logger") })
    val events = mutableListOf<String>()
    bridge.setLogForwarding(true) { level, _, message -> events.add("$level: $message"); Unit }
    eq(events, listOf("error: could not install the log listener: IllegalStateException: no logger"))
    check(!bridge.isLogForwarding) { "claims to forward" }
    bridge.shutdown()
  }

  test("a missing native library resolves with NativeLibrary naming the library and the ABI, for every call") {
    var calls = 0
    val bridge =
      TesseraBridge(
        native = {
          calls++
          if (calls == 1) throw UnsatisfiedLinkError("Unable to load library 'tessera_ffi': libtessera_ffi.so: cannot open shared object file")
          // What the JVM throws for a class whose initializer failed once.
          throw NoClassDefFoundError("Could not initialize class com.tessera.UniffiLib")
        },
        abi = { "arm64-v8a" },
      )
    val (first, _) = callAndWait(bridge, "{\"method\":\"devices\"}")
    val expected =
      "{\"error\":{\"kind\":\"NativeLibrary\",\"message\":\"react-native-tessera: could not load libtessera_ffi.so for ABI arm64-v8a " +
        "(Unable to load library 'tessera_ffi': libtessera_ffi.so: cannot open shared object file); the app was built without it " +
        "or with another ABI: build from source (Rust and the NDK, the Gradle task buildTesseraRust) or ship prebuilt " +
        "android/src/main/jniLibs/arm64-v8a/libtessera_ffi.so\"}}"
    eq(first, expected)
    eq(callAndWait(bridge, "{\"method\":\"devices\"}").first, expected)
    eq(calls, 1)
    bridge.shutdown()
  }

  test("a symbol JNA cannot bind (another build, or a minified one) is a NativeLibrary error saying both") {
    val bridge = TesseraBridge(native = { throw UnsatisfiedLinkError("'java.lang.String a.a.a.M.l()'") }, abi = { "arm64-v8a" })
    eq(
      callAndWait(bridge, "{}").first,
      "{\"error\":{\"kind\":\"NativeLibrary\",\"message\":\"react-native-tessera: could not bind to libtessera_ffi.so for ABI arm64-v8a " +
        "('java.lang.String a.a.a.M.l()'): the library lacks a function of the generated Kotlin bindings (they must come from " +
        "one build), or JNA and the bindings were renamed by a minified release build without the keep rules of the package's " +
        "android/consumer-rules.pro\"}}",
    )
    bridge.shutdown()
  }

  test("a class whose init failed earlier is still a NativeLibrary error") {
    val bridge = TesseraBridge(native = { throw NoClassDefFoundError("Could not initialize class com.tessera.UniffiLib") }, abi = { "x86_64" })
    val (r, _) = callAndWait(bridge, "{}")
    check(r!!.startsWith("{\"error\":{\"kind\":\"NativeLibrary\",\"message\":\"react-native-tessera: libtessera_ffi.so for ABI x86_64 could not be initialized")) { r }
    bridge.shutdown()
  }

  test("a uniffi checksum mismatch is a NativeLibrary error naming the bindings, not a crash") {
    val bridge =
      TesseraBridge(
        native = { throw ExceptionInInitializerError(RuntimeException("UniFFI API checksum mismatch: try cleaning and rebuilding your project")) },
        abi = { "x86_64" },
      )
    val (r, _) = callAndWait(bridge, "{}")
    check(r!!.startsWith("{\"error\":{\"kind\":\"NativeLibrary\",\"message\":\"react-native-tessera: libtessera_ffi.so for ABI x86_64 does not match the generated Kotlin bindings (UniFFI API checksum mismatch")) { r }
    bridge.shutdown()
  }

  test("other exceptions stay Internal and are not remembered") {
    var n = 0
    val bridge = TesseraBridge(native = { if (++n == 1) throw IllegalStateException("once") else "{\"ok\":1}" })
    eq(callAndWait(bridge, "{}").first, "{\"error\":{\"kind\":\"Internal\",\"message\":\"native call failed: IllegalStateException: once\"}}")
    eq(callAndWait(bridge, "{}").first, "{\"ok\":1}")
    bridge.shutdown()
  }

  test("shutdown closes every native session: at once, and after the running calls finished") {
    val closes = java.util.concurrent.atomic.AtomicInteger()
    val release = CountDownLatch(1)
    val bridge =
      TesseraBridge(
        native = { req -> if (req == "slow") release.await(5, TimeUnit.SECONDS); "{\"ok\":{}}" },
        closeAll = { closes.incrementAndGet(); Unit },
      )
    callAndWait(bridge, "{}")
    val done = CountDownLatch(1)
    bridge.call("slow", { done.countDown() }, { _, _ -> done.countDown() })
    bridge.shutdown()
    eq(closes.get(), 1)
    release.countDown()
    check(bridge.awaitShutdown(5, TimeUnit.SECONDS)) { "the final close did not run" }
    eq(closes.get(), 2)
    check(done.await(5, TimeUnit.SECONDS)) { "the running call was dropped" }
  }

  test("shutdown does not touch the native library when no call used it") {
    var closes = 0
    val bridge = TesseraBridge(native = { throw UnsatisfiedLinkError("absent") }, closeAll = { closes++ })
    callAndWait(bridge, "{}")
    bridge.shutdown()
    eq(closes, 0)
  }

  test("events: the sink is installed on the first call, forwards what the core emits during it, and is removed at shutdown") {
    val installs = CopyOnWriteArrayList<Boolean>()
    var sink: ((String) -> Unit)? = null
    val emitted = CopyOnWriteArrayList<String>()
    val bridge =
      TesseraBridge(
        native = { req ->
          // The core emits on the calling thread while the request runs.
          sink?.invoke("{\"type\":\"token\",\"requestId\":\"r-1\",\"token\":5,\"text\":\"a\"}")
          "{\"ok\":$req}"
        },
        installEventSink = { s -> installs.add(s != null); sink = s },
        emitEvent = { emitted.add(it) },
      )
    eq(installs.toList(), emptyList<Boolean>())
    check(!bridge.isForwardingEvents) { "forwarding before any call" }
    callAndWait(bridge, "{\"method\":\"generate\"}")
    callAndWait(bridge, "{\"method\":\"generate\"}")
    eq(installs.toList(), listOf(true))
    check(bridge.isForwardingEvents) { "not forwarding" }
    eq(emitted.toList(), List(2) { "{\"type\":\"token\",\"requestId\":\"r-1\",\"token\":5,\"text\":\"a\"}" })
    bridge.shutdown()
    eq(installs.toList(), listOf(true, false))
    check(!bridge.isForwardingEvents) { "still forwarding" }
  }

  test("events: the shutdown of an older bridge (a JS reload) leaves the newer one's sink in place") {
    val installs = CopyOnWriteArrayList<String>()
    val old = TesseraBridge(native = { "{\"ok\":{}}" }, installEventSink = { installs.add(if (it == null) "old: remove" else "old: install") })
    callAndWait(old, "{}")
    val new = TesseraBridge(native = { "{\"ok\":{}}" }, installEventSink = { installs.add(if (it == null) "new: remove" else "new: install") })
    callAndWait(new, "{}")
    old.shutdown()
    check(new.isForwardingEvents) { "the newer bridge lost its sink" }
    callAndWait(new, "{}")
    new.shutdown()
    eq(installs.toList(), listOf("old: install", "new: install", "new: remove"))
  }

  test("events: a sink that cannot be installed (no library) is the call's NativeLibrary error") {
    val bridge =
      TesseraBridge(
        native = { "{\"ok\":{}}" },
        installEventSink = { throw UnsatisfiedLinkError("dlopen failed: library \"libtessera_ffi.so\" not found") },
      )
    val (resolved, _) = callAndWait(bridge, "{}")
    check(resolved!!.startsWith("{\"error\":{\"kind\":\"NativeLibrary\"")) { resolved }
    bridge.shutdown()
  }

  test("content URIs: a regular file is loaded in place through /proc/self/fd, and the document closed after") {
    val seen = CopyOnWriteArrayList<String>()
    val doc = FakeContent("/proc/self/fd/42")
    val opened = CopyOnWriteArrayList<String>()
    val bridge = TesseraBridge(native = { seen.add(it); "{\"ok\":{\"model\":1}}" }, openContent = { opened.add(it); doc })
    val uri = "content://com.android.providers.downloads.documents/document/msf%3A1000"
    val (resolved, _) = callAndWait(bridge, "{\"method\":\"loadModel\",\"path\":\"$uri\",\"requestId\":\"r-1\",\"options\":{\"nCtx\":256}}")
    eq(resolved, "{\"ok\":{\"model\":1}}")
    eq(opened.toList(), listOf(uri))
    eq(seen.toList(), listOf("{\"method\":\"loadModel\",\"path\":\"/proc/self/fd/42\",\"requestId\":\"r-1\",\"options\":{\"nCtx\":256}}"))
    check(doc.closed) { "the document was not closed" }
    // Other paths are not touched.
    callAndWait(bridge, "{\"method\":\"loadModel\",\"path\":\"/data/m.gguf\"}")
    eq(seen.last(), "{\"method\":\"loadModel\",\"path\":\"/data/m.gguf\"}")
    eq(opened.size, 1)
    bridge.shutdown()
  }

  test("content URIs: a pipe is copied into app storage with copyProgress events, then loaded from the copy") {
    val dir = java.nio.file.Files.createTempDirectory("tessera-imports").toFile()
    try {
      val data = ByteArray(1_000_000) { (it % 251).toByte() }
      val seen = CopyOnWriteArrayList<String>()
      val events = CopyOnWriteArrayList<String>()
      val doc = FakeContent(null, data)
      val bridge =
        TesseraBridge(native = { seen.add(it); "{\"ok\":{}}" }, openContent = { doc }, contentCopies = { dir }, emitEvent = { events.add(it) })
      callAndWait(bridge, "{\"method\":\"loadModel\",\"path\":\"content://p/d/7\",\"requestId\":\"r-2\"}")
      val copies = dir.listFiles()!!.toList()
      eq(copies.size, 1)
      check(copies[0].name.endsWith("-My_Model__1_.gguf")) { copies[0].name }
      check(copies[0].readBytes().contentEquals(data)) { "the copy differs" }
      eq(seen.toList(), listOf("{\"method\":\"loadModel\",\"path\":${TesseraBridge.jsonString(copies[0].absolutePath)},\"requestId\":\"r-2\"}"))
      check(events.size >= 2 && events.all { it.startsWith("{\"type\":\"copyProgress\",\"requestId\":\"r-2\"") }) { "$events" }
      eq(events.last(), "{\"type\":\"copyProgress\",\"requestId\":\"r-2\",\"received\":1000000,\"total\":null}")
      check(doc.closed) { "the document was not closed" }
      bridge.shutdown()
    } finally {
      dir.deleteRecursively()
    }
  }

  test("content URIs: cancelLoad stops a copy (Cancelled, nothing left, the core not asked to load); a provider's refusal is InvalidModel") {
    val dir = java.nio.file.Files.createTempDirectory("tessera-imports").toFile()
    try {
      val gate = CountDownLatch(1)
      val slow =
        object : java.io.InputStream() {
          var n = 0
          override fun read(): Int = throw UnsupportedOperationException()
          override fun read(b: ByteArray, off: Int, len: Int): Int {
            if (n++ == 1) gate.await(5, TimeUnit.SECONDS)
            return len
          }
        }
      val seen = CopyOnWriteArrayList<String>()
      val bridge =
        TesseraBridge(
          native = { seen.add(it); "{\"ok\":{\"cancelled\":false}}" },
          openContent = { if (it.contains("denied")) throw SecurityException("Permission Denial: no grant") else FakeContent(null, stream = { slow }) },
          contentCopies = { dir },
        )
      val answer = AtomicReference<String?>()
      val done = CountDownLatch(1)
      bridge.call("{\"method\":\"loadModel\",\"path\":\"content://p/d/8\",\"requestId\":\"r-3\"}", { answer.set(it); done.countDown() }, { _, _ -> done.countDown() })
      Thread.sleep(200)
      callAndWait(bridge, "{\"method\":\"cancelLoad\",\"requestId\":\"r-3\"}")
      gate.countDown()
      check(done.await(5, TimeUnit.SECONDS)) { "the load did not end" }
      check(answer.get()!!.startsWith("{\"error\":{\"kind\":\"Cancelled\"")) { "${answer.get()}" }
      eq(dir.listFiles()!!.toList(), emptyList<java.io.File>())
      eq(seen.toList(), listOf("{\"method\":\"cancelLoad\",\"requestId\":\"r-3\"}"))
      val (denied, _) = callAndWait(bridge, "{\"method\":\"loadModel\",\"path\":\"content://p/denied\"}")
      eq(denied, "{\"error\":{\"kind\":\"InvalidModel\",\"message\":\"content://p/denied: the content resolver cannot open it (SecurityException: Permission Denial: no grant)\"}}")
      bridge.shutdown()
    } finally {
      dir.deleteRecursively()
    }
  }

  test("stringField reads a request's string fields, escapes undone; withPath replaces the path") {
    val r = "{\"method\":\"loadModel\",\"path\":\"content://a\\/b\\\"c\\u00e9\",\"requestId\":\"x-1\"}"
    eq(TesseraBridge.stringField(r, "path"), "content://a/b\"c\u00e9")
    eq(TesseraBridge.stringField(r, "requestId"), "x-1")
    eq(TesseraBridge.stringField(r, "nope"), null)
    eq(TesseraBridge.withPath(r, "/x\"y"), "{\"method\":\"loadModel\",\"path\":\"/x\\\"y\",\"requestId\":\"x-1\"}")
  }

  test("the models folder is told to the core once, before the first request, JSON-escaped") {
    val seen = java.util.Collections.synchronizedList(mutableListOf<String>())
    val bridge = TesseraBridge(native = { seen.add(it); "{\"ok\":{}}" }, modelsDirectory = { "/data/user/0/app/files/tessera/\"models\"" })
    callAndWait(bridge, "{\"method\":\"devices\"}")
    callAndWait(bridge, "{\"method\":\"listModels\"}")
    eq(seen.toList(), listOf(
      "{\"method\":\"setModelsDirectory\",\"params\":{\"path\":\"/data/user/0/app/files/tessera/\\\"models\\\"\"}}",
      "{\"method\":\"devices\"}",
      "{\"method\":\"listModels\"}",
    ))
    bridge.shutdown()
  }

  println("$passed passed, $failed failed")
  if (failed > 0) kotlin.system.exitProcess(1)
}
