package io.sparkivm.execution

import org.apache.spark.sql.SparkSession

/**
 * Named points in CREATE and REFRESH where a test can kill the JVM, to check that a refresh
 * killed anywhere leaves a readable view that the next refresh makes exact. Set
 * `spark.ivm.testing.killAt` to a point's name; unset (the default) it costs one conf lookup.
 */
object FaultInjection {
  val Conf = "spark.ivm.testing.killAt"
  val Points: Seq[String] = Seq("refresh-start", "after-pin", "after-changes", "before-commit",
    "after-commit", "create-after-backing")

  def point(spark: SparkSession, name: String): Unit = {
    if (spark.conf.getOption(Conf).contains(name)) {
      System.err.println(s"spark-ivm: killing the JVM at fault-injection point '$name'")
      System.err.flush()
      Runtime.getRuntime.halt(137)
    }
  }
}
