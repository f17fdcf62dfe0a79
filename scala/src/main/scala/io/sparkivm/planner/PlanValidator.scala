package io.sparkivm.planner

import io.sparkivm.catalog.ViewCatalog
import io.sparkivm.changes.DeltaSources
import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.types.{MapType, VariantType}

/**
 * Checks that a view's analyzed plan is in the class that counting IVM maintains exactly
 * (docs/architecture.md, "The model"): joins of every type, filters, deterministic projections and
 * generators, aggregates with GROUPING SETS / ROLLUP / CUBE, DISTINCT, UNION ALL, windows with
 * PARTITION BY (without it, over materialized views' rows) and subqueries in FROM (subquery
 * expressions, INTERSECT and EXCEPT are joins by then, see [[QueryRewrites]]), over Delta
 * tables. Anything else is refused with
 * an error that names the operator; only the view's REFRESH POLICY (AUTO, INCREMENTAL) turns
 * that refusal into refreshes by recomputation, and the view says so (DESCRIBE, every report).
 */
object PlanValidator {

  /** The Delta table occurrences of a valid plan; throws IVM_UNSUPPORTED_OPERATOR otherwise. */
  def validate(plan: LogicalPlan): Seq[SourceLeaf] = {
    val leaves = Seq.newBuilder[SourceLeaf]
    // inView: under a materialized view's catalog view, which reads its backing table's rows only.
    def visit(p: LogicalPlan, inView: Boolean): Unit = {
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
        // WITH RECURSIVE: its own checks in RecursiveRows.
        case _: UnionLoop | _: UnionLoopRef =>
        case v: View if v.isTempView => throw temporary(v)
        case _: View | _: SubqueryAlias | _: Project | _: Filter | _: Distinct | _: Union |
            _: Aggregate | _: Sort =>
        case _: Join =>
        case w: Window if w.partitionSpec.nonEmpty =>
        // Computed again at Pre and at Post over the rows a materialized view keeps: it costs those rows.
        case w: Window if inView || overViews(w.child) =>
        case _: Window => throw IvmErrors.unsupported(
            "A window function without PARTITION BY below the top of the query",
            "Its every row depends on every input row, so any change would recompute the whole view; " +
              "add PARTITION BY (a refresh then recomputes only the partitions that changed), move the " +
              "window to the top of the view's query (the view then computes it when it is read), or have it " +
              "read a subquery in FROM or a materialized view (the view then recomputes it over that one's rows).")
        case g: Generate if g.generator.deterministic =>
        case _: GlobalLimit | _: LocalLimit | _: Tail | _: Offset if inView =>
          throw IvmErrors.unsupported("LIMIT / OFFSET",
            "It is the ORDER BY ... LIMIT of a materialized view this query reads, which that view applies " +
              "when it is read; read a materialized view of the same query without its LIMIT, and apply the " +
              "LIMIT when reading this view.")
        case _: GlobalLimit | _: LocalLimit | _: Tail | _: Offset =>
          throw IvmErrors.unsupported("LIMIT / OFFSET",
            "Only a LIMIT at the top of the query, after its ORDER BY, is maintained (the view applies it " +
              "when it is read); move it there, or apply it when reading the view.")
        // GROUPING SETS, ROLLUP and CUBE: each input row once per grouping set.
        case _: Expand =>
        case _: Sample => throw IvmErrors.unsupported("TABLESAMPLE", "Sample when reading the view.")
        case _: Deduplicate => throw IvmErrors.unsupported("dropDuplicates on a subset of columns",
            "Use SELECT DISTINCT or GROUP BY.")
        // Its version may move with the time (TIMESTAMP AS OF current_date() - 1) with no change to
        // read: recomputed.
        case leaf: LeafNode if SourceLeaf.isTimeTravel(leaf) =>
          throw IvmErrors.unsupported(
            s"The time-travelled read of ${SourceLeaf.timeTravelled(leaf)} (VERSION AS OF, TIMESTAMP AS OF)",
            "It reads a version named in the query, not the table's changes; read the table itself, or copy " +
              "that version into a table of its own (CREATE TABLE ... AS SELECT ... VERSION AS OF) and read that.")
        case leaf: LeafNode => throw SourceLeaf.deltaPath(leaf).map { path =>
            IvmErrors.unsupported(s"The Delta table read by its path $path",
              "A materialized view follows the tables it reads by their names in the catalog; register the " +
                "table by its path (CREATE TABLE name USING delta LOCATION '<path>') and read it by that name.")
          }.getOrElse(IvmErrors.notDelta(leaf.simpleString(2), leaf.nodeName))
        case other => throw IvmErrors.unsupported(s"The operator ${other.nodeName}",
            "It is not in the class of queries that spark-ivm maintains (docs/sql.md lists it).")
      }
      p.expressions.foreach(checkExpression)
      p match {
        case SourceLeaf(_) =>
        case v: View => v.children.foreach(visit(_, inView || ViewCatalog.isMaterializedView(v.desc)))
        case _ => p.children.foreach(visit(_, inView))
      }
    }
    visit(plan, inView = false)
    leaves.result()
  }

  /**
   * True if every table under `plan` is read through a materialized view (its catalog view):
   * rows kept in a backing table, as many as the view has, not as its tables have.
   */
  private def overViews(plan: LogicalPlan): Boolean = plan match {
    case v: View => ViewCatalog.isMaterializedView(v.desc)
    case SourceLeaf(_) => false
    case leaf: LeafNode => SourceLeaf.isConstant(leaf)
    case other => other.children.forall(overViews)
  }

  /**
   * A view without GROUP BY keeps each row by its value, which the backing table's MERGE
   * compares and a refresh groups by; Spark can neither compare nor group MAP and VARIANT
   * values (nor, where Spark has them, spatial ones), at any depth of a column's type.
   */
  def requireComparableRows(shape: ViewShape, columns: Seq[String]): Unit = shape match {
    case r: RowsShape =>
      r.top.output.zip(columns).iterator.flatMap { case (a, name) =>
        ColumnTypes.uncomparable(a.dataType).map(name -> _)
      }.nextOption().foreach { case (name, part) =>
        val (kind, instead) = part match {
          case _: MapType => ("MAP", s"map_entries($name) or to_json($name)")
          case VariantType => ("VARIANT", s"to_json($name) or the fields you need (variant_get($name, path, type))")
          case other => (other.sql, s"to_json($name)")
        }
        throw IvmErrors.unsupported(s"The $kind column $name of a view without GROUP BY",
          s"Each row of such a view is kept by its value, and Spark cannot compare $kind values; " +
            s"select $instead instead, or group by the other columns.")
      }
    case _ =>
  }

  private def temporary(v: View) = IvmErrors.temporarySource(s"the temporary view ${v.desc.identifier.unquotedString}")

  /** Any view, whatever its refresh policy, must read permanent tables and views only. */
  def requirePermanent(plan: LogicalPlan): Unit = plan.foreachWithSubqueries {
    case v: View if v.isTempView => throw temporary(v)
    case _ =>
  }

  /**
   * What in a query reads where its rows are stored rather than the rows: a file-source
   * metadata column (`_metadata`, in any part of the query, its subqueries and the views it
   * reads) or `input_file_name()` and its kin. Such a query is refused whatever the refresh
   * policy: even a recomputation reads the files of a pinned version its own way.
   */
  def rowLocation(plan: LogicalPlan): Option[String] = {
    var found = Option.empty[String]
    def note(what: String): Unit = if (found.isEmpty) found = Some(what)
    plan.foreachWithSubqueries { p =>
      p.expressions.foreach(_.foreach {
        case a: Attribute if MetadataAttribute.isValid(a.metadata) || FileSourceMetadataAttribute.isValid(a.metadata) =>
          note(s"The metadata column ${a.name}")
        case f @ (_: InputFileName | _: InputFileBlockStart | _: InputFileBlockLength) =>
          note(s"The function ${f.prettyName}()")
        case _ =>
      })
    }
    found
  }

  // unix_timestamp() reads the time through its child, current_timestamp(): of a column it does not.
  private val TimeDependent = Set("CurrentTimestamp", "CurrentDate", "Now", "LocalTimestamp",
    "CurrentTime", "CurrentTimeZone", "CurrentUser", "CurrentBatchTimestamp")

  /** A function of when, where or by whom the query runs (the time, the user, the time zone). */
  def contextDependent(e: Expression): Boolean = TimeDependent.contains(e.getClass.getSimpleName)

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
        s"A subquery expression (${s.prettyName}) where Spark cannot turn it into a join",
        "Subqueries in WHERE, SELECT and HAVING are maintained as joins; one inside a join " +
          "condition or under OR with other subqueries is not: rewrite it as a join.")
    case x if contextDependent(x) =>
      throw IvmErrors.unsupported(
        s"The time-dependent function ${x.prettyName}()",
        "A time function is maintained in a filter (WHERE, an inner join's condition, or an outer " +
          "join's condition on the side it keeps only where it matches): each refresh reads it at its " +
          "own instant. Elsewhere (a view's columns) every refresh would change every row: compute it " +
          "when reading the view, or store the time in a base table.")
    case x if (!x.deterministic && x.children.forall(_.deterministic)) || orderDependent(x) =>
      throw IvmErrors.unsupported(s"The non-deterministic function ${x.prettyName}()",
        "A view must give the same rows each time its query runs on the same data.")
    case _ =>
  }
}
