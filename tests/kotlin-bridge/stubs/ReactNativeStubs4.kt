@file:Suppress("unused", "UNUSED_PARAMETER")

package com.facebook.react.module.model

class ReactModuleInfo(
  name: String,
  className: String,
  canOverrideExistingModule: Boolean,
  needsEagerInit: Boolean,
  isCxxModule: Boolean,
  isTurboModule: Boolean,
)

fun interface ReactModuleInfoProvider {
  fun getReactModuleInfos(): Map<String, ReactModuleInfo>
}
