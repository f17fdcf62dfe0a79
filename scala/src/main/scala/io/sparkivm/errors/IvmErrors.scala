package io.sparkivm.errors

import scala.jdk.CollectionConverters._

import org.apache.spark.ErrorClassesJsonReader
import org.apache.spark.sql.AnalysisException

/**
 * Errors raised by spark-ivm, through Spark's error framework as Delta's are: every error
 * condition (`IVM_*`) is declared once, with its message template and SQLSTATE, in
 * `error/ivm-error-conditions.json`; an error carries its condition and message parameters, so
 * `getCondition`, `getSqlState` and `getMessageParameters` work in Scala and in PySpark. They are
 * AnalysisExceptions so that PySpark surfaces them as `pyspark.errors.AnalysisException` (and
 * `spark_ivm.errors` as a typed subclass).
 */
class IvmException(
    val condition: String,
    val parameters: Map[String, String],
    cause: Option[Throwable] = None)
    extends AnalysisException(
      IvmErrors.message(condition, parameters), None, None, cause, Some(condition), parameters,
      Array.empty) {
  override def getSqlState: String = IvmErrors.reader.getSqlState(condition)
  override def getMessageParameters: java.util.Map[String, String] = parameters.asJava
}

object IvmErrors {
  private val Resource = "error/ivm-error-conditions.json"
  private lazy val url = Option(getClass.getClassLoader.getResource(Resource))
    .getOrElse(throw new IllegalStateException(s"$Resource is not on the classpath"))
  private[sparkivm] lazy val reader = new ErrorClassesJsonReader(Seq(url))

  /** Every error condition spark-ivm declares. */
  lazy val conditions: Seq[String] = {
    val source = scala.io.Source.fromURL(url, "UTF-8")
    try org.json4s.jackson.JsonMethods.parse(source.mkString) match {
        case org.json4s.JObject(fields) => fields.map(_._1).sorted
        case other => throw new IllegalStateException(s"$Resource is not an object: $other")
      }
    finally source.close()
  }

  /** `[CONDITION] message SQLSTATE: s`, as Spark formats its own errors. */
  private[sparkivm] def message(condition: String, parameters: Map[String, String]): String =
    s"[$condition] ${reader.getErrorMessage(condition, parameters)} SQLSTATE: ${reader.getSqlState(condition)}"

  /** An error of a declared condition; its template's parameters must all be given. Every
   * condition has a method of its own below, so no other package names a condition by string. */
  private[errors] def of(condition: String, parameters: (String, Any)*): IvmException =
    withCause(condition, None, parameters: _*)

  private def withCause(condition: String, cause: Option[Throwable], parameters: (String, Any)*): IvmException = {
    val named = parameters.map { case (k, v) => k -> String.valueOf(v) }.toMap
    val expected = reader.getMessageParameters(condition).toSet
    require(expected == named.keySet,
      s"error $condition takes parameters ${expected.mkString(", ")}, got ${named.keySet.mkString(", ")}")
    new IvmException(condition, named, cause)
  }

  def unsupported(operator: String, hint: String): IvmException =
    of("IVM_UNSUPPORTED_OPERATOR", "operator" -> operator, "hint" -> hint)

  def notFound(name: String): IvmException = of("IVM_VIEW_NOT_FOUND", "name" -> name)

  def alreadyExists(name: String): IvmException = of("IVM_VIEW_ALREADY_EXISTS", "name" -> name)

  def sourceMissing(view: String, table: String, cause: Throwable): IvmException =
    withCause("IVM_SOURCE_MISSING", Some(cause), "view" -> view, "table" -> table, "reason" -> oneLine(cause))

  def sourceChanged(view: String, table: String, what: String): IvmException =
    of("IVM_SOURCE_CHANGED", "view" -> view, "table" -> table, "what" -> what)

  def backingAltered(view: String, what: String): IvmException =
    of("IVM_BACKING_TABLE_ALTERED", "view" -> view, "what" -> what)

  def changeFeedUnavailable(view: String, table: String, cause: Throwable): IvmException =
    withCause("IVM_CHANGES_UNAVAILABLE", Some(cause), "view" -> view, "table" -> table,
      "reason" -> oneLine(cause))

  def notDelta(table: String, provider: String): IvmException =
    of("IVM_SOURCE_NOT_DELTA", "table" -> table, "provider" -> provider)

