// The language model through the generated Kotlin bindings, on Gemma 3 270M Q4_K_M
// ($TESSERA_GEMMA_GGUF; scripts/kotlin-test.sh defaults it to target/models/): load with
// progress, info, tokenize and a greedy stream equal to llama.cpp's ids (llama-cpp-python 0.3.36
// on the same file: what the Rust tests compare with too), cancel from another thread, close
// during a generation, errors as TesseraException subclasses, and the JSON protocol's events
// through setEventListener (what the Android module forwards to JavaScript).

import com.tessera.ChatTurn
import com.tessera.EventListener
import com.tessera.GenerateRequest
import com.tessera.GeneratedToken
import com.tessera.LoadProgress
import com.tessera.Model
import com.tessera.ModelOptions
import com.tessera.ResponseFormat
import com.tessera.TesseraException
import com.tessera.TokenListener
import com.tessera.callJson
import com.tessera.setEventListener
import java.io.File
import java.util.Collections
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import kotlin.concurrent.thread

/** llama.cpp's ids of "The capital of France is" (BOS first). */
private val PROMPT_IDS = listOf(2, 818, 5279, 529, 7001, 563).map { it.toUInt() }

/** llama.cpp's greedy continuation: " the capital of the country of France." */
private val GREEDY_IDS = listOf(506, 5279, 529, 506, 2891, 529, 7001, 236761).map { it.toUInt() }

private fun gemmaPath(): String {
  val path = System.getenv("TESSERA_GEMMA_GGUF") ?: "target/models/gemma3-270m-q4_k_m.gguf"
  require(File(path).isFile) { "$path not found: set TESSERA_GEMMA_GGUF to the Gemma 3 270M Q4_K_M file (scripts/setup.sh)" }
  return path
}

private fun greedy(prompt: String, maxTokens: Int) =
  GenerateRequest(prompt = prompt, maxTokens = maxTokens.toUInt(), temperature = 0f)

/** Collects the streamed tokens; counts down `arrived` at each. */
private class Collect(private val arrived: CountDownLatch? = null) : TokenListener {
  val tokens: MutableList<Pair<UInt, String>> = Collections.synchronizedList(mutableListOf())

  val chunks: MutableList<com.tessera.StreamChunk> = Collections.synchronizedList(mutableListOf())

  override fun onToken(token: GeneratedToken): Boolean {
    tokens.add(token.token to token.text)
    chunks.addAll(token.chunks)
    arrived?.countDown()
    return true
  }
}

