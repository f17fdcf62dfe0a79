package io.sparkivm.parser

import org.apache.spark.sql.catalyst.analysis.Parameter
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression
import org.apache.spark.sql.catalyst.parser.{
  HybridParameterContext, NamedParameterContext, ParameterContext, ParameterHandler, ParseException,
  PositionalParameterContext
}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan

/**
 * Parameter markers (`:name`, `?`) of `spark.sql(text, args)` and `EXECUTE IMMEDIATE ... USING`.
 * Spark binds them while parsing, by substituting the values' SQL into the text
 * (`ParameterHandler`). A parser that wraps Spark's and parses the text itself must pass the
 * values on; Delta's (`DeltaSqlParser` in delta-spark 4.4) drops them, and every parameterized
 * statement then fails with UNBOUND_SQL_PARAMETER. These helpers substitute the text as Spark
 * does where a wrapped parser left markers unbound.
 */
private[parser] object ParameterMarkers {

  /** True if `context` carries values to bind. */
  def hasValues(context: ParameterContext): Boolean = context match {
    case NamedParameterContext(params) => params.nonEmpty
    case PositionalParameterContext(params) => params.nonEmpty
    case h: HybridParameterContext => h.args.nonEmpty
  }

  /** `sqlText` with the values of `context` in place of its markers, as Spark substitutes them. */
  def substituted(sqlText: String, context: ParameterContext): String =
    ParameterHandler.substituteParameters(sqlText, context)._1

  /** True if `e` is Spark's parser refusing a marker it found unbound (in a CREATE VIEW, or
   *  where only a literal goes): what a parser that dropped the values gets. */
  def refused(e: ParseException): Boolean =
    Option(e.getCondition).exists(c =>
      c == "UNSUPPORTED_FEATURE.PARAMETER_MARKER_IN_UNEXPECTED_STATEMENT" || c == "UNEXPECTED_USE_OF_PARAMETER_MARKER")

  /** True if a marker is left in `plan`: in its expressions, subqueries or CTE definitions. */
  def unbound(plan: LogicalPlan): Boolean =
    plan.expressions.exists(_.exists {
      case _: Parameter => true
      case s: SubqueryExpression => unbound(s.plan)
      case _ => false
    }) || plan.children.exists(unbound) || plan.innerChildren.exists {
      case p: LogicalPlan => unbound(p)
      case _ => false
    }
}
