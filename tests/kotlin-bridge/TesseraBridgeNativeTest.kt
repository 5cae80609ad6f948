// TesseraBridge over the real Rust core: the generated uniffi binding `callJson` (package
// com.tessera) loading libtessera_ffi through JNA, as TesseraModule wires them on Android.
// Run by scripts/kotlin-bridge-test.sh when the library is built.

import com.tessera.EventListener
import com.tessera.LogLevel
import com.tessera.LogListener
import com.tessera.callJson
import com.tessera.closeAllSessions
import com.tessera.setEventListener
import com.tessera.setLogListener
import com.tessera.reactnative.TesseraBridge
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.util.Base64
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicReference

private var passed = 0
private var failed = 0

private fun test(name: String, body: () -> Unit) {
  try {
    body()
    passed++
    println("ok   native: $name")
  } catch (e: Throwable) {
    failed++
    println("FAIL native: $name: ${e.javaClass.simpleName}: ${e.message}")
  }
}

private fun check(condition: Boolean, message: () -> String) {
  if (!condition) throw AssertionError(message())
}

/** The bridge as TesseraModule builds it, its protocol events to `events`. */
private fun moduleBridge(events: MutableList<String> = java.util.Collections.synchronizedList(mutableListOf()), modelsDir: String? = null) =
  TesseraBridge(
    native = { request -> callJson(request) },
    installLogSink = { sink ->
      setLogListener(
        sink?.let {
          object : LogListener {
            override fun onLog(level: LogLevel, target: String, message: String) {
              it(level.name.lowercase(), target, message)
            }
          }
        }
      )
    },
    closeAll = { closeAllSessions() },
    installEventSink = { sink ->
      setEventListener(
        sink?.let {
          object : EventListener {
            override fun onEvent(eventJson: String) = it(eventJson)
          }
        }
      )
    },
    emitEvent = { events.add(it) },
    modelsDirectory = { modelsDir },
  )

private fun callAndWait(bridge: TesseraBridge, request: String, seconds: Long = 60): String {
  val latch = CountDownLatch(1)
  val result = AtomicReference<String>()
  bridge.call(request, { result.set(it); latch.countDown() }, { code, message -> result.set("rejected $code $message"); latch.countDown() })
  check(latch.await(seconds, TimeUnit.SECONDS)) { "no answer within $seconds s" }
  return result.get()
}

private fun f32(vararg values: Float): String {
  val b = ByteBuffer.allocate(values.size * 4).order(ByteOrder.LITTLE_ENDIAN)
  values.forEach { b.putFloat(it) }
  return Base64.getEncoder().encodeToString(b.array())
}

private fun floatsOf(base64: String): List<Float> {
  val b = ByteBuffer.wrap(Base64.getDecoder().decode(base64)).order(ByteOrder.LITTLE_ENDIAN)
  return List(b.remaining() / 4) { b.getFloat() }
}

