package io.sparkivm

import io.sparkivm.changes.KnownFileScans
import io.sparkivm.conf.IvmConf
import io.sparkivm.parser.IvmSqlParser
import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.ivm.{DriverBroadcast, HeldRelation, SparkInternals}

/**
 * Entry point: `spark.sql.extensions=io.sparkivm.IvmSparkSessionExtensions` (next to Delta's
 * extension). It registers spark-ivm's settings with SQLConf and adds a parser that recognises
 * the materialized-view statements and hands every other statement to the parser it wraps, and
 * a physical rule that broadcasts rows held on the driver without a Spark job ([[DriverBroadcast]]),
 * and an optimizer rule that plans scans of Delta versions whose files it holds ([[KnownFileScans]]).
 * The first session also starts loading the classes a refresh uses ([[ClassWarmup]]) and checks
 * the class-data archive its JVM was given ([[ClassData]]).
 */
class IvmSparkSessionExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit = {
    if (SparkInternals.activeConf.forall(IvmConf.WarmupEnabled.get)) ClassWarmup.start(getClass.getClassLoader)
    ClassData.check()
    IvmConf.registered
    extensions.injectParser { (session, delegate) => new IvmSqlParser(session, delegate) }
    extensions.injectColumnar(_ => DriverBroadcast.columnarRule(IvmConf.BroadcastDriverReadMaxBytes.get))
    extensions.injectOptimizerRule(KnownFileScans(_))
    extensions.injectPlannerStrategy(_ => HeldRelation.Planning)
  }
}
