package io.sparkivm.execution

import java.util.concurrent.ConcurrentLinkedQueue

import scala.jdk.CollectionConverters._

import io.sparkivm.TestSpark
import io.sparkivm.commands.{CreateMaterializedView, ViewLifecycle}
import io.sparkivm.parser.IvmStatementParser
import org.apache.spark.scheduler.{SparkListener, SparkListenerJobStart}
import org.apache.spark.sql.SparkSession
import org.scalatest.funsuite.AnyFunSuite

/**
 * Every Spark job a refresh runs carries the view's tag and a description naming the view and
 * the phase (what the Spark UI lists in place of a call site); the thread's own description and
 * tags are as they were once the refresh ends.
 */
class RefreshProgressSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("job-labels")

  test("a refresh's jobs are tagged with its view and described by its phase") {
    spark.sql("CREATE TABLE jl_base (k INT, v INT) USING delta")
    spark.sql("INSERT INTO jl_base VALUES (1, 10), (2, 20)")
    val create = IvmStatementParser.recognise("CREATE MATERIALIZED VIEW jl_mv REFRESH POLICY INCREMENTAL AS " +
      "SELECT k, sum(v) AS s FROM jl_base GROUP BY k").get.asInstanceOf[CreateMaterializedView]
    ViewLifecycle.create(spark, create)
    spark.sql("INSERT INTO jl_base VALUES (1, 5), (3, 30)")

    val jobs = new ConcurrentLinkedQueue[(Set[String], String)]()
    val listener = new SparkListener {
      override def onJobStart(e: SparkListenerJobStart): Unit = {
        val tags = Option(e.properties.getProperty("spark.job.tags")).toSeq.flatMap(_.split(',')).toSet
        jobs.add(tags -> e.properties.getProperty("spark.job.description"))
      }
    }
    val sc = spark.sparkContext
    sc.setJobDescription("the user's own")
    sc.addJobTag("users-tag")
    sc.addSparkListener(listener)
    // The backing rows read by a job (a table this small is otherwise read on the driver).
    spark.conf.set("spark.ivm.heldTables.maxRows", "0")
    val report =
      try RefreshPipeline.refresh(spark, Seq("jl_mv"), full = false)
      finally {
        sc.removeSparkListener(listener)
        spark.conf.unset("spark.ivm.heldTables.maxRows")
      }
    assert(report.mode == "incremental", report)

    val tag = RefreshProgress.tag("spark_catalog.default.jl_mv")
    val ours = jobs.asScala.toSeq.filter(_._1.contains(tag))
    assert(report.sparkJobs > 0 && ours.size == report.sparkJobs, jobs)
    assert(ours.forall(_._1.contains("users-tag")), ours)
    val phases = ours.map(_._2).distinct
    val prefix = "REFRESH MATERIALIZED VIEW `spark_catalog`.`default`.`jl_mv`: "
    assert(phases.nonEmpty && phases.forall(_.startsWith(prefix)), phases)
    val known = Set("finding the base tables' changes", "reading the changes", "computing the changed rows",
      "moving the view's state", "applying the changed rows in one commit", "verifying the committed rows")
    assert(phases.map(_.stripPrefix(prefix)).toSet.subsetOf(known), phases)
    assert(sc.getLocalProperty("spark.job.description") == "the user's own")
    assert(sc.getJobTags() == Set("users-tag"))
    sc.removeJobTag("users-tag")
    sc.setJobDescription(null)
  }

  test("a long refresh says on the console which view and phase it is at, where progress is shown") {
    val out = new java.io.ByteArrayOutputStream
    val console = new java.io.PrintStream(out, true)
    def run(progress: String): Seq[String] = {
      out.reset()
      spark.conf.set("spark.ivm.refresh.progress", progress)
      spark.conf.set("spark.ivm.refresh.progressIntervalMs", "100")
      try RefreshProgress.during(spark, "spark_catalog.default.slow", console) {
          RefreshProgress.phase(spark, "`spark_catalog`.`default`.`slow`", "reading the changes")
          Thread.sleep(700)
          RefreshProgress.phase(spark, "`spark_catalog`.`default`.`slow`", "computing the changed rows")
          Thread.sleep(700)
        }
      finally {
        spark.conf.unset("spark.ivm.refresh.progress")
        spark.conf.unset("spark.ivm.refresh.progressIntervalMs")
      }
      Thread.sleep(400) // nothing more once the refresh is over
      out.toString.linesIterator.toSeq
    }
    val lines = run("on")
    assert(lines.exists(_.startsWith(
          "spark-ivm: REFRESH MATERIALIZED VIEW spark_catalog.default.slow: reading the changes (")), lines)
    assert(lines.exists(_.contains(": computing the changed rows (1 s)")), lines)
    assert(lines.size <= 14, lines)
    // auto: only where Spark's console progress bar is on, which it is not in this session
    assert(run("auto").isEmpty && run("off").isEmpty)
  }

  test("tags hold no commas and compare names as the catalog does") {
    assert(RefreshProgress.tag("spark_catalog.DB.a,b") == "spark-ivm-refresh:spark_catalog.db.a_b")
  }
}
