package io.sparkivm.parser

import io.delta.tables.execution.VacuumTableCommand
import io.sparkivm.catalog.{CatalogGuard, ViewCatalog}
import io.sparkivm.commands.{
  CreateMaterializedView, KeyConstraintCommands, MaterializedViewCommands, ShowCreateMaterializedViewCommand
}
import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.analysis.{UnresolvedRelation, UnresolvedTable, UnresolvedTableOrView}
import org.apache.spark.sql.catalyst.expressions.Expression
import org.apache.spark.sql.catalyst.parser.{ParameterContext, ParseException, ParserInterface}
import org.apache.spark.sql.catalyst.plans.logical.{
  DeleteFromTable, LogicalPlan, MergeIntoTable, ShowCreateTable, SubqueryAlias, UpdateTable
}
import org.apache.spark.sql.catalyst.{FunctionIdentifier, TableIdentifier}
import org.apache.spark.sql.delta.commands.{DescribeDeltaDetailCommand, DescribeDeltaHistory, OptimizeTableCommand}
import org.apache.spark.sql.types.{DataType, StructType}

/** Spark's parser, with spark-ivm's statements recognised first (see [[IvmStatementParser]]). */
class IvmSqlParser(session: SparkSession, delegate: ParserInterface) extends ParserInterface {

  override def parsePlan(sqlText: String): LogicalPlan =
    IvmStatementParser.recognise(sqlText).map(MaterializedViewCommands.plan)
      .getOrElse(intercepted(delegate.parsePlan(ScriptStatements.rewritten(sqlText).getOrElse(sqlText))))

  /**
   * As [[parsePlan]], with the values of parameter markers. A materialized view's query keeps the
   * values in its text, as Spark's CREATE VIEW does. Where the wrapped parser leaves markers
   * unbound (Delta's drops the values, [[ParameterMarkers]]), the text is parsed again with the
   * values substituted.
   */
  override def parsePlanWithParameters(sqlText: String, context: ParameterContext): LogicalPlan =
    if (!ParameterMarkers.hasValues(context)) parsePlan(sqlText)
    else if (IvmStatementParser.isStatement(sqlText)) {
      // Spark's substitution parses Spark's grammar: the head of spark-ivm's statement (its name,
      // `IDENTIFIER(:v)`, its clauses) is substituted here, the query after AS by Spark.
      val headEnd = ParameterMarkers.headEnd(sqlText)
      val (head, rest) = ParameterMarkers.substitutedHead(sqlText.substring(0, headEnd), context)
      IvmStatementParser.recognise(head + sqlText.substring(headEnd)).map {
        case c: CreateMaterializedView if ParameterMarkers.hasValues(rest) =>
          def bound(text: String) = ParameterMarkers.substituted(text, rest)
          c.copy(queryText = bound(c.queryText), queryTextInPlace = bound(c.queryTextInPlace))
        case other => other
      }.map(MaterializedViewCommands.plan).getOrElse(parsePlan(sqlText))
    } else {
      val text = ScriptStatements.rewritten(sqlText).getOrElse(sqlText)
      def substituted = delegate.parsePlan(ParameterMarkers.substituted(text, context))
      val plan =
        try {
          val parsed = delegate.parsePlanWithParameters(text, context)
          if (ParameterMarkers.unbound(parsed)) substituted else parsed
        } catch {
          // Spark's own parser refuses markers it finds unbound where only literals go.
          case e: ParseException if ParameterMarkers.refused(e) => substituted
        }
      intercepted(plan)
    }

  /**
   * Spark's statements as spark-ivm takes them: refused on a materialized view's objects
   * ([[CatalogGuard]], writes to a view), PK/FK constraints (which Spark parses and Delta
   * refuses) kept by spark-ivm, SHOW CREATE TABLE of a materialized view answered.
   */
  private def intercepted(plan: LogicalPlan): LogicalPlan = {
    CatalogGuard.check(session, plan)
    KeyConstraintCommands.intercept(refuseWritesToViews(plan)).orElse(showCreate(plan)).orElse(onBacking(plan))
      .getOrElse(plan)
  }

