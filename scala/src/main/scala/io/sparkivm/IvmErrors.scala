package io.sparkivm

import org.apache.spark.sql.AnalysisException

/**
 * Errors raised by spark-ivm. Each has an error class (`IVM_*`, returned by `getCondition`) so
 * that callers can tell them apart, and a message that says what to do. They are
 * AnalysisExceptions so that PySpark surfaces them as `pyspark.errors.AnalysisException`.
 */
class IvmException(errorClass: String, message: String, cause: Option[Throwable] = None)
  extends AnalysisException(
    s"[$errorClass] $message", None, None, cause, Some(errorClass), Map.empty[String, String],
    Array.empty)

object IvmErrors {
  def unsupported(operator: String, hint: String): IvmException = new IvmException(
    "IVM_UNSUPPORTED_OPERATOR",
    s"$operator cannot be maintained incrementally. $hint Or create the view with " +
      "TBLPROPERTIES ('ivm.refresh' = 'full') to recompute it on every refresh.")

  def notFound(name: String): IvmException = new IvmException(
    "IVM_VIEW_NOT_FOUND", s"Materialized view $name does not exist. SHOW MATERIALIZED VIEWS " +
      "lists the existing ones.")

  def alreadyExists(name: String): IvmException = new IvmException(
    "IVM_VIEW_ALREADY_EXISTS", s"Materialized view or table $name already exists. Use " +
      "CREATE MATERIALIZED VIEW IF NOT EXISTS, or DROP MATERIALIZED VIEW first.")

  def sourceMissing(view: String, table: String, cause: Throwable): IvmException =
    new IvmException("IVM_SOURCE_MISSING",
      s"Base table $table of materialized view $view cannot be read (${firstLine(cause)}). " +
        "Restore the table, or DROP and recreate the view.", Some(cause))

  def sourceChanged(view: String, table: String, what: String): IvmException =
    new IvmException("IVM_SOURCE_CHANGED",
      s"Base table $table of materialized view $view changed since the last refresh: $what. " +
        s"Run REFRESH MATERIALIZED VIEW $view FULL, or DROP and recreate the view. " +
        "The view was left as it was.")

  def backingAltered(view: String, what: String): IvmException =
    new IvmException("IVM_BACKING_TABLE_ALTERED",
      s"The table that stores materialized view $view was changed outside spark-ivm ($what). " +
        s"Run REFRESH MATERIALIZED VIEW $view FULL to rebuild it, or DROP and recreate the " +
        "view. The view was left as it was.")

  def changeFeedUnavailable(view: String, table: String, cause: Throwable): IvmException =
    new IvmException("IVM_CHANGES_UNAVAILABLE",
      s"The changes of $table since the last refresh of $view cannot be read from its change " +
        s"data feed (${firstLine(cause)}). Run REFRESH MATERIALIZED VIEW $view FULL. The view " +
        "was left as it was.", Some(cause))

  def notDelta(table: String, provider: String): IvmException = new IvmException(
    "IVM_SOURCE_NOT_DELTA",
    s"Table $table is a $provider table; incremental maintenance reads changes from Delta's " +
      "change data feed, so base tables must be Delta tables (CONVERT TO DELTA converts " +
      "Parquet in place).")

  def changeFeedDisabled(table: String): IvmException = new IvmException(
    "IVM_CHANGE_FEED_DISABLED",
    s"Delta table $table does not record its changes. Run ALTER TABLE $table SET " +
      "TBLPROPERTIES (delta.enableChangeDataFeed = true), or set " +
      "spark.ivm.autoEnableChangeDataFeed=true to let spark-ivm do it.")

  def viewNotWritable(name: String, statement: String): IvmException = new IvmException(
    "IVM_VIEW_NOT_WRITABLE", s"$name is a materialized view: $statement cannot change it. A " +
      s"materialized view changes only by REFRESH MATERIALIZED VIEW $name; change its base tables " +
      "and refresh it.")

  def invalidConf(key: String, value: String, expected: String): IvmException =
    new IvmException("IVM_INVALID_CONF", s"Invalid value '$value' for the setting $key: expected $expected.")

  def invalidProperty(key: String, value: String, expected: String): IvmException =
    new IvmException("IVM_INVALID_PROPERTY", s"Invalid value '$value' for $key: expected $expected.")

  private def firstLine(t: Throwable): String =
    Option(t.getMessage).map(_.linesIterator.toSeq.headOption.getOrElse("")).getOrElse(t.toString)
}
