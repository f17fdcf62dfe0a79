package io.sparkivm.execution

import scala.collection.mutable
import scala.util.control.NonFatal

import io.sparkivm.catalog.{ForeignKey, KeyConstraints, PrimaryKey}
import io.sparkivm.conf.IvmConf
import io.sparkivm.planner.{FkSettings, ForeignKeyRef, PlanSteps, ProbeSettings, SourceLeaf, TableKeys}
import org.apache.spark.sql.SparkSession

/** The settings that steer delta planning, read from [[IvmConf]]. */
object PlanningConf {
  def pruning(spark: SparkSession): Boolean = IvmConf.FkPruningEnabled.get(spark)

  def probe(spark: SparkSession): ProbeSettings =
    // Off by default: on TPC-H refresh functions, whose deletes are spread over the whole key
    // range, the ranges hit every file and the per-row filter only adds work (docs/benchmarks.md).
    ProbeSettings(IvmConf.KeyProbingEnabled.get(spark), IvmConf.KeyProbingMaxKeys.get(spark),
      IvmConf.KeyProbingMaxRanges.get(spark), IvmConf.KeyProbingMinTableBytes.get(spark))

  /** FK pruning and probing for one refresh; keys are read once per table. */
  def fk(spark: SparkSession, steps: PlanSteps): FkSettings = {
    val cache = mutable.Map[String, TableKeys]()
    def keys(leaf: SourceLeaf): TableKeys = cache.synchronized(cache.getOrElseUpdate(leaf.name, {
        // A table whose constraints cannot be read has none as far as planning goes.
        val declared =
          try KeyConstraints.of(spark, leaf.table)
          catch { case NonFatal(_) => Nil }
        TableKeys(declared.collectFirst { case p: PrimaryKey => p.columns },
          declared.collect { case f: ForeignKey =>
            ForeignKeyRef(f.name, f.columns, f.parent.unquotedString, f.parentColumns, f.rely)
          })
      }))
    FkSettings(pruning(spark), probe(spark), keys, steps,
      sharedReadMinBytes = IvmConf.SharedReadsMinTableBytes.get(spark))
  }
}
