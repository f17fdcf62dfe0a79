package io.sparkivm.execution

import org.apache.spark.sql.SparkSession

/**
 * Named points in CREATE and REFRESH where tests interfere, to check that a refresh killed
 * anywhere leaves a readable view that the next refresh makes exact, and that commits made
 * while a refresh runs go to the next one:
 *  - `spark.ivm.testing.killAt = <point>` halts the JVM there;
 *  - `spark.ivm.testing.sqlAt = <point>:<statement>` runs a statement there (once);
 *  - `spark.ivm.testing.failAt = <point>` throws there (once): a failed refresh, cheaper than
 *    a killed JVM and leaving the same state behind.
 * The points: refresh-start, after-pin, after-changes, after-state (IVM^eps state written),
 * before-commit, after-commit (REFRESH) and create-after-backing (CREATE). Unset (the default) each costs two conf lookups.
 */
object FaultInjection {
  val KillConf = "spark.ivm.testing.killAt"
  val SqlConf = "spark.ivm.testing.sqlAt"
  val FailConf = "spark.ivm.testing.failAt"

  def point(spark: SparkSession, name: String): Unit = {
    spark.conf.getOption(SqlConf).filter(_.startsWith(name + ":")).foreach { spec =>
      spark.conf.unset(SqlConf)
      spark.sql(spec.substring(name.length + 1))
    }
    if (spark.conf.getOption(FailConf).contains(name)) {
      spark.conf.unset(FailConf)
      throw new IllegalStateException(s"spark-ivm: failing at fault-injection point '$name'")
    }
    if (spark.conf.getOption(KillConf).contains(name)) {
      System.err.println(s"spark-ivm: killing the JVM at fault-injection point '$name'")
      System.err.flush()
      Runtime.getRuntime.halt(137)
    }
  }
}
