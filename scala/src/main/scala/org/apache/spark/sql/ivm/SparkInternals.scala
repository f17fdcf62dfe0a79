package org.apache.spark.sql.ivm

import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.classic

/**
 * The few Spark internals spark-ivm needs that are `private[sql]`, kept in one place so that a
 * Spark upgrade has one file to look at.
 */
object SparkInternals {
  /** A DataFrame over a (resolved or unresolved) logical plan, as Spark's own commands build. */
  def dataFrame(spark: SparkSession, plan: LogicalPlan): DataFrame =
    classic.Dataset.ofRows(spark.asInstanceOf[classic.SparkSession], plan)

  /**
   * A session for one piece of spark-ivm's own work: a clone of `spark` (same catalog, current
   * database, settings and temporary views) whose settings can be tuned for that work without
   * changing the user's session or its other workloads.
   */
  def isolated(spark: SparkSession): SparkSession =
    spark.asInstanceOf[classic.SparkSession].cloneSession()

  /** The schema with every field nullable, as Delta stores a written table's schema. */
  def nullable(schema: org.apache.spark.sql.types.StructType): org.apache.spark.sql.types.StructType =
    schema.asNullable

  /** The analyzed plan of a DataFrame. */
  def analyzed(df: DataFrame): LogicalPlan =
    df.asInstanceOf[classic.Dataset[_]].queryExecution.analyzed
}

object SessionInternals {
  import org.apache.spark.sql.catalyst.catalog.SessionCatalog
  import org.apache.spark.sql.catalyst.parser.ParserInterface

  def catalog(spark: SparkSession): SessionCatalog =
    spark.asInstanceOf[classic.SparkSession].sessionState.catalog

  /** True if the session sets `key` itself (not just Spark's or a registry's default). */
  def isSet(spark: SparkSession, key: String): Boolean =
    spark.asInstanceOf[classic.SparkSession].sessionState.conf.contains(key)

  def parser(spark: SparkSession): ParserInterface =
    spark.asInstanceOf[classic.SparkSession].sessionState.sqlParser
}
