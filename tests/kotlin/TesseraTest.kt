// The generated Kotlin bindings (package com.tessera) over the real libtessera_ffi, on a plain
// JVM through JNA: devices and features, a compute checked against hand-computed numbers, every
// error arriving as a TesseraException with its message, suspend compute, cancel and close; the
// language model on Gemma 3 270M (ModelTest.kt).
// Run by scripts/kotlin-test.sh; prints "N passed, M failed" and exits non-zero on a failure.

import com.tessera.BuildInfo
import com.tessera.DeviceType
import com.tessera.LogLevel
import com.tessera.LogListener
import com.tessera.Session
import com.tessera.SessionOptions
import com.tessera.TensorData
import com.tessera.TesseraException
import com.tessera.buildInfo
import com.tessera.callJson
import com.tessera.cpuFeatures
import com.tessera.devices
import com.tessera.setLogLevel
import com.tessera.setLogListener
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.util.Collections
import kotlin.math.abs
import kotlin.math.exp
import kotlin.system.exitProcess
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.cancelAndJoin
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking

private var passed = 0
private var failed = 0

internal fun test(name: String, body: () -> Unit) {
  val start = System.nanoTime()
  try {
    body()
    passed++
    println("ok   $name (${(System.nanoTime() - start) / 1_000_000} ms)")
  } catch (t: Throwable) {
    failed++
    println("FAIL $name: $t")
    t.printStackTrace(System.out)
  }
}

internal fun require(condition: Boolean, message: () -> String) {
  if (!condition) throw AssertionError(message())
}

private fun floats(vararg v: Float): ByteArray {
  val b = ByteBuffer.allocate(v.size * 4).order(ByteOrder.LITTLE_ENDIAN)
  v.forEach { b.putFloat(it) }
  return b.array()
}

private fun floatsOf(bytes: ByteArray): FloatArray {
  val b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN)
  return FloatArray(bytes.size / 4) { b.getFloat() }
}

private fun assertClose(actual: FloatArray, expected: FloatArray, tol: Float = 1e-5f) {
  require(actual.size == expected.size) { "${actual.toList()} vs ${expected.toList()}" }
  for (i in actual.indices) {
    require(abs(actual[i] - expected[i]) <= tol * maxOf(1f, abs(expected[i]))) {
      "element $i: ${actual.toList()} vs ${expected.toList()}"
    }
  }
}

/** Runs [body], expecting a TesseraException of type [E] whose message mentions [words]. */
internal inline fun <reified E : TesseraException> expectError(vararg words: String, body: () -> Unit): E {
  try {
    body()
  } catch (e: TesseraException) {
    require(e is E) { "expected ${E::class.simpleName}, got ${e::class.simpleName}: ${e.message}" }
    val message = e.message ?: ""
    for (w in words) require(message.contains(w)) { "message \"$message\" should mention \"$w\"" }
    return e as E
  }
  throw AssertionError("expected ${E::class.simpleName}, got no error")
}

// w: 2 rows of 3, x: 2 columns of 3; y = w·x, p = softmax(y).
private const val MATMUL_SOFTMAX = """
{"version": 1,
 "tensors": [{"name": "w", "type": "F32", "shape": [3, 2], "values": [1, 2, 3, 0, 1, -1]},
             {"name": "x", "type": "F32", "shape": [3, 2]}],
 "nodes": [{"name": "y", "op": "MUL_MAT", "src": ["w", "x"]},
           {"name": "p", "op": "SOFT_MAX", "src": ["y"]}],
 "outputs": ["y", "p"]}
"""

private fun xInput() = TensorData("x", "F32", listOf(3uL, 2uL), floats(1f, 0f, 1f, 2f, 1f, 0f))

private val expectedY = floatArrayOf(4f, -1f, 4f, 1f)
private val expectedP: FloatArray = run {
  val e5 = exp(-5f)
  val e3 = exp(-3f)
  floatArrayOf(1f / (1f + e5), e5 / (1f + e5), 1f / (1f + e3), e3 / (1f + e3))
}

