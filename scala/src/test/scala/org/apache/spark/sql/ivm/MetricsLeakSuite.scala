package org.apache.spark.sql.ivm

import java.lang.ref.WeakReference
import java.nio.file.Files

import org.apache.spark.sql.SparkSession
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * The metrics listeners spark-ivm registers (ReadMetrics on the SparkContext, JoinMetrics on
 * each measured session) keep no session alive: sessions measured and then dropped by their
 * user are garbage, as many as the same sessions unmeasured.
 */
class MetricsLeakSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = {
    // Suites share one JVM: this one needs a session of its own settings.
    SparkSession.getDefaultSession.foreach(_.stop())
    SparkSession.builder()
      .master("local[1]")
      .config("spark.ui.enabled", "false")
      .config("spark.sql.shuffle.partitions", "1")
      // Adaptive execution itself keeps the sessions of recent queries reachable for a while.
      .config("spark.sql.adaptive.enabled", "false")
      .config("spark.sql.warehouse.dir", Files.createTempDirectory("ivm-leak").toString)
      .getOrCreate()
  }

  override def afterAll(): Unit = spark.stop()

  /** How many of `n` sessions that each ran `work` are still reachable after GC. */
  private def reachable(n: Int)(work: SparkSession => Unit): Int = {
    val refs = (1 to n).map { _ =>
      val session = spark.newSession()
      work(session)
      new WeakReference(session)
    }
    SparkSession.setActiveSession(spark)
    (1 to 10).foreach { _ => System.gc(); Thread.sleep(50) }
    refs.count(_.get != null)
  }

  test("sessions measured by the metrics listeners are garbage once dropped") {
    val query = "SELECT id % 7 AS k, count(*) FROM range(1000) GROUP BY id % 7"
    val plain = reachable(10)(s => s.sql(query).collect())
    val read = reachable(10)(s => ReadMetrics.measure(s)(s.sql(query).collect()))
    val joined = reachable(10)(s => JoinMetrics.measure(s)(s.sql(query).collect()))
    assert(read <= plain + 1, s"ReadMetrics: $read of 10 sessions reachable, $plain unmeasured")
    assert(joined <= plain + 1, s"JoinMetrics: $joined of 10 sessions reachable, $plain unmeasured")
    assert(read + joined <= 4, s"$read and $joined of 10 sessions reachable")
  }
}
