package io.sparkivm.planner

import java.util.Locale

import scala.collection.mutable

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.LeftSemi
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.types._

/**
 * Reads of a large table restricted to a set of keys, each computed once per refresh and shared.
 *
 * An operator recomputed by key ([[DeltaRules]]' `onChangedKeys`) reads each input twice, at Pre
 * and at Post, and a table read by several occurrences (TPC-H Q21 reads `lineitem` three times)
 * once per occurrence. Where the changed keys spread over all of a table's files, each such
 * read scans the whole table: TPC-H Q21's refresh scanned `lineitem` nine times where its
 * recomputation scans it three times. Here the first restricted read of a table at a version
 * runs as one query (the columns any occurrence of the table reads, the rows of the keys), held
 * on the driver; every later read of the table at that version by the same key columns and the
 * same or fewer keys filters those rows, and runs no job.
 *
 * Pre is derived from Post: the Pre rows of the keys are Post's rows of the keys minus the net
 * change's rows of the keys (Pre = Post - D, the Z-relation identity; selection and projection
 * are linear, so it holds for the restricted, projected rows too). So when the change is held on
 * the driver, a refresh scans each table once, at the pinned version, whose Delta snapshot is
 * already loaded.
 *
 * It applies to the reads made through [[pre]] and [[post]] (recognized by identity) of tables
 * of at least `minBytes`, restricted to at most `maxKeys` keys held on the driver, when the
 * view's columns per table are known ([[noteColumnsRead]]). A read whose rows are too many to
 * hold (`spark.ivm.localMaxRows`) stays part of its query.
 */
class SharedScans(reader: LeafReader, steps: PlanSteps, minBytes: Long, maxKeys: Int) {

  private case class Read(leaf: SourceLeaf, post: Boolean)
  private val reads = new java.util.IdentityHashMap[LogicalPlan, Read]()

  /** The key values, the columns (lower case, the table's order) and the rows of one read. */
  private case class ReadRows(keys: Set[Seq[Any]], columns: Seq[StructField], rows: Seq[InternalRow])

  /** The rows of the reads made, by table id, version and key columns. */
  private val held = mutable.Map[(String, Long, Seq[String]), ReadRows]()

  /** Reads whose rows were too many to hold on the driver: read as part of their query instead. */
  private val tooLarge = mutable.Set[(String, Long, Seq[String])]()

  /** Columns (lower case) that the view reads of each table (by name), from [[noteColumnsRead]]. */
  private val columnsRead = mutable.Map[String, Set[String]]()

  def pre(leaf: SourceLeaf): LogicalPlan = track(reader.pre(leaf), Read(leaf, post = false))
  def post(leaf: SourceLeaf): LogicalPlan = track(reader.post(leaf), Read(leaf, post = true))

  private def track(plan: LogicalPlan, read: Read): LogicalPlan = { reads.put(plan, read); plan }

  /**
   * Records the columns that `plan` reads of each table occurrence under it, as Spark's column
   * pruning finds them: from the top down, a node needs the columns its own expressions reference
   * and those of its output that its parent needs (a projection or aggregate only for the outputs
   * needed; a semi or anti join nothing of its right side but its condition's; a union, DISTINCT
   * or set operation all of its children's), starting from all of `plan`'s output.
   */
  def noteColumnsRead(plan: LogicalPlan): Unit = {
    def visit(node: LogicalPlan, needed: Set[ExprId]): Unit = {
      def refs(es: Seq[Expression]) = es.flatMap(_.references.map(_.exprId)).toSet
      // A node shared by two places of the plan (an inlined CTE) is needed for both.
      neededOf.put(node, Option(neededOf.get(node)).map(_ ++ needed).getOrElse(needed))
      node match {
        case SourceLeaf(leaf) =>
          val names = leaf.output.filter(a => needed(a.exprId)).map(a => lower(a.name))
          columnsRead(leaf.name) = columnsRead.getOrElse(leaf.name, Set.empty) ++ names
        case Project(list, child) => visit(child, refs(list.filter(a => needed(a.exprId))))
        case Aggregate(groups, aggs, child, _) => visit(child, refs(groups ++ aggs.filter(a => needed(a.exprId))))
        case _: Union | _: Distinct | _: Intersect | _: Except | _: Deduplicate =>
          node.children.foreach(c => visit(c, c.output.map(_.exprId).toSet))
        case _ =>
          val own = node.references.map(_.exprId).toSet
          node.children.foreach(c => visit(c, (own ++ needed).intersect(c.output.map(_.exprId).toSet)))
      }
    }
    visit(plan, plan.output.map(_.exprId).toSet)
  }

  /** The output of each node of the noted plan that the nodes above it read (by identity). */
  private val neededOf = new java.util.IdentityHashMap[LogicalPlan, Set[ExprId]]()