/** A chain of [n] 512×512 F32 matmuls: long enough to cancel in the middle. */
private fun longChain(n: Int): Pair<String, List<TensorData>> {
  val nodes = (0 until n).joinToString(",") { i ->
    val src = if (i == 0) "x" else "y${i - 1}"
    """{"name": "y$i", "op": "MUL_MAT", "src": ["w", "$src"]}"""
  }
  val doc = """{"version": 1,
    "tensors": [{"name": "w", "type": "F32", "shape": [512, 512]},
                {"name": "x", "type": "F32", "shape": [512, 512]}],
    "nodes": [$nodes], "outputs": ["y${n - 1}"]}"""
  val data = floats(*FloatArray(512 * 512) { 0.001f })
  return doc to listOf(TensorData("w", "F32", listOf(512uL, 512uL), data), TensorData("x", "F32", listOf(512uL, 512uL), data))
}

private fun cpuSession() = Session(SessionOptions(device = "CPU", threads = 2u))

/**
 * A GGUF v3 file written byte by byte: F32 tensors [tensors] (name, shape, values) at 32-byte
 * aligned offsets of the data section, no metadata.
 */
private fun writeGguf(file: java.io.File, tensors: List<Triple<String, List<Long>, FloatArray>>) {
  val header = java.io.ByteArrayOutputStream()
  fun put(n: Int, f: (ByteBuffer) -> Unit) {
    val b = ByteBuffer.allocate(n).order(ByteOrder.LITTLE_ENDIAN)
    f(b)
    header.write(b.array())
  }
  fun str(s: String) {
    val bytes = s.toByteArray()
    put(8) { it.putLong(bytes.size.toLong()) }
    header.write(bytes)
  }
  header.write("GGUF".toByteArray())
  put(4) { it.putInt(3) }
  put(8) { it.putLong(tensors.size.toLong()) }
  put(8) { it.putLong(0) }
  val offsets = mutableListOf<Int>()
  var offset = 0
  for ((name, shape, values) in tensors) {
    offsets.add(offset)
    str(name)
    put(4) { it.putInt(shape.size) }
    shape.forEach { d -> put(8) { it.putLong(d) } }
    put(4) { it.putInt(0) } // F32
    put(8) { it.putLong(offset.toLong()) }
    offset += (values.size * 4 + 31) / 32 * 32
  }
  val head = header.toByteArray()
  val dataStart = (head.size + 31) / 32 * 32
  val out = ByteBuffer.allocate(dataStart + offset).order(ByteOrder.LITTLE_ENDIAN)
  out.put(head)
  tensors.forEachIndexed { i, t -> t.third.forEachIndexed { j, v -> out.putFloat(dataStart + offsets[i] + 4 * j, v) } }
  file.writeBytes(out.array())
}

/** The text of [path], or null where it cannot be read (not Linux). */
private fun procFile(path: String): String? = runCatching { java.io.File(path).readText() }.getOrNull()

/** The first value of [key] in /proc/cpuinfo, read independently of the library. */
private fun cpuinfoField(key: String): String? =
  procFile("/proc/cpuinfo")?.lineSequence()?.firstOrNull { it.substringBefore(':').trim() == key }?.substringAfter(':')?.trim()

