// What React Native's codegen generates from src/NativeTessera.ts (as Java; written here in
// Kotlin with the same members).
@file:Suppress("unused", "UNUSED_PARAMETER")

package com.tessera.reactnative

import com.facebook.react.bridge.Promise
import com.facebook.react.bridge.ReactApplicationContext
import com.facebook.react.bridge.ReactContextBaseJavaModule

abstract class NativeTesseraSpec(reactContext: ReactApplicationContext) : ReactContextBaseJavaModule(reactContext) {
  abstract fun call(requestJson: String, promise: Promise)
  abstract fun toggleNativeLog(enabled: Boolean)
  abstract fun addListener(eventName: String)
  abstract fun removeListeners(count: Double)
}
