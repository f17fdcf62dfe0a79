package io.sparkivm.execution

import scala.collection.mutable
import scala.util.control.NonFatal

import io.sparkivm.catalog.{ForeignKey, KeyConstraints, PrimaryKey}
import io.sparkivm.planner.{FkSettings, ForeignKeyRef, PlanSteps, ProbeSettings, SourceLeaf, TableKeys}
import org.apache.spark.sql.SparkSession

/** The session confs that steer delta planning. */
object PlanningConf {
  val FkPruning = "spark.ivm.fkPruning.enabled"
  val KeyProbing = "spark.ivm.keyProbing.enabled"
  val MaxProbeKeys = "spark.ivm.keyProbing.maxKeys"
  val MaxProbeRanges = "spark.ivm.keyProbing.maxRanges"
  val MinProbeTableBytes = "spark.ivm.keyProbing.minTableBytes"

  private def flag(spark: SparkSession, key: String, default: Boolean): Boolean =
    spark.conf.getOption(key).map(_.trim.equalsIgnoreCase("true")).getOrElse(default)
  private def int(spark: SparkSession, key: String, default: Int): Int =
    spark.conf.getOption(key).map(_.trim.toInt).getOrElse(default)

  def pruning(spark: SparkSession): Boolean = flag(spark, FkPruning, default = true)

  def probe(spark: SparkSession): ProbeSettings =
    // Off by default: on TPC-H refresh functions, whose deletes are spread over the whole key
    // range, the ranges hit every file and the per-row filter only adds work (docs/benchmarks.md).
    ProbeSettings(flag(spark, KeyProbing, default = false), int(spark, MaxProbeKeys, 100000),
      int(spark, MaxProbeRanges, 64),
      spark.conf.getOption(MinProbeTableBytes).map(_.trim.toLong).getOrElse(16L << 20))

  /** FK pruning and probing for one refresh; keys are read once per table. */
  def fk(spark: SparkSession, steps: PlanSteps): FkSettings = {
    val cache = mutable.Map[String, TableKeys]()
    def keys(leaf: SourceLeaf): TableKeys = cache.getOrElseUpdate(leaf.name, {
      // A table whose constraints cannot be read has none as far as planning goes.
      val declared = try KeyConstraints.of(spark, leaf.table) catch { case NonFatal(_) => Nil }
      TableKeys(declared.collectFirst { case p: PrimaryKey => p.columns },
        declared.collect { case f: ForeignKey =>
          ForeignKeyRef(f.name, f.columns, f.parent.unquotedString, f.parentColumns) })
    })
    FkSettings(pruning(spark), probe(spark), keys, steps)
  }
}
