package com.tessera.reactnative

import android.os.Build
import com.facebook.react.bridge.Arguments
import com.facebook.react.bridge.Promise
import com.facebook.react.bridge.ReactApplicationContext
import com.facebook.react.module.annotations.ReactModule
import com.facebook.react.modules.core.DeviceEventManagerModule
import com.tessera.EventListener
import com.tessera.LogLevel
import com.tessera.LogListener
import com.tessera.callJson
import com.tessera.closeAllSessions
import com.tessera.setEventListener
import com.tessera.setLogListener

/**
 * The Tessera TurboModule: converts between React Native's types and the generated uniffi
 * bindings (package `com.tessera`, from rust/ffi), and nothing else. [TesseraBridge] moves
 * the work off the JS thread.
 */
@ReactModule(name = TesseraModule.NAME)
class TesseraModule(reactContext: ReactApplicationContext) : NativeTesseraSpec(reactContext) {
  private val bridge =
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
      abi = { Build.SUPPORTED_ABIS.firstOrNull() ?: "unknown" },
      installEventSink = { sink ->
        setEventListener(
          sink?.let {
            object : EventListener {
              override fun onEvent(eventJson: String) = it(eventJson)
            }
          }
        )
      },
      emitEvent = ::emitEvent,
      modelsDirectory = { java.io.File(reactContext.filesDir, "tessera/models").absolutePath },
      openContent = { uri -> ResolverContentSource(reactContext.contentResolver, android.net.Uri.parse(uri)) },
      contentCopies = { java.io.File(reactContext.filesDir, "tessera/imports") },
    )

  override fun getName(): String = NAME

  override fun call(requestJson: String, promise: Promise) {
    bridge.call(requestJson, { promise.resolve(it) }, { code, message -> promise.reject(code, message) })
  }

  override fun toggleNativeLog(enabled: Boolean) {
    bridge.setLogForwarding(enabled, ::emitLog)
  }

  // Required by NativeEventEmitter; the subscriptions live in JavaScript.
  override fun addListener(eventName: String) {}

  override fun removeListeners(count: Double) {}

  // A JS reload or the React instance torn down: stop, and free every native session.
  override fun invalidate() {
    bridge.shutdown()
    super.invalidate()
  }

  private fun emitLog(level: String, target: String, message: String) {
    val context = reactApplicationContext
    if (!context.hasActiveReactInstance()) return
    val event =
      Arguments.createMap().apply {
        putString("level", level)
        putString("target", target)
        putString("message", message)
      }
    context.getJSModule(DeviceEventManagerModule.RCTDeviceEventEmitter::class.java).emit(EVENT, event)
  }

  // Protocol events (loading progress, tokens) as { json: <the event's JSON text> }.
  private fun emitEvent(json: String) {
    val context = reactApplicationContext
    if (!context.hasActiveReactInstance()) return
    val event = Arguments.createMap().apply { putString("json", json) }
    context.getJSModule(DeviceEventManagerModule.RCTDeviceEventEmitter::class.java).emit(PROTOCOL_EVENT, event)
  }

  companion object {
    /** The module's name in JavaScript (`TurboModuleRegistry.get('Tessera')`). */
    const val NAME = "Tessera"

    /** The event that carries log records. */
    const val EVENT = "TesseraLog"

    /** The event that carries protocol events (docs/native-protocol.md). */
    const val PROTOCOL_EVENT = "TesseraEvent"
  }
}
