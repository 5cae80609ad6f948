// The part of the Android SDK that TesseraModule uses (type-checking only).
@file:Suppress("unused")

package android.os

object Build {
  @JvmField val SUPPORTED_ABIS: Array<String> = arrayOf("x86_64")
}

class ParcelFileDescriptor : java.io.Closeable {
  val fileDescriptor: java.io.FileDescriptor = java.io.FileDescriptor()
  val fd: Int = -1
  val statSize: Long = -1
  override fun close() {}
}
