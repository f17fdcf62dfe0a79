package org.apache.spark.sql.ivm

import org.apache.spark.sql.internal.SQLConf

/**
 * Registers spark-ivm's settings with Spark's SQLConf, whose builder is `private[spark]`: then
 * SET checks a value when it is set, `SET -v` documents it (unless it is internal, a tuning knob
 * or a test hook), and a static entry cannot be SET.
 */
object ConfRegistration {
  def register(key: String, doc: String, default: String, static: Boolean, internal: Boolean,
      valid: String => Boolean, expected: String): Unit = synchronized {
    val built = if (static) SQLConf.buildStaticConf(key) else SQLConf.buildConf(key)
    val builder = if (internal) built.internal() else built
    // A second class loader of spark-ivm in one JVM finds the keys registered: keep those.
    try builder.doc(doc).version("0.1.0").stringConf.checkValue(valid, s"spark-ivm: $expected")
        .createWithDefault(default)
    catch { case _: IllegalArgumentException => }
  }
}
