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

  /** Where the head of one of spark-ivm's statements ends: just past its first AS outside
   *  parentheses (CREATE's query follows), or at the end of the text. */
  def headEnd(sql: String): Int = {
    val tokens =
      try Tokenizer.tokens(sql)
      catch { case _: TokenizeError => return sql.length }
    var depth = 0
    tokens.find {
      case Symbol("(", _) => depth += 1; false
      case Symbol(")", _) => depth -= 1; false
      case Word(w, false, _) => depth == 0 && w.equalsIgnoreCase("AS")
      case _ => false
    }.map(_.offset + "AS".length).getOrElse(sql.length)
  }

  /**
   * `head` (the part of one of spark-ivm's statements before its query, which Spark's grammar
   * cannot parse) with its markers (`:name`, `?`: `REFRESH MATERIALIZED VIEW IDENTIFIER(:v)`)
   * replaced by the SQL of their values, and `context` less the positional values it used, for
   * the query after it. A head that does not tokenize is left for the statement's parser to
   * report.
   */
  def substitutedHead(head: String, context: ParameterContext): (String, ParameterContext) = {
    val values = namedOrPositional(context)
    try substitute(head, values)
    catch { case _: TokenizeError => (head, values) }
  }

  /** EXECUTE IMMEDIATE's values (USING a AS x, b AS y, or USING a, b) as named or positional
   *  ones; a mix of both, and other contexts, as they are. */
  private def namedOrPositional(context: ParameterContext): ParameterContext = context match {
    case HybridParameterContext(values, names) if names.nonEmpty && names.forall(_.nonEmpty) =>
      NamedParameterContext(names.zip(values).toMap)
    case HybridParameterContext(values, names) if names.forall(_.isEmpty) => PositionalParameterContext(values)
    case other => other
  }

  private def substitute(head: String, context: ParameterContext): (String, ParameterContext) = {
    val out = new StringBuilder
    var pos = 0
    var used = 0
    def value(token: Token, next: Int): Option[(String, Int)] = (token, context) match {
      case (Symbol("?", _), PositionalParameterContext(params)) if used < params.size =>
        used += 1
        Some(params(used - 1).sql -> next)
      case (Symbol(":", at), NamedParameterContext(params)) =>
        Tokenizer.next(head, next) match {
          case (Word(name, false, wordAt), after) if wordAt == at + 1 => params.get(name).map(_.sql -> after)
          case _ => None
        }
      case _ => None
    }
    var done = false
    while (!done) {
      val (token, next) = Tokenizer.next(head, pos)
      token match {
        case _: End => done = true
        case t =>
          value(t, next) match {
            case Some((sql, after)) =>
              out ++= head.substring(pos, t.offset) ++= sql
              pos = after
            case None =>
              out ++= head.substring(pos, next)
              pos = next
          }
      }
    }
    out ++= head.substring(pos)
    val rest = context match {
      case PositionalParameterContext(params) => PositionalParameterContext(params.drop(used))
      case other => other
    }
    (out.toString, rest)
  }

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
