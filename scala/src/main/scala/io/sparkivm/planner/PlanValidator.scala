package io.sparkivm.planner

import io.sparkivm.IvmErrors
import io.sparkivm.changes.DeltaSources
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.Inner
import org.apache.spark.sql.catalyst.plans.logical._

/**
 * Checks that a view's analyzed plan is in the class that counting IVM maintains exactly
 * (docs/architecture.md, "The model"): inner joins, filters, deterministic projections, aggregates,
 * DISTINCT, UNION ALL and subqueries in FROM, over Delta tables. Anything else is refused with
 * an error that names the operator; only the view's REFRESH POLICY (AUTO, INCREMENTAL) turns
 * that refusal into refreshes by recomputation, and the view says so (DESCRIBE, every report).
 */
object PlanValidator {

  /** The Delta table occurrences of a valid plan; throws IVM_UNSUPPORTED_OPERATOR otherwise. */
  def validate(plan: LogicalPlan): Seq[SourceLeaf] = {
    val leaves = Seq.newBuilder[SourceLeaf]
    def visit(p: LogicalPlan): Unit = {
      p match {
        case SourceLeaf(leaf) =>
          DeltaSources.requireDelta(leaf.table, leaf.provider)
          leaf.output.find(a => MetadataAttribute.isValid(a.metadata) || FileSourceMetadataAttribute.isValid(a.metadata))
            .foreach { a =>
              throw IvmErrors.unsupported(s"The metadata column ${a.name} of ${leaf.name}",
                "It describes where a row is stored (file, row index), which changes when Delta rewrites " +
                  "files without changing the rows; select data columns only.")
            }
          leaves += leaf
        case leaf: LeafNode if SourceLeaf.isConstant(leaf) =>
        case v: View if v.isTempView => throw temporary(v)
        case _: View | _: SubqueryAlias | _: Project | _: Filter | _: Distinct | _: Union |
             _: Aggregate | _: Sort =>
        case j: Join if j.joinType == Inner =>
        case j: Join => throw IvmErrors.unsupported(s"${j.joinType.sql} JOIN",
          "Only inner joins are maintained; an outer join can often be written as an inner join " +
            "plus a UNION ALL of the unmatched rows kept in another view.")
        case _: Window => throw IvmErrors.unsupported("A window function (OVER ...)",
          "Compute it when reading the view instead.")
        case _: GlobalLimit | _: LocalLimit | _: Tail | _: Offset =>
          throw IvmErrors.unsupported("LIMIT / OFFSET", "Apply it when reading the view.")
        case _: Expand => throw IvmErrors.unsupported("GROUPING SETS / ROLLUP / CUBE",
          "Create one view per grouping set, or a view grouped by all the columns.")
        case i: Intersect => throw IvmErrors.unsupported(if (i.isAll) "INTERSECT ALL" else "INTERSECT",
          "Write it as an inner join on all the columns.")
        case e: Except => throw IvmErrors.unsupported(if (e.isAll) "EXCEPT ALL" else "EXCEPT",
          "Write it as an aggregate that counts the rows of both sides.")
        case _: Generate => throw IvmErrors.unsupported("A generator (explode, LATERAL VIEW)",
          "Materialize the exploded rows in a Delta table first.")
        case _: Sample => throw IvmErrors.unsupported("TABLESAMPLE", "Sample when reading the view.")
        case _: Deduplicate => throw IvmErrors.unsupported("dropDuplicates on a subset of columns",
          "Use SELECT DISTINCT or GROUP BY.")
        case leaf: LeafNode => throw IvmErrors.notDelta(leaf.simpleString(2), leaf.nodeName)
        case other => throw IvmErrors.unsupported(s"The operator ${other.nodeName}",
          "It is not in the class of queries that spark-ivm maintains (docs/sql.md lists it).")
      }
      p.expressions.foreach(checkExpression)
      p match {
        case SourceLeaf(_) =>
        case _ => p.children.foreach(visit)
      }
    }
    visit(plan)
    leaves.result()
  }

  private def temporary(v: View) = IvmErrors.of("IVM_TEMPORARY_SOURCE",
    "name" -> v.desc.identifier.unquotedString)

  /** Any view, whatever its refresh policy, must read permanent tables and views only. */
  def requirePermanent(plan: LogicalPlan): Unit = plan.foreach {
    case v: View if v.isTempView => throw temporary(v)
    case _ =>
  }

  private val TimeDependent = Set("CurrentTimestamp", "CurrentDate", "Now", "LocalTimestamp",
    "CurrentTime", "CurrentTimeZone", "CurrentUser", "CurrentBatchTimestamp", "UnixTimestamp")

  /**
   * Aggregates whose value depends on the order rows arrive in: Spark documents them as
   * non-deterministic, though not all are marked so (any_value is first in disguise).
   */
  private def orderDependent(e: Expression): Boolean = e match {
    case _: aggregate.First | _: aggregate.Last | _: aggregate.AnyValue => true
    case _ => false
  }

  private def checkExpression(e: Expression): Unit = e.foreach {
    case s: SubqueryExpression => throw IvmErrors.unsupported(
      s"A subquery expression (${s.prettyName})", "Rewrite IN / EXISTS / scalar subqueries as joins.")
    case x if TimeDependent.contains(x.getClass.getSimpleName) => throw IvmErrors.unsupported(
      s"The time-dependent function ${x.prettyName}()",
      "Its value would differ between refreshes; store the time in a base table instead.")
    case x if (!x.deterministic && x.children.forall(_.deterministic)) || orderDependent(x) =>
      throw IvmErrors.unsupported(s"The non-deterministic function ${x.prettyName}()",
        "A view must give the same rows each time its query runs on the same data.")
    case _ =>
  }
}