fun main() {
  val bridge = moduleBridge()

  test("devices through callJson") {
    val r = callAndWait(bridge, "{\"method\":\"devices\"}")
    check(r.startsWith("{\"ok\":[") && r.contains("\"type\":\"cpu\"")) { r }
  }

  test("a compute: [1, 2] + [3, 4] = [4, 6]") {
    val graph = "{\"version\":1,\"tensors\":[{\"name\":\"a\",\"type\":\"F32\",\"shape\":[2]},{\"name\":\"b\",\"type\":\"F32\",\"shape\":[2]}]," +
      "\"nodes\":[{\"name\":\"c\",\"op\":\"ADD\",\"src\":[\"a\",\"b\"]}],\"outputs\":[\"c\"]}"
    val inputs = "[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[2],\"data\":\"${f32(1f, 2f)}\"}," +
      "{\"name\":\"b\",\"dtype\":\"F32\",\"shape\":[2],\"data\":\"${f32(3f, 4f)}\"}]"
    val r = callAndWait(bridge, "{\"method\":\"compute\",\"graph\":$graph,\"inputs\":$inputs}")
    val data = Regex("\"data\":\"([^\"]+)\"").find(r)?.groupValues?.get(1) ?: throw AssertionError(r)
    check(floatsOf(data) == listOf(4f, 6f)) { "got ${floatsOf(data)} from $r" }
  }

  test("errors come back as protocol responses") {
    val r = callAndWait(bridge, "{\"method\":\"nope\"}")
    check(r.startsWith("{\"error\":{\"kind\":\"InvalidArgument\"")) { r }
  }

  test("cancel gets through while a long compute of the session runs") {
    val open = callAndWait(bridge, "{\"method\":\"openSession\",\"options\":{\"device\":\"CPU\",\"threads\":1}}")
    val session = Regex("\"session\":(\\d+)").find(open)?.groupValues?.get(1) ?: throw AssertionError(open)
    // 2000 chained 128 x 128 matmuls (8 GFLOP).
    val nodes = (0 until 2000).joinToString(",") { k ->
      "{\"name\":\"m$k\",\"op\":\"MUL_MAT\",\"src\":[\"w\",\"${if (k == 0) "x" else "m${k - 1}"}\"]}"
    }
    val graph = "{\"version\":1,\"tensors\":[{\"name\":\"w\",\"type\":\"F32\",\"shape\":[128,128]},{\"name\":\"x\",\"type\":\"F32\",\"shape\":[128,128]}]," +
      "\"nodes\":[$nodes],\"outputs\":[\"m1999\"]}"
    val zeros = Base64.getEncoder().encodeToString(ByteArray(128 * 128 * 4))
    val inputs = "[{\"name\":\"w\",\"dtype\":\"F32\",\"shape\":[128,128],\"data\":\"$zeros\"},{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[128,128],\"data\":\"$zeros\"}]"
    val done = CountDownLatch(1)
    val computed = AtomicReference<String>()
    bridge.call("{\"method\":\"compute\",\"session\":$session,\"graph\":$graph,\"inputs\":$inputs}", { computed.set(it); done.countDown() }, { _, _ -> done.countDown() })
    // A cancel that arrives before the core registered the compute finds nothing: repeat it
    // (as the JavaScript client does) until the core reports one cancelled.
    var cancel = ""
    val deadline = System.nanoTime() + 30_000_000_000L
    while (done.count > 0 && System.nanoTime() < deadline) {
      cancel = callAndWait(bridge, "{\"method\":\"cancel\",\"session\":$session}", 10)
      check(cancel.startsWith("{\"ok\":")) { cancel }
      if (cancel.contains("true")) break
      Thread.sleep(10)
    }
    check(done.await(30, TimeUnit.SECONDS)) { "the compute did not stop (last cancel: $cancel)" }
    val r = computed.get()
    check(r.contains("\"kind\":\"Cancelled\"")) { "compute: ${r.take(200)}, cancel: $cancel" }
    check(callAndWait(bridge, "{\"method\":\"closeSession\",\"session\":$session}").startsWith("{\"ok\":")) { "close" }
  }

  test("log forwarding installs and removes the real listener") {
    val records = mutableListOf<String>()
    val openCpu = "{\"method\":\"openSession\",\"options\":{\"device\":\"CPU\",\"threads\":1}}"
    bridge.setLogForwarding(true) { level, target, message -> synchronized(records) { records.add("$level $target $message") }; Unit }
    check(bridge.isLogForwarding) { "not forwarding" }
    callAndWait(bridge, "{\"method\":\"setLogLevel\",\"level\":\"trace\"}")
    // Opening a session logs "session on CPU (...)" at info level.
    val first = Regex("\"session\":(\\d+)").find(callAndWait(bridge, openCpu))?.groupValues?.get(1)
    val forwarded = synchronized(records) { records.toList() }
    check(forwarded.any { it.startsWith("info tessera") && it.contains("session on CPU") }) { "forwarded: $forwarded" }
    forwarded.forEach { check(it.split(' ')[0] in setOf("error", "warn", "info", "debug", "trace")) { it } }
    bridge.setLogForwarding(false) { _, _, _ -> }
    check(!bridge.isLogForwarding) { "still forwarding" }
    // Once removed, nothing more arrives.
    val second = Regex("\"session\":(\\d+)").find(callAndWait(bridge, openCpu))?.groupValues?.get(1)
    check(synchronized(records) { records.size } == forwarded.size) { "records after removal: $records" }
    for (id in listOfNotNull(first, second)) callAndWait(bridge, "{\"method\":\"closeSession\",\"session\":$id}")
  }

  bridge.shutdown()

  test("closing the module closes its sessions (a compute in flight is cancelled)") {
    val module = moduleBridge()
    val open = { callAndWait(module, "{\"method\":\"openSession\",\"options\":{\"device\":\"CPU\",\"threads\":1}}") }
    val idOf = { r: String -> Regex("\"session\":(\\d+)").find(r)?.groupValues?.get(1) ?: throw AssertionError(r) }
    val idle = idOf(open())
    val busy = idOf(open())
    // 2000 chained 128 x 128 matmuls (8 GFLOP): still running when the module closes.
    val nodes = (0 until 2000).joinToString(",") { k ->
      "{\"name\":\"m$k\",\"op\":\"MUL_MAT\",\"src\":[\"w\",\"${if (k == 0) "x" else "m${k - 1}"}\"]}"
    }
    val graph = "{\"version\":1,\"tensors\":[{\"name\":\"w\",\"type\":\"F32\",\"shape\":[128,128]},{\"name\":\"x\",\"type\":\"F32\",\"shape\":[128,128]}]," +
      "\"nodes\":[$nodes],\"outputs\":[\"m1999\"]}"
    val zeros = Base64.getEncoder().encodeToString(ByteArray(128 * 128 * 4))
    val inputs = "[{\"name\":\"w\",\"dtype\":\"F32\",\"shape\":[128,128],\"data\":\"$zeros\"},{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[128,128],\"data\":\"$zeros\"}]"
    val done = CountDownLatch(1)
    val computed = AtomicReference<String>()
    module.call("{\"method\":\"compute\",\"session\":$busy,\"graph\":$graph,\"inputs\":$inputs}", { computed.set(it); done.countDown() }, { _, _ -> done.countDown() })
    module.shutdown()
    check(module.awaitShutdown(60, TimeUnit.SECONDS)) { "shutdown did not finish" }
    check(done.await(60, TimeUnit.SECONDS)) { "the compute never answered" }
    // Cancelled when it had started, Closed when the session was gone before it started.
    val kind = Regex("\"kind\":\"(\\w+)\"").find(computed.get())?.groupValues?.get(1)
    check(kind == "Cancelled" || kind == "Closed") { "the compute was not stopped: ${computed.get().take(200)}" }
    // The next instance (after a JS reload) finds both sessions closed.
    val next = moduleBridge()
    for (id in listOf(idle, busy)) {
      val r = callAndWait(next, "{\"method\":\"compute\",\"session\":$id,\"graph\":$graph,\"inputs\":$inputs}")
      check(r == "{\"error\":{\"kind\":\"Closed\",\"message\":\"session $id is closed\"}}") { "session $id: $r" }
    }
    next.shutdown()
  }

  test("a model through the bridge: progress and token events with their requestId; shutdown releases it") {
    val gemma = System.getenv("TESSERA_GEMMA_GGUF") ?: throw AssertionError("set TESSERA_GEMMA_GGUF (scripts/kotlin-bridge-test.sh defaults it)")
    check(java.io.File(gemma).isFile) { "$gemma not found (scripts/setup.sh installs it)" }
    val events = java.util.Collections.synchronizedList(mutableListOf<String>())
    val module = moduleBridge(events)
    val path = gemma.replace("\\", "\\\\").replace("\"", "\\\"")
    val loaded = callAndWait(module, "{\"method\":\"loadModel\",\"path\":\"$path\",\"requestId\":\"b-1\",\"options\":{\"device\":\"CPU\",\"threads\":2,\"nCtx\":256}}")
    val id = Regex("\"model\":(\\d+)").find(loaded)?.groupValues?.get(1) ?: throw AssertionError(loaded)
    val progress = events.filter { it.contains("\"type\":\"loadProgress\"") }
    check(progress.size > 2 && progress.all { it.contains("\"requestId\":\"b-1\"") } && progress.last().contains("\"progress\":1.0")) { "$progress" }
    events.clear()
    // llama.cpp's greedy ids of " the capital of".
    val generated = callAndWait(module, "{\"method\":\"generate\",\"model\":$id,\"requestId\":\"b-2\",\"params\":{\"prompt\":\"The capital of France is\",\"temperature\":0,\"maxTokens\":3}}")
    check(generated.contains("\"tokens\":[506,5279,529]")) { generated }
    val tokens = events.map { Regex("\"token\":(\\d+)").find(it)?.groupValues?.get(1) }
    check(tokens == listOf("506", "5279", "529") && events.all { it.contains("\"requestId\":\"b-2\"") }) { "$events" }
    module.shutdown()
    check(module.awaitShutdown(60, TimeUnit.SECONDS)) { "shutdown did not finish" }
    // After a JS reload the model is gone.
    val next = moduleBridge()
    val r = callAndWait(next, "{\"method\":\"tokenize\",\"model\":$id,\"params\":{\"text\":\"a\"}}")
    check(r == "{\"error\":{\"kind\":\"Closed\",\"message\":\"model $id is released\"}}") { r }
    next.shutdown()
  }

  test("a content document that is a regular file loads in place through /proc/self/fd/N (the file-descriptor reader)") {
    val gemma = System.getenv("TESSERA_GEMMA_GGUF") ?: throw AssertionError("set TESSERA_GEMMA_GGUF")
    val file = java.io.File(gemma).canonicalFile
    val input = java.io.FileInputStream(file)
    // The descriptor number of `input`, as ParcelFileDescriptor.getFd() gives it on Android.
    val fd =
      java.io.File("/proc/self/fd").listFiles()!!.firstOrNull {
        runCatching { java.nio.file.Files.readSymbolicLink(it.toPath()).toString() == file.path }.getOrDefault(false)
      }?.name ?: throw AssertionError("no descriptor of $file in /proc/self/fd")
    val source =
      object : com.tessera.reactnative.ContentSource {
        override val inPlacePath = "/proc/self/fd/$fd"
        override val size = file.length()
        override val displayName = file.name
        override fun openStream(): java.io.InputStream = throw AssertionError("a regular file is not copied")
        override fun close() = input.close()
      }
    val bridge = TesseraBridge(native = { request -> callJson(request) }, openContent = { source })
    val loaded = callAndWait(bridge, "{\"method\":\"loadModel\",\"path\":\"content://test/gemma\",\"options\":{\"device\":\"CPU\",\"threads\":1,\"nCtx\":128}}")
    val id = Regex("\"model\":(\\d+)").find(loaded)?.groupValues?.get(1) ?: throw AssertionError(loaded)
    check(loaded.contains("\"architecture\":\"gemma3\"") && Regex("\"mappedBytes\":[1-9]").containsMatchIn(loaded)) { loaded }
    // The weights were mapped from the file behind the descriptor, which is closed now: the
    // mapping keeps them, and the model computes.
    val generated = callAndWait(bridge, "{\"method\":\"generate\",\"model\":$id,\"params\":{\"prompt\":\"The capital of France is\",\"temperature\":0,\"maxTokens\":3}}")
    check(generated.contains("\"tokens\":[506,5279,529]")) { generated }
    callAndWait(bridge, "{\"method\":\"releaseModel\",\"model\":$id}")
    bridge.shutdown()
  }

  test("downloadModel through the bridge from a local server: progress events, the file checked and renamed; a wrong SHA-256 leaves nothing") {
    val data = ByteArray(700_000) { (it * 31 + 7).toByte() }
    val sha = java.security.MessageDigest.getInstance("SHA-256").digest(data).joinToString("") { "%02x".format(it) }
    val server = com.sun.net.httpserver.HttpServer.create(java.net.InetSocketAddress("127.0.0.1", 0), 0)
    server.createContext("/") { ex ->
      ex.sendResponseHeaders(200, data.size.toLong())
      ex.responseBody.use { it.write(data) }
    }
    server.start()
    val dir = java.nio.file.Files.createTempDirectory("tessera-models").toFile()
    try {
      val events = java.util.Collections.synchronizedList(mutableListOf<String>())
      val module = moduleBridge(events, dir.absolutePath)
      val url = "http://127.0.0.1:${server.address.port}/m/tiny.gguf"
      val ok = callAndWait(module, "{\"method\":\"downloadModel\",\"params\":{\"url\":\"$url\",\"sha256\":\"$sha\"},\"requestId\":\"d-1\"}")
      val path = java.io.File(dir, "tiny.gguf")
      check(ok.startsWith("{\"ok\":") && ok.contains("\"size\":700000") && ok.contains("\"sha256\":\"$sha\"")) { ok }
      check(path.readBytes().contentEquals(data)) { "the file differs" }
      check(events.isNotEmpty() && events.all { it.contains("\"type\":\"downloadProgress\"") && it.contains("\"requestId\":\"d-1\"") } &&
        events.last().contains("\"received\":700000")) { "$events" }
      val wrong = "0".repeat(64)
      val bad = callAndWait(module, "{\"method\":\"downloadModel\",\"params\":{\"url\":\"$url\",\"sha256\":\"$wrong\",\"name\":\"other.gguf\"}}")
      check(bad.startsWith("{\"error\":{\"kind\":\"InvalidModel\"") && bad.contains("not the $wrong")) { bad }
      check(!java.io.File(dir, "other.gguf").exists()) { "a file under the name of a download that failed its check" }
      module.shutdown()
    } finally {
      server.stop(0)
      dir.deleteRecursively()
    }
  }

  println("$passed passed, $failed failed")
  if (failed > 0) kotlin.system.exitProcess(1)
}
