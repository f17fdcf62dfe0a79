package io.sparkivm.execution

import java.util.Locale

import io.sparkivm.catalog.DeltaTables
import io.sparkivm.changes.{DeltaSources, DriverChange, DriverTableRead, KnownFiles, PinnedSource, TableChange}
import io.sparkivm.conf.IvmConf
import io.sparkivm.errors.IvmErrors
import io.sparkivm.planner.{
  Branch, CountedTable, DeltaRules, DriverDeltaRows, KeyCounts, LeafReader, PlanOnly, PlanSteps, SourceLeaf, TimeFilters,
  ViewMaintenance
}
import io.sparkivm.state.StoredKeyCounts
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{
  Alias, Attribute, AttributeReference, BindReferences, Expression, LessThan, Literal, Predicate
}
import org.apache.spark.sql.catalyst.plans.logical.{Filter, LocalRelation, LogicalPlan, Project, Union, UnionLoop}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.catalyst.util.CharVarcharUtils
import org.apache.spark.sql.ivm.{HeldRelation, SparkInternals}
import org.apache.spark.sql.types.{DataType, IntegerType, StructField, StructType}
import org.apache.spark.sql.{DataFrame, SparkSession}

/**
 * Reads each table occurrence at the versions pinned at the start of a refresh: Pre at the
 * version the view consumed last, Post at the pinned version, and the net change in between,
 * read for all tables at once before planning ([[io.sparkivm.changes.ChangeFeed]]).
 */
