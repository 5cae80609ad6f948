@file:Suppress("unused", "UNUSED_PARAMETER")

package com.facebook.react.module.annotations

@Retention(AnnotationRetention.RUNTIME)
@Target(AnnotationTarget.CLASS)
annotation class ReactModule(val name: String)