  /** At CREATE (`view` None) spark-ivm may turn the feed on; a refresh never changes a table. */
  def changeFeedDisabled(table: String, view: Option[String] = None): IvmException =
    of("IVM_CHANGE_FEED_DISABLED", "table" -> table,
      "hint" -> (view match {
        case None => s"Run ALTER TABLE $table SET TBLPROPERTIES (delta.enableChangeDataFeed = true), or set " +
            "spark.ivm.autoEnableChangeDataFeed=true to let spark-ivm do it."
        case Some(v) => s"The change data feed was turned off after materialized view $v was created, and a " +
            s"refresh never changes a base table's properties. Run ALTER TABLE $table SET TBLPROPERTIES " +
            s"(delta.enableChangeDataFeed = true), then REFRESH MATERIALIZED VIEW $v FULL (changes made while it " +
            "was off were not recorded)."
      }))

  def viewNotWritable(name: String, statement: String): IvmException =
    of("IVM_VIEW_NOT_WRITABLE", "name" -> name, "statement" -> statement)

  def invalidConf(key: String, value: String, expected: String): IvmException =
    of("IVM_INVALID_CONF", "key" -> key, "value" -> value, "expected" -> expected)

  def invalidProperty(key: String, value: String, expected: String): IvmException =
    of("IVM_INVALID_PROPERTY", "key" -> key, "action" -> s"set to '$value'", "reason" -> s"expected $expected")

  /** A property that is not the user's to set, or that does not apply to this view. */
  def propertyNotSettable(key: String, reason: String): IvmException =
    of("IVM_INVALID_PROPERTY", "key" -> key, "action" -> "set", "reason" -> reason)

  /** A name that REFRESH, DROP, DESCRIBE or ALTER MATERIALIZED VIEW took for a view, and is not. */
  def notMaterializedView(name: String, kind: String, hint: String): IvmException =
    of("IVM_NOT_A_MATERIALIZED_VIEW", "name" -> name, "kind" -> kind, "hint" -> hint)

  /** A query that reads where its rows are stored (`_metadata`, `input_file_name()`). */
  def rowLocation(view: String, what: String): IvmException =
    of("IVM_ROW_LOCATION_IN_QUERY", "view" -> view, "what" -> what)

  /** A column of a view's backing table whose type Delta cannot store (a collated string). */
  def unsupportedColumnType(view: String, what: String, dataType: String, hint: String): IvmException =
    of("IVM_UNSUPPORTED_COLUMN_TYPE", "view" -> view, "what" -> what, "type" -> dataType, "hint" -> hint)

  /** Spark's own DDL or DML on an object that is part of a materialized view. */
  def materializedViewObject(name: String, role: String, statement: String, effect: String,
      instead: String): IvmException =
    of("IVM_MATERIALIZED_VIEW_OBJECT", "name" -> name, "role" -> role, "statement" -> statement,
      "effect" -> effect, "instead" -> instead)

  /** A verified refresh whose committed rows differ from its query's. */
  def verifyMismatch(view: String, refresh: Long, level: String, differences: Long, sample: String,
      action: String): IvmException =
    of("IVM_VERIFY_MISMATCH", "view" -> view, "refresh" -> refresh, "level" -> level,
      "differences" -> differences, "sample" -> sample, "action" -> action)

  def invalidName(name: String, catalog: String): IvmException =
    of("IVM_INVALID_NAME", "name" -> name, "catalog" -> catalog)

  def constraintExists(table: String, constraint: String): IvmException =
    of("IVM_CONSTRAINT_ALREADY_EXISTS", "table" -> table, "constraint" -> constraint)

  def constraintInvalid(reason: String): IvmException = of("IVM_CONSTRAINT_INVALID", "reason" -> reason)

  def constraintViolated(constraint: String, table: String, violations: String): IvmException =
    of("IVM_CONSTRAINT_VIOLATED", "constraint" -> constraint, "table" -> table, "violations" -> violations)

  def invalidSchedule(schedule: String, reason: String): IvmException =
    of("IVM_INVALID_SCHEDULE", "schedule" -> schedule, "reason" -> reason)

  def scheduleConflict(view: String, what: String, instead: String): IvmException =
    of("IVM_SCHEDULE_CONFLICT", "view" -> view, "what" -> what, "instead" -> instead)

  def temporarySource(name: String): IvmException = of("IVM_TEMPORARY_SOURCE", "name" -> name)