  /**
   * The attributes of `node`'s output that the nodes above it read, for a node of the plan given
   * to [[noteColumnsRead]]; all of its output for any other.
   */
  def needed(node: LogicalPlan): AttributeSet =
    Option(neededOf.get(node)).map(ids => AttributeSet(node.output.filter(a => ids(a.exprId))))
      .getOrElse(node.outputSet)

  /**
   * `plan`'s rows whose `keys` equal, null-safely, a row of `affected` (its first columns), if
   * `plan` is a tracked read of a large table, the keys are its columns and `affected` is held
   * on the driver; the output attributes are `plan`'s (those the view does not read are NULL).
   */
  def restrict(plan: LogicalPlan, keys: Seq[Expression], affected: LogicalPlan,
      probe: Option[Expression]): Option[LogicalPlan] = {
    val read = Option(reads.get(plan)).filter(_ => steps.collects).orNull
    if (read == null || reader.sizeInBytes(read.leaf) < minBytes) return None
    val keyAttrs = keys.zip(affected.output).collect {
      case (a: Attribute, k)
          if plan.outputSet.contains(a) && a.dataType == k.dataType &&
            KeyProbe.equalsAsJvm(a.dataType) => a
    }
    if (keyAttrs.size != keys.size) return None
    (for {
      known <- columnsRead.get(read.leaf.name)
      (tableId, preVersion, postVersion) <- reader.versions(read.leaf)
      affectedRows <- steps.rowsOnDriver(affected) if affectedRows.size <= maxKeys
    } yield {
      val keyNames = keyAttrs.map(a => lower(a.name))
      val columns = keptColumns(plan, known, keyNames)
      val wanted: Set[Seq[Any]] = affectedRows.iterator.map(r =>
        keyAttrs.indices.map(i => r.get(i, affected.output(i).dataType)): Seq[Any]).toSet
      val changed = reader.delta(read.leaf).isDefined
      val version = if (read.post || !changed) postVersion else preVersion
      def lookup(v: Long) = held.get((tableId, v, keyNames))
        .filter(h => h.columns == columns && wanted.subsetOf(h.keys))
      def compute(from: LogicalPlan, v: Long): Option[ReadRows] = if (tooLarge((tableId, v, keyNames))) None
      else {
        val byName = from.output.map(a => lower(a.name) -> a).toMap
        val rebind: Expression => Expression = _.transform {
          case a: Attribute if plan.outputSet.contains(a) =>
            byName(lower(a.name))
        }
        val cond = keyAttrs.zip(affected.output).map { case (k, a) => EqualNullSafe(rebind(k), a): Expression }
          .reduce(And)
        val scan = probe.map(p => Filter(rebind(p), from)).getOrElse(from)
        val query = Project(columns.map(c => byName(c.name)), Join(scan, affected, LeftSemi, Some(cond), JoinHint.NONE))
        // Rows kept between refreshes by this one key, if the reader keeps them; else the query.
        val kept = if (keyNames.size != 1) None
        else reader.keyedRows(read.leaf, keyNames.head, columns,
          wanted.map(_.head), atPost = v == postVersion, Project(columns.map(c => byName(c.name)), from))
        val rows = kept.orElse(steps.rowsOnDriver(steps.materialize(query)))
        if (rows.isEmpty) tooLarge += ((tableId, v, keyNames))
        rows.map(rs => keep(v, ReadRows(wanted, columns, rs)))
      }
      def keep(v: Long, h: ReadRows): ReadRows = { held((tableId, v, keyNames)) = h; h }
      val found = lookup(version).orElse {
        // An unchanged table's Pre rows are its Post rows: read at the pinned version.
        if (read.post || !changed) compute(if (read.post) plan else reader.post(read.leaf), version)
        else {
          // Pre = Post - D, from Post's held rows (read now if need be) and the change held here.
          val derived = for {
            d <- reader.deltaOnDriver(read.leaf) if columns.forall(c => SharedScans.comparable(c.dataType))
            post <- lookup(postVersion).orElse(compute(reader.post(read.leaf), postVersion))
            rows <- minus(post, d, keyNames)
          } yield keep(preVersion, ReadRows(post.keys, columns, rows))
          derived.orElse(compute(plan, preVersion))
        }
      }
      found.map(h => relation(plan, h, keyNames, wanted))
    }).flatten
  }

