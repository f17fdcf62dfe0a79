package io.sparkivm.execution

import io.sparkivm.TestSpark
import io.sparkivm.catalog.{DeltaTables, ViewCatalog}
import io.sparkivm.changes.DeltaSources
import io.sparkivm.commands.{CreateMaterializedView, ViewLifecycle}
import io.sparkivm.parser.IvmStatementParser
import io.sparkivm.planner.ViewMaintenance
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.functions.col
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * KeyedViewRows: a view's backing table is arranged the second time a refresh asks for it
 * (never the first), and a lookup then gives exactly the table's rows of the keys asked for
 * (the kept columns, the row's file and index in the table, and the version), none for a key
 * with no row; after spark-ivm's own apply the rows follow the new version without being read
 * again; tables held on the driver whole, and lookups without keys, are not arranged.
 */
class KeyedViewRowsSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("resident-backing-rows")

  private val settings = Seq("spark.ivm.heldTables.maxRows" -> "0", "spark.ivm.state.buildInBackground" -> "false")

  override def beforeAll(): Unit = {
    settings.foreach { case (k, v) => spark.conf.set(k, v) }
    spark.sql("CREATE TABLE rbr_base (k INT, v BIGINT) USING delta")
    spark.sql("INSERT INTO rbr_base VALUES (1, 10), (2, 20), (3, 30), (4, 40), (2, 2)")
    ViewLifecycle.create(spark,
      IvmStatementParser.recognise("CREATE MATERIALIZED VIEW rbr_mv REFRESH POLICY INCREMENTAL AS " +
        "SELECT k, sum(v) AS s FROM rbr_base GROUP BY k").get.asInstanceOf[CreateMaterializedView])
  }

  override def afterAll(): Unit = settings.foreach { case (k, _) => spark.conf.unset(k) }

  private def meta = ViewCatalog.lookup(spark, Seq("rbr_mv"))
  private def snapshot = DeltaTables.log(spark, meta.backing).update()
  private lazy val maintenance = ViewAnalysis.reanalyze(spark, meta, incremental = true).maintenance
  private def columns = maintenance.foldColumns
  private def keys(ks: Int*): Seq[InternalRow] = ks.map(k => InternalRow(k))

  /** The table's rows of `ks` at its latest version: the kept columns, file, row index, version. */
  private def expected(ks: Int*): Set[Seq[Any]] = {
    val snap = snapshot
    val key = col(ViewMaintenance.quote(columns.head))
    DeltaSources.snapshot(spark, meta.backing, snap.version)
      .where(key.isin(ks: _*))
      .select(columns.map(c => col(ViewMaintenance.quote(c))) :+ col("_metadata.file_path") :+
          col("_metadata.row_index"): _*)
      .collect().map(r =>
        r.toSeq.map {
          case s: String => s
          case v => v
        } :+ snap.version).toSet
  }

  private def lookup(ks: Seq[InternalRow], refresh: String, made: () => Unit = () => ()) =
    KeyedViewRows.rows(spark, meta, snapshot, columns, maintenance.keyNames.size, ks, refresh, made)

  private def asSeqs(found: Option[(Seq[org.apache.spark.sql.catalyst.expressions.Attribute], Seq[InternalRow])])
      : Set[Seq[Any]] = {
    val (attrs, rows) = found.get
    rows.map(r =>
      attrs.indices.map(i =>
        r.get(i, attrs(i).dataType) match {
          case u: org.apache.spark.unsafe.types.UTF8String => u.toString
          case v => v
        })).toSet
  }

  test("the rows are arranged the second time a refresh asks, and give the table's rows of the keys") {
    var made = 0
    assert(lookup(keys(1, 2), "refresh-a", () => made += 1).isEmpty)
    assert(made == 0 && !KeyedViewRows.keptAt(snapshot, columns))
    val found = lookup(keys(1, 2, 9), "refresh-b", () => made += 1)
    assert(made == 1)
    val (attrs, _) = found.get
    assert(attrs.map(_.name) == columns ++ ViewMaintenance.PositionColumns)
    assert(asSeqs(found) == expected(1, 2))
    assert(KeyedViewRows.keptAt(snapshot, columns))
    assert(!KeyedViewRows.keptAt(snapshot, columns.take(1)))
    // Kept: a later lookup makes nothing.
    assert(asSeqs(lookup(keys(3), "refresh-c", () => made += 1)) == expected(3) && made == 1)
  }

  test("after spark-ivm's own apply the kept rows follow the new version, unread") {
    spark.sql("INSERT INTO rbr_base VALUES (1, 1), (5, 50)")
    assert(RefreshPipeline.refresh(spark, Seq("rbr_mv"), full = false).mode == "incremental")
    assert(KeyedViewRows.keptAt(snapshot, columns))
    var made = 0
    val found = lookup(keys(1, 2, 5), "refresh-d", () => made += 1)
    assert(made == 0)
    // The values are the table's; a place is the row's, or one in a file no longer in the table
    // (the apply then searches for the row: a place never needs correcting).
    val got = asSeqs(found)
    val want = expected(1, 2, 5)
    assert(got.map(_.take(columns.size)) == want.map(_.take(columns.size)), got)
    val files = DeltaSources.snapshot(spark, meta.backing, snapshot.version).select("_metadata.file_path")
      .collect().map(r => r.get(0): Any).toSet
    got.foreach { r =>
      assert(r.last == snapshot.version)
      val place = r.slice(columns.size, columns.size + 2)
      assert(r(columns.size) == null || want.exists(_.slice(columns.size, columns.size + 2) == place) ||
          !files.contains(r(columns.size)), r)
    }
  }

  test("no keys, no key columns, or a table held on the driver: nothing is looked up") {
    assert(lookup(Nil, "refresh-e").isEmpty)
    assert(KeyedViewRows.rows(spark, meta, snapshot, columns, 0, keys(1), "refresh-e", () => ()).isEmpty)
    spark.conf.set("spark.ivm.heldTables.maxRows", "20000")
    try {
      // Held whole on the driver: read from there, never arranged.
      assert(SmallTableRows.rows(spark, meta.backing, snapshot).isDefined)
      assert(SmallTableRows.at(spark, snapshot).isDefined)
      assert(lookup(keys(1), "refresh-f").isEmpty)
    } finally spark.conf.set("spark.ivm.heldTables.maxRows", "0")
  }
}
