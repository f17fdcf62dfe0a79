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

  /** The analyzed plan of a DataFrame. */
  def analyzed(df: DataFrame): LogicalPlan =
    df.asInstanceOf[classic.Dataset[_]].queryExecution.analyzed
}

object SessionInternals {
  import org.apache.spark.sql.catalyst.catalog.SessionCatalog
  import org.apache.spark.sql.catalyst.parser.ParserInterface

  def catalog(spark: SparkSession): SessionCatalog =
    spark.asInstanceOf[classic.SparkSession].sessionState.catalog

  def parser(spark: SparkSession): ParserInterface =
    spark.asInstanceOf[classic.SparkSession].sessionState.sqlParser
}