internal fun modelTests() {
  val path = try {
    gemmaPath()
  } catch (e: AssertionError) {
    test("the Gemma file is there") { throw e }
    return
  }
  val options = ModelOptions(device = "CPU", threads = 2u, nCtx = 512u)
  val progress = Collections.synchronizedList(mutableListOf<Float>())
  lateinit var model: Model

  test("Model.load reports progress up to 1 and the model's info") {
    model =
      Model.load(
        path,
        options,
        object : LoadProgress {
          override fun onProgress(fraction: Float): Boolean {
            progress.add(fraction)
            return true
          }
        },
      )
    require(progress.size > 2 && progress.zipWithNext().all { (a, b) -> a <= b } && progress.last() == 1f) { "$progress" }
    val info = model.info()
    require(info.architecture == "gemma3" && info.quantization == "Q4_K_M") { "$info" }
    require(info.nVocab == 262144u && info.nEmbd == 640u && info.nLayer == 18u && info.nCtx == 512u) { "$info" }
    require(info.nParams == 268098176uL && info.hasChatTemplate) { "$info" }
  }

  test("tokenize gives llama.cpp's ids; detokenize") {
    val ids = model.tokenize("The capital of France is", addSpecial = true, parseSpecial = true)
    require(ids == PROMPT_IDS) { "$ids" }
    require(model.detokenize(listOf(818u, 5279u), special = false) == "The capital") { "detokenize" }
  }

  test("a greedy generation streams llama.cpp's tokens") {
    val seen = Collect()
    val r = model.generate(greedy("The capital of France is", 8), seen)
    require(r.tokens == GREEDY_IDS) { "${r.tokens}" }
    require(seen.tokens.map { it.first } == r.tokens) { "streamed ${seen.tokens}" }
    require(seen.tokens.joinToString("") { it.second } == r.text) { "texts ${seen.tokens} vs ${r.text}" }
    require(r.text == " the capital of the country of France.") { r.text }
    require(r.stopReason == "length" && r.promptTokens == 6u) { "${r.stopReason} ${r.promptTokens}" }
    require(r.timings.predictedN == 8u && r.timings.predictedPerSecond > 0.0) { "${r.timings}" }
  }

  test("a listener returning false stops the generation after that token") {
    val seen = mutableListOf<UInt>()
    val r =
      model.generate(
        greedy("The capital of France is", 50),
        object : TokenListener {
          override fun onToken(token: GeneratedToken): Boolean {
            seen.add(token.token)
            return seen.size < 3
          }
        },
      )
    require(r.stopReason == "cancelled" && r.tokens == GREEDY_IDS.take(3) && seen == r.tokens) { "${r.stopReason} ${r.tokens}" }
  }

  test("cancel from another thread stops a running generation") {
    val arrived = CountDownLatch(3)
    val seen = Collect(arrived)
    var result: com.tessera.GenerateResult? = null
    val worker = thread { result = model.generate(greedy("Once upon a time", 200), seen) }
    require(arrived.await(120, TimeUnit.SECONDS)) { "no tokens arrived" }
    model.cancel()
    worker.join()
    val r = result ?: throw AssertionError("no result")
    require(r.stopReason == "cancelled" && r.tokens.size in 3 until 200) { "${r.stopReason} after ${r.tokens.size}" }
    require(seen.tokens.map { it.first } == r.tokens) { "streamed ${seen.tokens.size}, result ${r.tokens.size}" }
    // The model goes on: the next generation is the greedy one again.
    require(model.generate(greedy("The capital of France is", 3), null).tokens == GREEDY_IDS.take(3)) { "after cancel" }
  }

  test("a JSON-schema constrained chat answer parses as the schema says; its text chunks are the content") {
    val schema = """{"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "confidence": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["answer", "confidence"], "additionalProperties": false}"""
    val seen = Collect()
    val r =
      model.generate(
        GenerateRequest(
          messages = listOf(ChatTurn(role = "user", content = "Is water wet? Answer as JSON.")),
          responseFormat = ResponseFormat.JsonSchema(schema),
          temperature = 1f,
          seed = 5uL,
          maxTokens = 40u,
        ),
        seen,
      )
    // Checked by hand (no JSON library on the test's classpath): the compact layout the
    // constraint writes, an enum value and a digit.
    val shape = Regex("""\{"answer": "(yes|no)", "confidence": [0-9]\}""")
    require(r.stopReason == "eog" && shape.matches(r.text)) { "${r.stopReason}: ${r.text}" }
    require(seen.chunks.filter { it.kind == "text" }.joinToString("") { it.delta } == r.content) { "${seen.chunks} vs ${r.content}" }
  }

  test("a malformed schema or grammar is InvalidArgument naming the problem, before any token") {
    val seen = Collect()
    expectError<TesseraException.InvalidArgument>("JSON schema") {
      model.generate(GenerateRequest(prompt = "a", responseFormat = ResponseFormat.JsonSchema("""{"type": "nope"}""")), seen)
    }
    expectError<TesseraException.InvalidArgument>("grammar") {
      model.generate(GenerateRequest(prompt = "a", grammar = "root ::= undefined-rule"), seen)
    }
    require(seen.tokens.isEmpty()) { "tokens before the error: ${seen.tokens}" }
  }

  test("rerank: a reranker's scores sorted, normalize is their logistic; a decoder model is refused") {
    val rerankerPath = File(File(path).parentFile, "tiny-bert-rerank.gguf").path
    val reranker = Model.load(rerankerPath, ModelOptions(device = "CPU", threads = 1u), null)
    try {
      val docs = listOf("Paris is the capital and largest city of France.", "The cat sat on the mat.", "France borders Spain.")
      val raw = reranker.rerank("What is the capital of France?", docs, normalize = false)
      require(raw.map { it.index.toInt() }.sorted() == listOf(0, 1, 2)) { "$raw" }
      require(raw.zipWithNext().all { (a, b) -> a.score >= b.score }) { "not sorted: $raw" }
      val norm = reranker.rerank("What is the capital of France?", docs, normalize = true)
      for (n in norm) {
        val s = raw.first { it.index == n.index }.score
        require(kotlin.math.abs(n.score - 1f / (1f + kotlin.math.exp(-s))) < 1e-5f) { "$n vs $s" }
      }
    } finally {
      reranker.closeModel()
    }
    expectError<TesseraException.InvalidArgument>("not a reranker") { model.rerank("q", listOf("d"), false) }
  }

  test("embed gives unit vectors of 640 values") {
    val e = model.embed(listOf("hello world", "bonjour"), null)
    require(e.size == 2 && e.all { it.size == 640 }) { "${e.map { it.size }}" }
    for (v in e) {
      val norm = kotlin.math.sqrt(v.sumOf { (it * it).toDouble() })
      require(kotlin.math.abs(norm - 1.0) < 1e-4) { "norm $norm" }
    }
  }

  test("bad requests and files are TesseraException subclasses naming the problem") {
    expectError<TesseraException.InvalidArgument>("topP") {
      model.generate(GenerateRequest(prompt = "a", topP = 2f), null)
    }
    expectError<TesseraException.InvalidArgument>("exactly one of prompt and messages") {
      model.generate(GenerateRequest(), null)
    }
    expectError<TesseraException.InvalidModel>("/nonexistent/model.gguf") {
      Model.load("/nonexistent/model.gguf", options, null)
    }
  }

  test("closeModel during a generation waits for it (it ends cancelled); later calls throw Closed") {
    val other = Model.load(path, ModelOptions(device = "CPU", threads = 1u, nCtx = 256u), null)
    val arrived = CountDownLatch(2)
    val seen = Collect(arrived)
    var result: com.tessera.GenerateResult? = null
    val worker = thread { result = other.generate(greedy("Once upon a time", 200), seen) }
    require(arrived.await(120, TimeUnit.SECONDS)) { "no tokens arrived" }
    other.closeModel()
    // closeModel returned after the generation ended: its result is there (or about to be).
    worker.join(60_000)
    val r = result ?: throw AssertionError("no result")
    require(r.stopReason == "cancelled" && r.tokens.size < 200) { "${r.stopReason} after ${r.tokens.size}" }
    require(other.isClosed()) { "isClosed" }
    expectError<TesseraException.Closed>("closed") { other.generate(greedy("x", 1), null) }
    expectError<TesseraException.Closed>("closed") { other.tokenize("x", true, true) }
    other.closeModel() // twice is fine
    other.close() // and the Kotlin object frees its handle
  }

  test("the JSON protocol's model methods emit progress and token events to setEventListener") {
    val events = Collections.synchronizedList(mutableListOf<String>())
    setEventListener(
      object : EventListener {
        override fun onEvent(eventJson: String) {
          events.add(eventJson)
        }
      }
    )
    try {
      val loaded = callJson("""{"method":"loadModel","path":${jsonString(path)},"requestId":"k-1","options":{"device":"CPU","threads":2,"nCtx":256}}""")
      val id = Regex(""""model":(\d+)""").find(loaded)?.groupValues?.get(1) ?: throw AssertionError(loaded)
      require(events.any { it.contains("\"type\":\"loadProgress\"") && it.contains("\"requestId\":\"k-1\"") }) { "no progress in $events" }
      require(events.last().contains("\"progress\":1.0")) { events.last() }
      events.clear()
      val generated = callJson("""{"method":"generate","model":$id,"requestId":"k-2","params":{"prompt":"The capital of France is","temperature":0,"maxTokens":3}}""")
      require(generated.contains("\"tokens\":[506,5279,529]")) { generated }
      val tokens = events.map { Regex(""""token":(\d+)""").find(it)?.groupValues?.get(1) }
      require(tokens == listOf("506", "5279", "529") && events.all { it.contains("\"requestId\":\"k-2\"") }) { "$events" }
      require(callJson("""{"method":"releaseModel","model":$id}""").contains("\"released\":true")) { "release" }
    } finally {
      setEventListener(null)
    }
  }

  model.closeModel()
  model.close()
}

private fun jsonString(s: String): String = "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\""
