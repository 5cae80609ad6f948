package com.tessera.reactnative

import android.content.ContentResolver
import android.net.Uri
import android.os.ParcelFileDescriptor
import android.provider.OpenableColumns
import android.system.Os
import android.system.OsConstants

/**
 * A document of Android's storage access framework (a `content://` URI from a file picker or
 * shared storage), opened read-only through the content resolver for [TesseraBridge]: a regular
 * file is read in place through `/proc/self/fd/N` (the core maps it; the descriptor stays open
 * until the load ends), anything else (a pipe from a cloud provider) is streamed into a copy.
 */
class ResolverContentSource(resolver: ContentResolver, uri: Uri) : ContentSource {
  private val descriptor: ParcelFileDescriptor =
    resolver.openFileDescriptor(uri, "r") ?: throw java.io.FileNotFoundException("$uri: the provider gave no file descriptor")
  private val regular = OsConstants.S_ISREG(Os.fstat(descriptor.fileDescriptor).st_mode)

  override val inPlacePath: String? = if (regular) "/proc/self/fd/${descriptor.fd}" else null
  override val size: Long = if (regular) descriptor.statSize else -1L
  override val displayName: String =
    resolver.query(uri, arrayOf(OpenableColumns.DISPLAY_NAME), null, null, null)?.use { c ->
      if (c.moveToFirst()) c.getString(0) else null
    } ?: (uri.lastPathSegment ?: "document")

  override fun openStream(): java.io.InputStream = java.io.FileInputStream(descriptor.fileDescriptor)

  override fun close() = descriptor.close()
}
