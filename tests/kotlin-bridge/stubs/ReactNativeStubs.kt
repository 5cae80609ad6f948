// Minimal stand-ins for the React Native Android API and the codegen output that
// TesseraModule / TesseraPackage use, with the same signatures, so that scripts/kotlin-bridge-test.sh
// can type-check those files on a plain JVM. Never shipped, never run.
@file:Suppress("unused", "UNUSED_PARAMETER")

package com.facebook.react.bridge

interface Promise {
  fun resolve(value: Any?)
  fun reject(code: String, message: String?)
}

interface NativeModule {
  fun getName(): String
  fun invalidate()
}

interface WritableMap {
  fun putString(key: String, value: String?)
}

object Arguments {
  @JvmStatic fun createMap(): WritableMap = object : WritableMap {
    override fun putString(key: String, value: String?) {}
  }
}

interface JavaScriptModule

open class ReactContext {
  /** Android's `Context.getFilesDir()`. */
  val filesDir: java.io.File
    get() = java.io.File(".")
  /** Android's `Context.getContentResolver()`. */
  val contentResolver: android.content.ContentResolver
    get() = android.content.ContentResolver()
  fun hasActiveReactInstance(): Boolean = false
  fun <T : JavaScriptModule> getJSModule(jsInterface: Class<T>): T = throw UnsupportedOperationException()
}

open class ReactApplicationContext : ReactContext()

abstract class ReactContextBaseJavaModule(private val context: ReactApplicationContext) : NativeModule {
  protected val reactApplicationContext: ReactApplicationContext
    get() = context
  override fun invalidate() {}
}
