// The bridge over the real generated bindings with no libtessera_ffi to load (the JVM is started
// with jna.library.path on an empty folder): JNA's failure must reach JavaScript as one clear
// NativeLibrary error naming the library and the ABI, on every call. Run by
// scripts/kotlin-bridge-test.sh.

import com.tessera.callJson
import com.tessera.closeAllSessions
import com.tessera.reactnative.TesseraBridge
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicReference

fun main() {
  var passed = 0
  var failed = 0
  val bridge = TesseraBridge(native = { callJson(it) }, closeAll = { closeAllSessions() }, abi = { "x86_64" })
  val answers = (1..2).map {
    val latch = CountDownLatch(1)
    val result = AtomicReference<String>()
    bridge.call("{\"method\":\"devices\"}", { r -> result.set(r); latch.countDown() }, { c, m -> result.set("rejected $c $m"); latch.countDown() })
    latch.await(30, TimeUnit.SECONDS)
    result.get() ?: "no answer"
  }
  val prefix = "{\"error\":{\"kind\":\"NativeLibrary\",\"message\":\"react-native-tessera: could not load libtessera_ffi.so for ABI x86_64 ("
  for ((i, r) in answers.withIndex()) {
    if (r.startsWith(prefix) && r.contains("tessera_ffi") && r.endsWith("android/src/main/jniLibs/x86_64/libtessera_ffi.so\"}}")) {
      passed++
      println("ok   missing library: call ${i + 1} gets the NativeLibrary error")
    } else {
      failed++
      println("FAIL missing library: call ${i + 1}: $r")
    }
  }
  if (answers[0] == answers[1]) {
    passed++
    println("ok   missing library: the second call repeats the first failure's cause")
  } else {
    failed++
    println("FAIL missing library: the answers differ: ${answers[1]}")
  }
  bridge.shutdown()
  println("$passed passed, $failed failed")
  if (failed > 0) kotlin.system.exitProcess(1)
}