  /**
   * The Post read of `leaf` narrowed to the rows for which `where` (over the leaf's output)
   * holds, from the rows the reader keeps between refreshes, as a relation with the read's
   * attributes (columns the view does not read are NULL): for a filter that keeps few rows
   * of a table kept in memory (TPC-H Q22's customers whose balance lies between the old and the
   * new average), instead of a scan. None where the rows are not kept.
   */
  def postWhere(leaf: SourceLeaf, where: Expression): Option[LogicalPlan] = if (!steps.collects) None
  else {
    val plan = post(leaf)
    for {
      known <- columnsRead.get(leaf.name)
      columns = keptColumns(plan, known)
      byName = plan.output.map(a => lower(a.name) -> a).toMap
      leafAt = leaf.output.map(a => a.exprId -> byName.get(lower(a.name))).toMap
      if where.references.forall(r => leafAt.get(r.exprId).flatten.exists(a => known(lower(a.name))))
      bound = where.transform {
        case a: Attribute if leafAt.contains(a.exprId) =>
          val i = columns.indexWhere(_.name == lower(leafAt(a.exprId).get.name))
          BoundReference(i, columns(i).dataType, columns(i).nullable)
      }
      rows <- reader.rowsWhere(leaf, columns, bound)
    } yield relation(plan, ReadRows(Set.empty, columns, rows), Nil, Set.empty, all = true)
  }

  /**
   * Post's rows of `leaf` whose column `key` holds one of `keys` (Catalyst values), from the
   * rows the reader keeps in memory by that key, as a relation with the read's attributes
   * (columns the view does not read are NULL): a dimension's rows of the keys a fact's change
   * references, instead of a scan with the keys as a filter (which reads every file where the
   * keys spread over them). None where they are not kept: a table under `minBytes`, the
   * reader's own conditions (its size, the setting, the first refresh that asks).
   */
  def keptPost(leaf: SourceLeaf, key: Attribute, keys: Set[Any]): Option[LogicalPlan] =
    if (!steps.collects || reader.sizeInBytes(leaf) < minBytes) None
    else {
      val plan = reader.post(leaf)
      val keyName = lower(key.name)
      for {
        known <- columnsRead.get(leaf.name)
        columns = keptColumns(plan, known, Seq(keyName))
        byName = plan.output.map(a => lower(a.name) -> a).toMap
        rows <- reader.keyedRows(leaf, keyName, columns, keys, atPost = true,
          Project(columns.map(c => byName(c.name)), plan))
      } yield relation(plan, ReadRows(Set.empty, columns, rows), Nil, Set.empty, all = true)
    }

  /** Post's held rows minus the change's rows of the same keys; None if a count went negative. */
  private def minus(post: ReadRows, d: DriverDeltaRows, keyNames: Seq[String]): Option[Seq[InternalRow]] = {
    val types = post.columns.map(_.dataType)
    val at = d.positions(post.columns.map(_.name))
    if (at.contains(-1)) return None
    val keyAt = keyNames.map(k => post.columns.indexWhere(_.name == k))
    val counts = new RowCounts
    post.rows.foreach(r => counts.add(types.indices.map(i => r.get(i, types(i))), 1L))
    d.rows.foreach { r =>
      val v = types.indices.map(i => r.get(at(i), types(i)))
      if (post.keys.contains(keyAt.map(v))) counts.add(v, -r.getInt(d.signAt))
    }
    counts.rows
  }

  /**
   * ReadRows rows of `wanted` keys as a relation with `plan`'s own attributes (columns not held are
   * NULL): laid out in its column order here, once, rather than under a renaming projection that
   * Spark's optimizer would evaluate over every row each time it plans a query reading them.
   */
  private def relation(plan: LogicalPlan, h: ReadRows, keyNames: Seq[String], wanted: Set[Seq[Any]],
      all: Boolean = false): LogicalPlan = {
    val types = h.columns.map(_.dataType)
    val rows = if (all || h.keys == wanted) h.rows
    else {
      val keyAt = keyNames.map(k => h.columns.indexWhere(_.name == k))
      h.rows.filter(r => wanted.contains(keyAt.map(i => r.get(i, types(i)))))
    }
    val at = plan.output.map(a => h.columns.indexWhere(_.name == lower(a.name)))
    LocalRelation(plan.output.zip(at).map { case (a, i) => if (i < 0) a.withNullability(true) else a },
      rows.map(r => new GenericInternalRow(at.map(i => if (i < 0) null else r.get(i, types(i))).toArray[Any])))
  }

  private def lower(s: String): String = s.toLowerCase(Locale.ROOT)

  /** The columns of `plan` kept for a read: those the view reads (`known`) and `keys`, lower-cased. */
  private def keptColumns(plan: LogicalPlan, known: Set[String], keys: Seq[String] = Nil): Seq[StructField] =
    plan.output.filter(a => known(lower(a.name)) || keys.contains(lower(a.name)))
      .map(a => StructField(lower(a.name), a.dataType, a.nullable))
}

object SharedScans {

  /** Types whose Catalyst values compare equal by `equals` (so rows can be counted in a map). */
  def comparable(t: DataType): Boolean = t match {
    case BooleanType | ByteType | ShortType | IntegerType | LongType | FloatType | DoubleType | DateType |
        TimestampType | TimestampNTZType | _: DecimalType | _: StringType => true
    case _ => false
  }
}
