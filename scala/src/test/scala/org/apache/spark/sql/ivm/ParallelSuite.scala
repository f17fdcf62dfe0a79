package org.apache.spark.sql.ivm

import io.sparkivm.TestSpark
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.execution.SQLExecution
import org.scalatest.funsuite.AnyFunSuite

/**
 * Parallel's tasks run with the caller's local properties but never write to them: Spark sets
 * and restores the SQL execution id in a thread's properties in place around every query, and a
 * caller left with a finished execution's id has its later jobs kept by the scheduler forever
 * (the cause of the memory leak across refreshes: each kept job held its broadcast relations).
 */
class ParallelSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("parallel")

  test("a task's changes to its local properties do not reach the caller") {
    val sc = spark.sparkContext
    sc.setLocalProperty("ivm.test.owner", "caller")
    try {
      val seen = Parallel.run(spark,
        Seq(1, 2).map(i =>
          () => {
            val inherited = sc.getLocalProperty("ivm.test.owner")
            sc.setLocalProperty("ivm.test.owner", s"task $i")
            inherited
          }))
      assert(seen == Seq("caller", "caller"), "tasks run with the caller's properties")
      assert(sc.getLocalProperty("ivm.test.owner") == "caller")
    } finally sc.setLocalProperty("ivm.test.owner", null)
  }

  test("queries run side by side leave no execution id behind and no job held by the scheduler") {
    val sc = spark.sparkContext
    (1 to 20).foreach { _ =>
      Parallel.run(spark, Seq(3, 5).map(n => () => spark.range(n).collect().length))
      assert(sc.getLocalProperty(SQLExecution.EXECUTION_ID_KEY) == null)
      sc.parallelize(1 to 4, 2).count()
    }
    // Spark drops an execution's jobs when the execution ends; a job tagged with an execution
    // that had already ended would stay.
    val deadline = System.currentTimeMillis() + 10000
    while (!sc.dagScheduler.activeQueryToJobs.isEmpty && System.currentTimeMillis() < deadline) {
      Thread.sleep(50)
    }
    assert(sc.dagScheduler.activeQueryToJobs.isEmpty,
      s"jobs of ended executions still held: ${sc.dagScheduler.activeQueryToJobs.keySet()}")
  }
}
