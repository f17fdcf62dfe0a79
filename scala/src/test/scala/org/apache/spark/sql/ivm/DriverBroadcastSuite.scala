package org.apache.spark.sql.ivm

import java.util.concurrent.atomic.AtomicInteger

import io.sparkivm.TestSpark
import org.apache.spark.scheduler.{SparkListener, SparkListenerJobStart}
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.execution.exchange.BroadcastExchangeExec
import org.apache.spark.sql.functions.broadcast
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * DriverBroadcast: without adaptive execution, the broadcast exchange of a local scan, or of a
 * plan over file scans of at most `maxBytes`, becomes a [[DriverBroadcastExec]] whose join gives
 * the rows the exchange's gives, built without a Spark job; larger scans and adaptive plans keep
 * their exchange; [[DriverBroadcast.computeOnDriver]] gives an RDD's rows as `collect` does.
 */
class DriverBroadcastSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("driver-broadcast")

  private def withConf[T](kv: (String, String)*)(body: => T): T = TestSpark.withConf(spark, kv: _*)(body)

  /** Jobs started while `body` ran. */
  private def jobs[T](body: => T): (T, Int) = {
    val n = new AtomicInteger
    val l = new SparkListener { override def onJobStart(e: SparkListenerJobStart): Unit = n.incrementAndGet() }
    val sc = spark.sparkContext
    sc.listenerBus.waitUntilEmpty()
    sc.addSparkListener(l)
    try {
      val out = body
      sc.listenerBus.waitUntilEmpty()
      (out, n.get)
    } finally sc.removeSparkListener(l)
  }

  private def ruled(df: DataFrame, maxBytes: Long): SparkPlan =
    new DriverBroadcast(_ => maxBytes).apply(df.queryExecution.executedPlan)
  private def driverBroadcasts(p: SparkPlan) = p.collect { case l: DriverBroadcastExec => l }
  private def exchanges(p: SparkPlan) = p.collect { case e: BroadcastExchangeExec => e }
  private def rows(p: SparkPlan): Set[Row] = {
    val toRow = org.apache.spark.sql.catalyst.CatalystTypeConverters.createToScalaConverter(p.schema)
    p.executeCollect().map(r => toRow(r).asInstanceOf[Row]).toSet
  }

  test("a local scan's broadcast is built on the driver and joins as the exchange does") {
    withConf("spark.sql.adaptive.enabled" -> "false") {
      import spark.implicits._
      val big = spark.range(0, 20).selectExpr("id AS k", "id * 10 AS v").repartition(2)
      val small = Seq((1L, "a"), (5L, "b"), (7L, "c"), (99L, "d")).toDF("k", "tag")
      val joined = big.join(broadcast(small), "k")
      val plan = ruled(joined, 0L)
      assert(driverBroadcasts(plan).size == 1 && exchanges(plan).isEmpty, plan)
      assert(rows(plan) == joined.collect().toSet)
      // The broadcast itself runs no job.
      val (_, n) = jobs(driverBroadcasts(ruled(joined, 0L)).head.executeBroadcast[Any]().value)
      assert(n == 0)
    }
  }

  test("file scans are broadcast from the driver up to maxBytes, and keep their exchange above it") {
    // As the rule sees plans: before whole-stage code generation (it runs before columnar transitions).
    withConf("spark.sql.adaptive.enabled" -> "false", "spark.sql.parquet.enableVectorizedReader" -> "false",
      "spark.sql.codegen.wholeStage" -> "false") {
      val dir = java.nio.file.Files.createTempDirectory("lb-files").resolve("t").toString
      spark.range(0, 6).selectExpr("id AS k", "cast(id AS string) AS s").write.parquet(dir)
      val small = spark.read.parquet(dir).where("k > 1")
      val big = spark.range(0, 10).selectExpr("id AS k")
      val joined = big.join(broadcast(small), "k")
      val under = ruled(joined, 1L << 20)
      assert(driverBroadcasts(under).size == 1 && exchanges(under).isEmpty, under)
      assert(rows(under) == joined.collect().toSet)
      val over = ruled(joined, 10L)
      assert(driverBroadcasts(over).isEmpty && exchanges(over).size == 1, over)
    }
  }

  test("adaptive plans are left as they are") {
    withConf("spark.sql.adaptive.enabled" -> "true") {
      import spark.implicits._
      val joined = spark.range(0, 5).toDF("k").join(broadcast(Seq(1L, 2L).toDF("k")), "k")
      val before = joined.queryExecution.executedPlan
      assert(new DriverBroadcast(_ => Long.MaxValue).apply(before) eq before)
    }
  }

  test("computeOnDriver gives an RDD's rows, partition by partition, without a job") {
    val df = spark.range(0, 50, 1, 4).selectExpr("id", "id % 3 AS m")
    val rdd = df.queryExecution.toRdd
    val (computed, n) = jobs(DriverBroadcast.computeOnDriver(rdd))
    assert(n == 0)
    assert(computed.map(r => (r.getLong(0), r.getLong(1))).toSeq == (0L until 50L).map(i => (i, i % 3)))
    assert(org.apache.spark.TaskContext.get() == null)
  }
}
