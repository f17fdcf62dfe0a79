package io.sparkivm.execution

import io.sparkivm.conf.IvmConf
import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.SparkSession

/**
 * Named points in CREATE and REFRESH where tests interfere, to check that a refresh killed
 * anywhere leaves a readable view that the next refresh makes exact, and that commits made
 * while a refresh runs go to the next one:
 *  - `spark.ivm.testing.killAt = <point>` halts the JVM there;
 *  - `spark.ivm.testing.sqlAt = <point>:<statement>` runs a statement there (once);
 *  - `spark.ivm.testing.failAt = <point>` throws there (once): a failed refresh, cheaper than
 *    a killed JVM and leaving the same state behind.
 * The hooks do nothing unless the application was started in test mode: the static setting
 * `spark.ivm.testing.enabled=true` (which SET cannot change) or the JVM system property
 * `spark.ivm.testing=true`. So no session of a shared server can halt its driver.
 * The points: refresh-start, after-pin, after-changes, after-state (IVM^eps state written),
 * before-commit, after-commit, after-helpers (REFRESH of a view kept through helper views, once
 * they are refreshed), create-after-helpers (a view kept through helper views,
 * once they exist) and create-after-backing (CREATE).
 */
object FaultInjection {

  /** Test mode, fixed for the life of the application. */
  def enabled(spark: SparkSession): Boolean =
    spark.sparkContext.getConf.getBoolean(IvmConf.TestingEnabled.key, defaultValue = false) ||
      java.lang.Boolean.getBoolean("spark.ivm.testing")

  /** True once after `spark.ivm.testing.corruptApply` was set: the apply should go wrong. */
  def corruptApply(spark: SparkSession): Boolean = enabled(spark) &&
    spark.conf.getOption(IvmConf.TestingCorruptApply.key).exists(_.equalsIgnoreCase("true")) && {
      spark.conf.unset(IvmConf.TestingCorruptApply.key)
      true
    }

  def point(spark: SparkSession, name: String): Unit = if (enabled(spark)) {
    spark.conf.getOption(IvmConf.TestingSqlAt.key).filter(_.startsWith(name + ":")).foreach { spec =>
      spark.conf.unset(IvmConf.TestingSqlAt.key)
      spark.sql(spec.substring(name.length + 1))
    }
    if (spark.conf.getOption(IvmConf.TestingFailAt.key).contains(name)) {
      spark.conf.unset(IvmConf.TestingFailAt.key)
      throw IvmErrors.internal(s"failing at fault-injection point '$name'")
    }
    if (spark.conf.getOption(IvmConf.TestingKillAt.key).contains(name)) {
      System.err.println(s"spark-ivm: killing the JVM at fault-injection point '$name'")
      System.err.flush()
      Runtime.getRuntime.halt(137)
    }
  }
}