fun main() {
  val logs = Collections.synchronizedList(mutableListOf<Triple<LogLevel, String, String>>())
  setLogListener(
    object : LogListener {
      override fun onLog(level: LogLevel, target: String, message: String) {
        logs.add(Triple(level, target, message))
      }
    }
  )
  setLogLevel(LogLevel.DEBUG)

  test("devices lists the CPU with what /proc says of the machine") {
    val list = devices()
    val cpu = list.firstOrNull { it.deviceType == DeviceType.CPU } ?: throw AssertionError("no CPU in $list")
    require(cpu.name == "CPU" && cpu.backend == "CPU") { "$cpu" }
    val model = cpuinfoField("model name")
    if (model != null) require(cpu.description == model) { "description ${cpu.description} vs /proc/cpuinfo $model" }
    else require(cpu.description.isNotEmpty()) { "$cpu" }
    val memTotal = procFile("/proc/meminfo")?.let { Regex("^MemTotal:\\s+(\\d+) kB", RegexOption.MULTILINE).find(it) }
    if (memTotal != null) {
      val want = memTotal.groupValues[1].toULong() * 1024uL
      require(cpu.memoryTotal == want) { "memoryTotal ${cpu.memoryTotal} vs /proc/meminfo $want" }
    } else {
      require(cpu.memoryTotal > 0uL) { "$cpu" }
    }
    require(cpu.memoryFree > 0uL && cpu.memoryFree <= cpu.memoryTotal) { "$cpu" }
  }

  test("cpu features agree with /proc/cpuinfo, one known tier per weight type") {
    val f = cpuFeatures()
    val pairs = f.pairs.associate { it.name to it.value }
    val flags = (cpuinfoField("flags") ?: "").split(Regex("\\s+")).toSet()
    if (System.getProperty("os.arch") in setOf("amd64", "x86_64") && flags.size > 1) {
      val want = if ("avx2" in flags) "1" else "0"
      require(pairs["AVX2"] == want) { "AVX2 = ${pairs["AVX2"]}, /proc/cpuinfo says $want" }
    }
    val tiers = setOf("scalar", "neon", "dotprod", "i8mm", "avx2", "avx512_vnni")
    require(f.tiers.map { it.dtype }.containsAll(listOf("Q4_0", "Q8_0", "Q4_K", "Q6_K"))) { "${f.tiers}" }
    require(f.tiers.all { it.tier in tiers }) { "${f.tiers}" }
    require(f.tiers.map { it.dtype }.toSet().size == f.tiers.size) { "a type listed twice: ${f.tiers}" }
    println("     features: ${f.pairs.joinToString { "${it.name}=${it.value}" }}")
    println("     tiers: ${f.tiers.joinToString { "${it.dtype}:${it.tier}" }}")
  }

  test("build info: the workspace version, this machine's target, the default features") {
    val b: BuildInfo = buildInfo()
    val cargo = java.io.File("Cargo.toml").readText()
    val version = Regex("\\[workspace\\.package\\][^\\[]*?version = \"([^\"]+)\"").find(cargo)?.groupValues?.get(1)
    require(b.version == version) { "version ${b.version} vs Cargo.toml $version" }
    val arch = mapOf("amd64" to "x86_64", "x86_64" to "x86_64", "aarch64" to "aarch64")[System.getProperty("os.arch")]
    if (arch != null) require(b.target.startsWith("$arch-")) { "$b" }
    if (System.getProperty("os.name") == "Linux") require(b.target.contains("-linux")) { "$b" }
    require("gpu" in b.features) { "$b" }
    require(b.profile == "debug") { "scripts/kotlin-test.sh builds the debug library: $b" }
  }

  test("compute matmul + softmax, by hand") {
    cpuSession().use { s ->
      require(s.device() == "CPU") { s.device() }
      val out = s.compute(MATMUL_SOFTMAX, listOf(xInput()))
      require(out.map { it.name } == listOf("y", "p")) { "$out" }
      require(out[0].dtype == "F32" && out[0].shape == listOf(2uL, 2uL)) { "${out[0]}" }
      assertClose(floatsOf(out[0].data), expectedY)
      assertClose(floatsOf(out[1].data), expectedP)
    }
  }

  test("graph document errors arrive as typed exceptions with messages") {
    cpuSession().use { s ->
      expectError<TesseraException.UnknownOp>("\"y\"", "FROB") {
        s.compute("""{"version":1,"tensors":[{"name":"x","type":"F32","shape":[2]}],
          "nodes":[{"name":"y","op":"FROB","src":["x"]}],"outputs":["y"]}""", emptyList())
      }
      expectError<TesseraException.UnknownType>("F99") {
        s.compute("""{"version":1,"tensors":[{"name":"x","type":"F99","shape":[2]}],"outputs":["x"]}""", emptyList())
      }
      expectError<TesseraException.InvalidGraph>("version") {
        s.compute("""{"version":7,"tensors":[],"outputs":["x"]}""", emptyList())
      }
      expectError<TesseraException.InvalidGraph>("nope") {
        s.compute("""{"version":1,"tensors":[{"name":"x","type":"F32","shape":[2]}],
          "nodes":[{"name":"y","op":"ADD","src":["x","nope"]}],"outputs":["y"]}""", emptyList())
      }
      expectError<TesseraException.ShapeMismatch>("MUL_MAT") {
        s.compute("""{"version":1,"tensors":[{"name":"a","type":"F32","shape":[3,2],"values":[0,0,0,0,0,0]},
          {"name":"b","type":"F32","shape":[4],"values":[0,0,0,0]}],
          "nodes":[{"name":"y","op":"MUL_MAT","src":["a","b"]}],"outputs":["y"]}""", emptyList())
      }
    }
  }

  test("input errors name the input") {
    cpuSession().use { s ->
      expectError<TesseraException.InvalidArgument>("missing", "\"x\"") { s.compute(MATMUL_SOFTMAX, emptyList()) }
      expectError<TesseraException.ShapeMismatch>("\"x\"") {
        s.compute(MATMUL_SOFTMAX, listOf(xInput().copy(shape = listOf(2uL, 3uL))))
      }
      expectError<TesseraException.DataLength>("\"x\"", "24") {
        s.compute(MATMUL_SOFTMAX, listOf(xInput().copy(data = ByteArray(20))))
      }
      expectError<TesseraException.InvalidArgument>("\"x\"", "F16") {
        s.compute(MATMUL_SOFTMAX, listOf(xInput().copy(dtype = "F16", data = ByteArray(12))))
      }
      expectError<TesseraException.InvalidArgument>("\"z\"") {
        s.compute(MATMUL_SOFTMAX, listOf(xInput(), TensorData("z", "F32", listOf(1uL), ByteArray(4))))
      }
    }
  }

  test("bad options: threads and device") {
    expectError<TesseraException.InvalidArgument>("0") { Session(SessionOptions(device = "CPU", threads = 0u)) }
    expectError<TesseraException.InvalidArgument>("100000") { Session(SessionOptions(device = "CPU", threads = 100000u)) }
    expectError<TesseraException.UnknownDevice>("NoSuchDevice") { Session(SessionOptions(device = "NoSuchDevice")) }
    Session(SessionOptions()).use { require(it.device().isNotEmpty()) { "auto chose nothing" } }
  }

  test("computeAsync (suspend) under runBlocking") {
    cpuSession().use { s ->
      val out = runBlocking { s.computeAsync(MATMUL_SOFTMAX, listOf(xInput())) }
      assertClose(floatsOf(out[1].data), expectedP)
      expectError<TesseraException.InvalidGraph> { runBlocking { s.computeAsync("{}", emptyList()) } }
    }
  }

  // How many computes the native side has registered, and finished, so far (its debug log
  // says so).
  fun logged(prefix: String) = synchronized(logs) { logs.count { it.third.startsWith(prefix) } }
  fun registered() = logged("compute on CPU registered")
  fun done() = logged("compute on CPU done")

  // Waits (up to [seconds]) until [count] reaches [n] more than [before].
  fun await(what: String, count: () -> Int, before: Int, n: Int, seconds: Long = 60) {
    val deadline = System.nanoTime() + seconds * 1_000_000_000L
    while (count() < before + n) {
      require(System.nanoTime() < deadline) { "$what: not within $seconds s" }
      Thread.sleep(1)
    }
  }
  fun awaitRegistered(before: Int, n: Int) = await("$n computes registered", ::registered, before, n)

  test("cancel stops a running compute with Cancelled") {
    cpuSession().use { s ->
      val (doc, inputs) = longChain(200)
      runBlocking {
        val job = async { runCatching { s.computeAsync(doc, inputs) } }
        // A cancel before the compute is registered reaches nothing: repeat it until it lands.
        while (!job.isCompleted) {
          s.cancel()
          delay(2)
        }
        val e = job.await().exceptionOrNull()
        require(e is TesseraException.Cancelled) { "expected Cancelled, got $e" }
        require(e!!.message!!.contains("cancel")) { "${e.message}" }
      }
      // The session works again afterwards.
      assertClose(floatsOf(s.compute(MATMUL_SOFTMAX, listOf(xInput()))[0].data), expectedY)
    }
  }

  test("cancelling the coroutine cancels the compute") {
    cpuSession().use { s ->
      // 20000 matmuls of 512^3 would run for hours: closeSession returning proves the cancel.
      val (doc, inputs) = longChain(20_000)
      val (before, doneBefore) = registered() to done()
      runBlocking {
        val job = launch(Dispatchers.Default) { s.computeAsync(doc, inputs) }
        awaitRegistered(before, 1)
        job.cancelAndJoin()
      }
      await("the cancelled compute's end", ::done, doneBefore, 1, seconds = 120)
      s.closeSession()
      require(s.isClosed()) { "not closed" }
      require(synchronized(logs) { logs.any { it.third.contains("dropped before it finished") } }) {
        "no cancel on drop logged"
      }
    }
  }

  test("closeSession waits for work in flight, then calls fail with Closed") {
    val s = cpuSession()
    val (before, doneBefore) = registered() to done()
    runBlocking {
      // Two computes in flight: one running, the other registered and waiting for it.
      val jobs = (0 until 2).map {
        val (doc, inputs) = longChain(8)
        async(Dispatchers.Default) { runCatching { s.computeAsync(doc, inputs) } }
      }
      awaitRegistered(before, 2)
      s.closeSession()
      require(s.isClosed()) { "not closed" }
      // closeSession returned only once both computes were done.
      require(done() == doneBefore + 2) { "${done() - doneBefore} of 2 computes done at close" }
      // Every element of y0 is 512 * 0.001^2, and each step multiplies by 512 * 0.001.
      val want = Math.pow(512.0, 8.0) * 1e-27
      for (job in jobs) {
        val out = job.await().getOrThrow()
        val y = floatsOf(out[0].data)
        require(y.size == 512 * 512) { "${y.size} values" }
        require(y.all { abs(it - want) <= 1e-5 * want }) { "y[0] = ${y[0]}, want $want" }
      }
    }
    expectError<TesseraException.Closed>("closed") { s.compute(MATMUL_SOFTMAX, listOf(xInput())) }
    expectError<TesseraException.Closed> { runBlocking { s.computeAsync(MATMUL_SOFTMAX, listOf(xInput())) } }
    s.closeSession()
    s.cancel()
    s.close() // AutoCloseable: releases the object
  }

  test("callJson: the native protocol") {
    val devicesJson = callJson("""{"method":"devices"}""")
    require(devicesJson.startsWith("{\"ok\":[") && devicesJson.contains("\"type\":\"cpu\"")) { devicesJson }
    val open = callJson("""{"method":"openSession","options":{"device":"CPU","threads":1}}""")
    val id = Regex("\"session\":(\\d+)").find(open)?.groupValues?.get(1) ?: throw AssertionError(open)
    val x = java.util.Base64.getEncoder().encodeToString(floats(1f, 0f, 1f, 2f, 1f, 0f))
    val compute = """{"method":"compute","session":$id,"graph":$MATMUL_SOFTMAX,
      "inputs":[{"name":"x","dtype":"F32","shape":[3,2],"data":"$x"}]}"""
    val ok = callJson(compute)
    require(ok.startsWith("{\"ok\":{\"outputs\":")) { ok }
    val yData = Regex("\"data\":\"([^\"]*)\"").find(ok)!!.groupValues[1]
    assertClose(floatsOf(java.util.Base64.getDecoder().decode(yData)), expectedY)
    require(callJson("""{"method":"closeSession","session":$id}""").contains("\"closed\":true")) { "close" }
    val closed = callJson(compute)
    require(closed.contains("\"kind\":\"Closed\"")) { closed }
    require(callJson("nope").contains("\"kind\":\"InvalidArgument\"")) { "malformed request" }
  }

  test("the log listener receives records") {
    require(logs.any { it.second.startsWith("tessera") && it.third.contains("session on CPU") }) {
      "no session log among ${logs.size} records"
    }
    setLogListener(null)
    setLogLevel(LogLevel.INFO)
  }

  test("a document loaded once (loadGraph) computes three times with only its inputs, then releaseGraph") {
    // W: 3 rows of 4 and b: 3 values, in a GGUF file the document names (version 2); small
    // integers, so that z = W x + b is exact in f32 and equals the f64 product below.
    val k = 4
    val m = 3
    val n = 2
    val w = FloatArray(k * m) { ((it * 7) % 11 - 5).toFloat() }
    val bias = floatArrayOf(0.5f, -1f, 2f)
    val file = java.io.File.createTempFile("tessera-loaded", ".gguf")
    try {
      writeGguf(file, listOf(Triple("w.f32", listOf(k.toLong(), m.toLong()), w), Triple("b.f32", listOf(m.toLong()), bias)))
      val doc = """{"version": 2, "files": [{"name": "m", "path": "${file.absolutePath}"}],
        "tensors": [{"name": "w", "file": "m", "tensor": "w.f32"},
                    {"name": "b", "file": "m", "tensor": "b.f32"},
                    {"name": "x", "type": "F32", "shape": [$k, $n]}],
        "nodes": [{"name": "y", "op": "MUL_MAT", "src": ["w", "x"]}, {"name": "z", "op": "ADD", "src": ["y", "b"]}],
        "outputs": ["z"]}"""
      cpuSession().use { s ->
        val handle = s.loadGraph(doc)
        for (seed in 1..3) {
          val x = FloatArray(k * n) { ((it * seed * 5 + seed) % 9 - 4).toFloat() }
          val out = s.computeLoaded(handle, listOf(TensorData("x", "F32", listOf(k.toULong(), n.toULong()), floats(*x))))
          require(out.size == 1 && out[0].name == "z" && out[0].shape == listOf(m.toULong(), n.toULong())) { "$out" }
          val want = FloatArray(m * n) { i ->
            val (col, row) = i / m to i % m
            ((0 until k).sumOf { w[row * k + it].toDouble() * x[col * k + it].toDouble() } + bias[row]).toFloat()
          }
          val got = floatsOf(out[0].data)
          require(got.contentEquals(want)) { "seed $seed: ${got.toList()} vs ${want.toList()}" }
        }
        expectError<TesseraException.InvalidArgument>("\"x\"") { s.computeLoaded(handle, emptyList()) }
        s.releaseGraph(handle)
        s.releaseGraph(handle) // twice is fine
        expectError<TesseraException.Closed>("released") {
          s.computeLoaded(handle, listOf(TensorData("x", "F32", listOf(k.toULong(), n.toULong()), ByteArray(4 * k * n))))
        }
        expectError<TesseraException.InvalidArgument>("unknown graph handle") { s.releaseGraph(handle + 100uL) }
      }
    } finally {
      file.delete()
    }
  }

  modelTests()

  println("$passed passed, $failed failed")
  exitProcess(if (failed == 0) 0 else 1)
}
