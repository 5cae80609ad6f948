@file:Suppress("unused", "UNUSED_PARAMETER")

package com.facebook.react.modules.core

import com.facebook.react.bridge.JavaScriptModule

class DeviceEventManagerModule {
  interface RCTDeviceEventEmitter : JavaScriptModule {
    fun emit(eventName: String, data: Any?)
  }
}
