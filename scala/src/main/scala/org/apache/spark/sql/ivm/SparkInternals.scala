package org.apache.spark.sql.ivm

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.classic
import org.apache.spark.sql.{DataFrame, SparkSession}

/**
 * The few Spark internals spark-ivm needs that are `private[sql]`, kept in one place so that a
 * Spark upgrade has one file to look at.
 */
object SparkInternals {

  /**
   * Clears the Spark local properties this thread inherited from the thread that started it (a
   * pool's thread inherits its first caller's: job group, SQL execution id, metrics tags), so
   * that the jobs it submits are its own.
   */
  def clearLocalProperties(sc: org.apache.spark.SparkContext): Unit =
    sc.localProperties.set(new java.util.Properties())

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

  /** Whether `t` or a type nested in it (array elements, struct fields ...) satisfies `f`. */
  def existsNested(t: org.apache.spark.sql.types.DataType)(f: org.apache.spark.sql.types.DataType => Boolean)
      : Boolean = t.existsRecursively(f)

  /**
   * True if a Delta schema's JSON declares a CHAR or VARCHAR column (Delta's parsed schema may
   * not carry the metadata that says so).
   */
  def declaresCharVarchar(schemaJson: String): Boolean =
    schemaJson.contains(org.apache.spark.sql.catalyst.util.CharVarcharUtils.CHAR_VARCHAR_TYPE_STRING_METADATA_KEY)

  /** The schema with every field nullable, as Delta stores a written table's schema. */
  def nullable(schema: org.apache.spark.sql.types.StructType): org.apache.spark.sql.types.StructType =
    schema.asNullable

  /** The settings of the application's running SparkContext, if one runs. */
  def activeConf: Option[org.apache.spark.SparkConf] = org.apache.spark.SparkContext.getActive.map(_.conf)

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
  def isSet(spark: SparkSession, key: String): Boolean = sqlConf(spark).contains(key)

  /** The session's SQL settings, typed. */
  def sqlConf(spark: SparkSession): org.apache.spark.sql.internal.SQLConf =
    spark.asInstanceOf[classic.SparkSession].sessionState.conf

  def parser(spark: SparkSession): ParserInterface =
    spark.asInstanceOf[classic.SparkSession].sessionState.sqlParser

  /** Sets each of the session's settings `values` (None: unsets it). */
  def setConf(spark: SparkSession, values: Iterable[(String, Option[String])]): Unit = values.foreach {
    case (k, Some(v)) => spark.conf.set(k, v)
    case (k, None) => spark.conf.unset(k)
  }

  /** `body` with the session's settings `values` (None: unset), each put back as it was after. */
  def withConf[T](spark: SparkSession, values: Iterable[(String, Option[String])])(body: => T): T = {
    val before = values.map { case (k, _) => k -> spark.conf.getOption(k) }.toSeq
    setConf(spark, values)
    try body
    finally setConf(spark, before)
  }
}

/**
 * The SQL settings a materialized view captures at CREATE and is analyzed and refreshed with
 * ever after, chosen as Spark chooses them for its persistent views (Spark's `CapturesConfig`:
 * every modifiable setting the session changed, less optimizer and execution tuning, and always
 * the session time zone and ANSI mode, whose defaults are not fixed).
 */
object CapturedSqlConf extends org.apache.spark.sql.catalyst.CapturesConfig {

  /**
   * Spark SQL's own settings only: Delta's and spark-ivm's (registered with SQLConf too) tune how
   * a refresh runs, and stay the running session's; so does catalog plumbing.
   */
  private def captures(key: String): Boolean =
    key.startsWith("spark.sql.") && !key.startsWith("spark.sql.catalog.") && !key.startsWith("spark.sql.extensions")

  /** The settings of `spark` a view created now captures. */
  def capture(spark: SparkSession): Map[String, String] =
    sqlConfigsToProps(conf(spark), "").filter { case (k, _) => captures(k) }

  /** True if `spark` analyzes and runs a query as under `captured` (nothing captured: any). */
  def matches(spark: SparkSession, captured: Map[String, String]): Boolean =
    captured.isEmpty || capture(spark) == captured

  /**
   * Makes `spark` (a session of spark-ivm's own) analyze and run as under `captured`: the
   * captured values set, every other capturable setting back to its default, as Spark's view
   * resolution does (`View.effectiveSQLConf`).
   */
  def applyTo(spark: SparkSession, captured: Map[String, String]): Unit = if (!matches(spark, captured)) {
    val c = conf(spark)
    capture(spark).keys.filterNot(captured.contains).foreach(c.unsetConf)
    captured.foreach { case (k, v) => c.setConfString(k, v) }
  }

  /** A session of its own that analyzes and runs as under `captured`. */
  def session(spark: SparkSession, captured: Map[String, String]): SparkSession =
    if (matches(spark, captured)) spark
    else {
      val s = SparkInternals.isolated(spark)
      applyTo(s, captured)
      s
    }

  private def conf(spark: SparkSession) = SessionInternals.sqlConf(spark)
}
