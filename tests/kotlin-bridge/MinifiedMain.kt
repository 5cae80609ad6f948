// The app side of scripts/minify-test.sh: the bridge over the generated bindings and the real
// library, as a minified (shrunk and obfuscated) release build runs it. Prints the responses of
// a `devices` and a `compute` request, one per line.

import com.tessera.callJson
import com.tessera.closeAllSessions
import com.tessera.reactnative.TesseraBridge

fun main() {
  val bridge = TesseraBridge(native = { callJson(it) }, closeAll = { closeAllSessions() })
  val graph =
    "{\"version\":1,\"tensors\":[{\"name\":\"a\",\"type\":\"F32\",\"shape\":[2],\"values\":[1.5,-2]}]," +
      "\"nodes\":[{\"name\":\"b\",\"op\":\"SCALE\",\"src\":[\"a\"],\"params\":{\"scale\":-1}}],\"outputs\":[\"b\"]}"
  println(bridge.callNow("{\"method\":\"devices\"}"))
  println(bridge.callNow("{\"method\":\"compute\",\"graph\":$graph,\"options\":{\"device\":\"CPU\"}}"))
  bridge.shutdown()
}
