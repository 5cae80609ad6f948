// The parts of the Android SDK that ContentDocuments.kt uses (type-checking only).
@file:Suppress("unused", "UNUSED_PARAMETER")

package android.content

open class ContentResolver {
  fun openFileDescriptor(uri: android.net.Uri, mode: String): android.os.ParcelFileDescriptor? = null
  fun query(uri: android.net.Uri, projection: Array<String>?, selection: String?, args: Array<String>?, sort: String?): android.database.Cursor? = null
}
