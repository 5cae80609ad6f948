@file:Suppress("unused", "UNUSED_PARAMETER")

package android.database

interface Cursor : java.io.Closeable {
  fun moveToFirst(): Boolean
  fun getString(column: Int): String?
}