class PinnedReader(spark: SparkSession, consumed: Map[String, Long],
    pinned: Map[String, PinnedSource], view: String, steps: PlanSteps = PlanOnly,
    changes: Map[String, TableChange] = Map.empty, stateRoot: Option[Path] = None,
    /** The instant the view's rows are at, where its filters read the time ([[io.sparkivm.planner.TimeFilters]]). */
    instantBefore: Option[Long] = None,
    /** A recursive CTE's rows before the refresh, where the view keeps them ([[ViewMaintenance.recursiveRows]]). */
    recursiveRows: UnionLoop => Option[(LogicalPlan, Attribute)] = _ => None)
    extends LeafReader {

  /** The sign column of delta rows, shared by this reader's deltas and its rules. */
  private val sign: Attribute =
    AttributeReference(DeltaSources.Multiplicity, IntegerType, nullable = false)()

  private val fkSettings = PlanningConf.fk(spark, steps)

  /** The delta rules over this reader's leaves. */
  val rules: DeltaRules = new DeltaRules(this, sign, fkSettings, instantBefore = instantBefore)

  /** The same rules, with the branches of some subtrees computed elsewhere. */
  def rulesWith(precomputed: LogicalPlan => Option[Seq[Branch]]): DeltaRules =
    new DeltaRules(this, sign, fkSettings, precomputed, instantBefore)

  override def recursiveRowsAtPre(loop: UnionLoop): Option[(LogicalPlan, Attribute)] = recursiveRows(loop)

  /** The view's rows from scratch, at the pinned versions. */
  def fullRows(maintenance: ViewMaintenance): DataFrame =
    SparkInternals.dataFrame(spark, maintenance.fullPlan(rules))

  /**
   * The occurrence `leaf` of its table at `version`, under its own attribute ids (plans built
   * here join occurrences of one table at one version: self-joins). Rows held here, in the
   * occurrence's own column order, are a relation with its attributes: under a renaming
   * projection, Spark's optimizer would evaluate that projection over every held row each time
   * it plans a query that reads them (ConvertToLocalRelation; TPC-DS query 4 reads its held
   * tables 30 times, 7 s of each recomputation).
   */
  private def read(leaf: SourceLeaf, version: Long): LogicalPlan = heldRows(leaf, version) match {
    case Some(held: LocalRelation) if sameColumns(leaf, held.output.map(a => a.name -> a.dataType)) =>
      HeldRelation.of(spark, leaf.output, held.data)
    case Some(held) => bind(leaf, SparkInternals.dataFrame(spark, held), None)
    case None => bind(leaf, DeltaSources.snapshot(spark, leaf.table, version), None)
  }

  /**
   * A small table's rows at `version` held on the driver ([[SmallTableRows]]), as a relation with
   * fresh attributes: a dimension such as TPC-H's `nation` is then joined on the driver, where a
   * scan of its one file would make every query that reads it a Spark job. Post's rows are held
   * per version: advanced from the rows held at Pre by the change held here (Post = Pre + D), or
   * read once (one job, as a scan would be). Pre's, where it differs, are Post's minus the change
   * (Pre = Post - D), or not held.
   */
  private def heldRows(leaf: SourceLeaf, version: Long): Option[LogicalPlan] = for {
    p <- pinned.get(leaf.name) if p.sizeInBytes <= SmallTableRows.MaxBytes && IvmConf.KnownFilesEnabled.get(spark)
    snapshot = KnownFiles.snapshot(DeltaTables.log(spark, leaf.table), p.version)
    // CHAR and VARCHAR columns are padded or checked by a table read, not by a relation.
    if snapshot.metadata.id == p.tableId && !CharVarcharUtils.hasCharVarchar(snapshot.metadata.schema)
    local = changes.get(leaf.name).collect { case DriverChange(schema, data) => (schema, data) }
    post <- local.zip(consumed.get(leaf.name)).flatMap { case ((schema, data), from) =>
      SmallTableRows.at(spark, snapshot).orElse(SmallTableRows.advanced(spark, snapshot, from, schema, data))
    }.orElse(SmallTableRows.rows(spark, leaf.table, snapshot))
    rows <- if (version == p.version) Some(post)
    else derivedPre.synchronized(derivedPre.getOrElseUpdate(leaf.name,
        local.flatMap { case (schema, data) => SmallTableRows.plus(snapshot.metadata.schema, post, schema, data, -1) }))
  } yield LocalRelation(DataTypeUtils.toAttributes(snapshot.metadata.schema), rows)

  /** Pre's rows of held tables, derived once per refresh (a plan reads Pre in several branches). */
  private val derivedPre = scala.collection.mutable.Map[String, Option[Seq[InternalRow]]]()

  def pre(leaf: SourceLeaf): LogicalPlan = consumed.get(leaf.name) match {
    case Some(v) => read(leaf, v)
    case None => throw IvmErrors.internal(s"no consumed version for ${leaf.name}")
  }

  override def preFiles(leaf: SourceLeaf): LogicalPlan = consumed.get(leaf.name) match {
    case Some(v) => bind(leaf, DeltaSources.snapshot(spark, leaf.table, v), None)
    case None => throw IvmErrors.internal(s"no consumed version for ${leaf.name}")
  }

  /**
   * Read by the driver (no job) from the files whose statistics allow a match, where they total
   * at most `spark.ivm.changes.localMaxBytes`, as a change of that size is: the rows a time
   * filter's move lets in or out are a change of the view's input.
   */
  override def preFilesWhere(leaf: SourceLeaf, where: Expression): Option[LogicalPlan] =
    consumed.get(leaf.name).filter(_ => IvmConf.KnownFilesEnabled.get(spark)).flatMap { v =>
      val log = DeltaTables.log(spark, leaf.table)
      val snap = KnownFiles.snapshot(log, v)
      val sameColumns = snap.metadata.schema.fieldNames.toSeq.map(_.toLowerCase(Locale.ROOT)) ==
        leaf.output.map(_.name.toLowerCase(Locale.ROOT))
      val files = if (sameColumns) KnownFiles.matching(log, snap, Seq(TimeFilters.forSkipping(where))) else Nil
      if (!sameColumns || files.map(_.size).sum > IvmConf.ChangesLocalMaxBytes.get(spark)) None
      else DriverTableRead.rows(spark, snap, files).map { rows =>
        val holds =
          Predicate.createInterpreted(BindReferences.bindReference(TimeFilters.evaluable(where), leaf.output))
        HeldRelation.of(spark, leaf.output, rows.filter(holds.eval))
      }
    }

  def post(leaf: SourceLeaf): LogicalPlan = pinned.get(leaf.name) match {
    case Some(p) => read(leaf, p.version)
    case None => leaf.plan // not a Delta table (views with ivm.refresh = full only): read as is
  }

  def delta(leaf: SourceLeaf): Option[LogicalPlan] = changes.get(leaf.name).filter(_.nonEmpty).map {
    // Rows held here in the occurrence's own column order: a relation with its attributes. Under
    // a renaming projection instead, Spark's optimizer would evaluate that projection over every
    // row each time it plans a query that reads the change (ConvertToLocalRelation).
    case DriverChange(schema, data)
        if schema.length == leaf.output.length + 1 && sameColumns(leaf,
          schema.fields.toSeq.init.map(f => f.name -> f.dataType)) =>
      HeldRelation.of(spark, leaf.output :+ sign, data)
    case c => bind(leaf, c.frame(spark), Some(sign))
  }

  /** Whether `columns` (name, type) are the occurrence's columns, in its order. */
  private def sameColumns(leaf: SourceLeaf, columns: Seq[(String, DataType)]): Boolean =
    columns.length == leaf.output.length && leaf.output.zip(columns).forall { case (a, (name, dataType)) =>
      a.name.equalsIgnoreCase(name) && a.dataType == dataType
    }

  override def deltaOnDriver(leaf: SourceLeaf): Option[DriverDeltaRows] =
    changes.get(leaf.name).filter(_.nonEmpty).collect { case DriverChange(schema, data) =>
      DriverDeltaRows(schema, data)
    }

  override def versions(leaf: SourceLeaf): Option[(String, Long, Long)] =
    for (p <- pinned.get(leaf.name); c <- consumed.get(leaf.name)) yield (p.tableId, c, p.version)

  override def keyCounts(table: CountedTable, keys: Seq[Any]): Option[KeyCounts] =
    for {
      source <- pinned.get(table.leaf.name)
      from <- consumed.get(table.leaf.name)
      counts <- ArrangedKeyCounts.read(spark, table, keys, source, from, changes.get(table.leaf.name),
        post(table.leaf), refreshToken,
        stateRoot.map(StoredKeyCounts.dirOf(_, source.tableId, table.definition)))
    } yield counts

  override def keyedRows(leaf: SourceLeaf, key: String, columns: Seq[StructField], keys: Iterable[Any],
      atPost: Boolean, all: => LogicalPlan): Option[Seq[InternalRow]] =
    for {
      source <- pinned.get(leaf.name)
      from <- consumed.get(leaf.name)
      rows <- KeyedTableRows.read(spark, leaf.table, key, columns, keys, source, from, atPost,
        changes.get(leaf.name), all, refreshToken)
    } yield rows

  override def rowsWhere(leaf: SourceLeaf, columns: Seq[StructField], where: Expression): Option[Seq[InternalRow]] =
    for {
      source <- pinned.get(leaf.name)
      from <- consumed.get(leaf.name)
      rows <- KeyedTableRows.where(spark, leaf.table, columns, source, from, changes.get(leaf.name), where)
    } yield rows

  /** Who asks for counts and rows: one refresh (its plan may ask for the same counts more than once). */
  private val refreshToken = java.util.UUID.randomUUID().toString

  override def sizeInBytes(leaf: SourceLeaf): Long =
    pinned.get(leaf.name).map(_.sizeInBytes).getOrElse(Long.MaxValue)

  def preDel(leaf: SourceLeaf): LogicalPlan = delta(leaf) match {
    case None => post(leaf)
    case Some(d) =>
      val deleted = Project(leaf.output, Filter(LessThan(sign, Literal(0)), d))
      Union(post(leaf), deleted)
  }

  /** Rows of each changed table's net change (read before planning). */
  def changeCounts(): Map[String, Long] = changes.map { case (t, c) => t -> c.rows }

  def release(): Unit = changes.values.foreach(_.release())

  /** The plan of `df`, with the occurrence's own attributes (by name) and the sign column if given. */
  private def bind(leaf: SourceLeaf, df: DataFrame, mAttr: Option[Attribute]): LogicalPlan = {
    val src = SparkInternals.analyzed(df)
    val byName = src.output.map(a => a.name.toLowerCase(java.util.Locale.ROOT) -> a).toMap
    def find(name: String) = byName.getOrElse(name.toLowerCase(java.util.Locale.ROOT),
      throw IvmErrors.internal(s"${leaf.name} has no column $name"))
    val cols = leaf.output.map(a => Alias(find(a.name), a.name)(exprId = a.exprId))
    val sign = mAttr.map(ma => Alias(find(DeltaSources.Multiplicity), ma.name)(exprId = ma.exprId))
    Project(cols ++ sign, src)
  }
}