  /**
   * The error, if `e` is one (or is caused by one), that says a refresh cannot follow the base
   * tables' changes since the last refresh, though a recomputation can still build the view: the
   * change data feed no longer covers the interval (vacuumed, the log cleaned up, turned off), a
   * base table was replaced or retyped, or the backing table was changed by hand.
   */
  def changesNotFollowable(e: Throwable): Option[IvmException] = e match {
    case null => None
    case i: IvmException if NotFollowable(i.condition) => Some(i)
    case other => if (other.getCause eq other) None else changesNotFollowable(other.getCause)
  }

  private val NotFollowable =
    Set("IVM_CHANGES_UNAVAILABLE", "IVM_CHANGE_FEED_DISABLED", "IVM_SOURCE_CHANGED", "IVM_BACKING_TABLE_ALTERED")

  /** INCREMENTAL STRICT, and this refresh must recompute. */
  def refreshNotIncremental(view: String, reason: String): IvmException =
    of("IVM_REFRESH_NOT_INCREMENTAL", "view" -> view, "reason" -> reason)

  /** INCREMENTAL STRICT at CREATE, and the query cannot be maintained. */
  def notIncrementalizable(view: String, operator: String, hint: String): IvmException =
    of("IVM_NOT_INCREMENTALIZABLE", "view" -> view, "operator" -> operator, "hint" -> hint)

  def epsilonInvariant(invariant: String, state: Any): IvmException =
    of("IVM_EPSILON_INVARIANT", "invariant" -> invariant, "state" -> state)

  def columnCountMismatch(view: String, listed: Int, returned: Int): IvmException =
    of("IVM_COLUMN_COUNT_MISMATCH", "view" -> view, "listed" -> listed, "returned" -> returned)

  def columnTypeMismatch(view: String, column: String, declared: String, returned: String): IvmException =
    of("IVM_COLUMN_TYPE_MISMATCH", "view" -> view, "column" -> column, "declared" -> declared,
      "returned" -> returned)

  def invalidLayout(view: String, clause: String, reason: String): IvmException =
    of("IVM_INVALID_LAYOUT", "view" -> view, "clause" -> clause, "reason" -> reason)

  def duplicateColumn(view: String, column: String): IvmException =
    of("IVM_DUPLICATE_COLUMN", "view" -> view, "column" -> column)

  def invalidAccessPattern(view: String, reason: String): IvmException =
    of("IVM_INVALID_ACCESS_PATTERN", "view" -> view, "reason" -> reason)

  def lookupExpired(view: String): IvmException = of("IVM_LOOKUP_EXPIRED", "view" -> view)

  /** A state spark-ivm should never reach: Spark's INTERNAL_ERROR, with what was found. */
  def internal(what: String): org.apache.spark.SparkException =
    org.apache.spark.SparkException.internalError(s"spark-ivm: $what")

  /** `e` as it reaches the user from a statement on `view`: an internal error names the view
   * (raised deep in a refresh, it could not); every other error is passed on as it is. */
  def inView(view: String, e: Throwable): Throwable = e match {
    case s: org.apache.spark.SparkThrowable if s.getCondition == "INTERNAL_ERROR" && !e.getMessage.contains(InView) =>
      org.apache.spark.SparkException.internalError(
        s"$InView$view: ${e.getMessage.stripPrefix("[INTERNAL_ERROR] ")}", e)
    case other => other
  }

  /**
   * `e`, raised by the refresh of `helper` (the name of a helper view of `view`), as it reaches
   * the user of `view`, who never named the helper: an error of the helper names the view
   * instead, whose statements are the remedies (a FULL refresh of the view is one of its helpers
   * too). The condition and the other parameters stay.
   */
  def throughHelper(view: String, helper: String, e: Throwable): Throwable = e match {
    case i: IvmException if i.parameters.get("view").exists(_.contains(helper)) =>
      val named = new IvmException(i.condition, i.parameters + ("view" -> view), Option(i.getCause))
      named.setStackTrace(i.getStackTrace)
      named
    case other => other
  }

  /** What [[inView]] puts before the view's name: an error already named is not named twice. */
  private val InView = "spark-ivm, materialized view "

  /**
   * The cause's message on one line, up to the plan Spark appends to analysis errors: a
   * message wrapped over lines (Delta's change-feed errors are) is kept whole.
   */
  private def oneLine(t: Throwable): String = {
    val message = Option(t.getMessage).getOrElse(t.toString)
    val lines = message.linesIterator.takeWhile(l =>
      !l.startsWith("'") && !l.startsWith("+-") &&
        !l.startsWith("== ")).map(_.trim).filter(_.nonEmpty).toSeq
    val joined = lines.mkString(" ").stripSuffix(";")
    if (joined.length <= 600) joined else joined.take(597) + "..."
  }
}