  /**
   * Delta's maintenance and inspection of a table (OPTIMIZE, with ZORDER BY or a WHERE; VACUUM;
   * DESCRIBE HISTORY and DETAIL), when they name a materialized view, run on its backing table:
   * the view's rows are that table's, and OPTIMIZE is how a view declared with CLUSTER BY is
   * clustered.
   */
  private def onBacking(plan: LogicalPlan): Option[LogicalPlan] = plan match {
    case _: OptimizeTableCommand | _: VacuumTableCommand | _: DescribeDeltaHistory | _: DescribeDeltaDetailCommand =>
      plan.children match {
        case Seq(u: UnresolvedTable) =>
          materializedViewIn(u).flatMap(parts => ViewCatalog.backingOf(session, ViewCatalog.qualify(session, parts)))
            .map(b => plan.withNewChildren(Seq(u.copy(multipartIdentifier = b.nameParts))))
        case _ => None
      }
    case _ => None
  }

  /** SHOW CREATE TABLE of a materialized view gives its CREATE MATERIALIZED VIEW statement. */
  private def showCreate(plan: LogicalPlan): Option[LogicalPlan] = plan match {
    case s: ShowCreateTable if !s.asSerde =>
      materializedViewIn(s.child).map(ShowCreateMaterializedViewCommand(_))
    case _ => None
  }

  /** The name of the materialized view that `p` (a statement's target, as parsed) names, if any. */
  private def materializedViewIn(p: LogicalPlan): Option[Seq[String]] = {
    def nameOf(p: LogicalPlan): Option[Seq[String]] = p match {
      case SubqueryAlias(_, child) => nameOf(child)
      case r: UnresolvedRelation => Some(r.multipartIdentifier)
      case r: UnresolvedTableOrView => Some(r.multipartIdentifier)
      case r: UnresolvedTable => Some(r.multipartIdentifier)
      case _ => None
    }
    nameOf(p).filter(parts => scala.util.Try(ViewCatalog.isMaterializedView(session, parts)).getOrElse(false))
  }

  /**
   * UPDATE, DELETE and MERGE name a materialized view as their target: say so, instead of the
   * error Delta gives for a view (`DELTA_UNSUPPORTED_SOURCE`), since only REFRESH changes it.
   */
  private def refuseWritesToViews(plan: LogicalPlan): LogicalPlan = {
    val target = plan match {
      case u: UpdateTable => Some("UPDATE" -> u.table)
      case d: DeleteFromTable => Some("DELETE" -> d.table)
      case m: MergeIntoTable => Some("MERGE" -> m.targetTable)
      case _ => None
    }
    target.foreach { case (statement, table) =>
      materializedViewIn(table).foreach(parts => throw IvmErrors.viewNotWritable(parts.mkString("."), statement))
    }
    plan
  }

  override def parseExpression(sqlText: String): Expression = delegate.parseExpression(sqlText)
  override def parseTableIdentifier(sqlText: String): TableIdentifier =
    delegate.parseTableIdentifier(sqlText)
  override def parseFunctionIdentifier(sqlText: String): FunctionIdentifier =
    delegate.parseFunctionIdentifier(sqlText)
  override def parseMultipartIdentifier(sqlText: String): Seq[String] =
    delegate.parseMultipartIdentifier(sqlText)
  override def parseQuery(sqlText: String): LogicalPlan = delegate.parseQuery(sqlText)
  override def parseRoutineParam(sqlText: String): StructType = delegate.parseRoutineParam(sqlText)
  override def parseTableSchema(sqlText: String): StructType = delegate.parseTableSchema(sqlText)
  override def parseDataType(sqlText: String): DataType = delegate.parseDataType(sqlText)
}
