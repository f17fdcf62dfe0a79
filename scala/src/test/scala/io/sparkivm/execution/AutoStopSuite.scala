package io.sparkivm.execution

import io.sparkivm.TestSpark
import org.apache.spark.sql.SparkSession
import org.scalatest.funsuite.AnyFunSuite

/** The time AUTO gives an incremental attempt: a running job is cancelled when it runs out, a
 * step does not start after, and work that ends in time is untouched. */
class AutoStopSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("auto-stop")

  test("a job still running when the time runs out is cancelled, and the work stops") {
    val sc = spark.sparkContext
    val stop = new AutoStop(sc, 300, "test-running")
    val started = System.nanoTime()
    val stopped = intercept[AutoStop.Stopped] {
      stop.guard(sc.parallelize(1 to 4, 2).map { i => Thread.sleep(60000); i }.collect())
    }
    val tookMs = (System.nanoTime() - started) / 1000000
    assert(stopped.elapsedMs >= 300 && tookMs < 30000, s"stopped after ${stopped.elapsedMs} ms, $tookMs ms in all")
    assert(stop.stopped)
    // The tag is gone with the guard: later jobs of the thread are not cancelled, and they run at
    // once: the cancelled tasks were interrupted, not left sleeping in both of the cores.
    assert(!sc.getJobTags().exists(_.startsWith("spark-ivm-stop:")))
    assert(sc.getLocalProperty("spark.job.interruptOnCancel") == null)
    assert(sc.parallelize(1 to 3).count() == 3)
    assert((System.nanoTime() - started) / 1000000 < 30000)
  }

  test("a step does not start once the time ran out; work done in time is untouched") {
    val late = new AutoStop(spark.sparkContext, 50, "test-check")
    intercept[AutoStop.Stopped] {
      late.guard {
        Thread.sleep(500)
        late.check()
        fail("the step started")
      }
    }
    val inTime = new AutoStop(spark.sparkContext, 60000, "test-in-time")
    assert(inTime.guard(spark.range(10).count()) == 10)
    assert(!inTime.stopped)
    inTime.check() // disarmed: never throws after the guard
    assert(AutoStop.guard(None)(42) == 42)
  }
}
