package io.sparkivm

import java.lang.management.ManagementFactory
import java.nio.file.{Files, Paths}
import java.util.concurrent.atomic.AtomicBoolean

import scala.util.control.NonFatal

import com.sun.management.HotSpotDiagnosticMXBean
import org.apache.spark.internal.Logging

/**
 * The driver's side of the class-data archive that `spark_ivm.class_data` gives a JVM it starts
 * (`-XX:SharedArchiveFile`, named by the system property `spark.ivm.classDataArchive`). An
 * archive the JVM could not map (one cut short by a process killed while writing it, say) would
 * otherwise stay in place and cost every later application the JDK's own shared classes as
 * well: it is removed, and the next application writes a new one.
 */
object ClassData extends Logging {
  val ArchiveProperty = "spark.ivm.classDataArchive"
  private val checked = new AtomicBoolean(false)

  /** Whether this JVM maps classes from a shared archive. */
  def sharing: Boolean =
    try {
      ManagementFactory.getPlatformMXBean(classOf[HotSpotDiagnosticMXBean])
        .getVMOption("UseSharedSpaces").getValue.toBoolean
    } catch { case NonFatal(_) => true } // not HotSpot: nothing to say

  /** Removes spark-ivm's archive if this JVM was given it and could not map it (once per JVM). */
  def check(): Unit =
    if (checked.compareAndSet(false, true)) {
      Option(System.getProperty(ArchiveProperty)).filter(_.nonEmpty).foreach { path =>
        if (!sharing) {
          try {
            Files.deleteIfExists(Paths.get(path))
            logInfo(s"spark-ivm: removed the class-data archive $path, which the JVM could not map")
          } catch { case NonFatal(e) => logDebug(s"spark-ivm: could not remove $path", e) }
        }
      }
    }
}
