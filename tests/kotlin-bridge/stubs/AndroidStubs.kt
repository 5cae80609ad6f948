// The part of the Android SDK that TesseraModule uses (type-checking only).
@file:Suppress("unused")

package android.os

object Build {
  @JvmField val SUPPORTED_ABIS: Array<String> = arrayOf("x86_64")
}
