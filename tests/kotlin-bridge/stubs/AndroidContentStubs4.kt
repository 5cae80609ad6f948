@file:Suppress("unused", "UNUSED_PARAMETER")

package android.provider

object OpenableColumns {
  const val DISPLAY_NAME = "_display_name"
}
