@file:Suppress("unused", "UNUSED_PARAMETER")

package android.system

class StructStat(@JvmField val st_mode: Int)

object Os {
  @JvmStatic fun fstat(fd: java.io.FileDescriptor): StructStat = StructStat(0)
}

object OsConstants {
  @JvmStatic fun S_ISREG(mode: Int): Boolean = false
}
