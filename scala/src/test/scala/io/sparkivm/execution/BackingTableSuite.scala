package io.sparkivm.execution

import io.sparkivm.TestSpark
import io.sparkivm.catalog.{DeltaTables, ViewCatalog}
import io.sparkivm.commands.{CreateMaterializedView, ViewLifecycle}
import io.sparkivm.parser.IvmStatementParser
import io.sparkivm.planner.ViewMaintenance
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * BackingTable: CREATE writes the view's rows in one commit carrying the refresh record (in the
 * commit's userMetadata and the table property) and Delta's transaction; an apply with no
 * change still commits the record, changing no row, and leaves the session's settings as they
 * were; an overwrite replaces every row; `current` reads the rows (with their places on request,
 * which are the rows' own); `distinctValues` is sorted, distinct, and None past its limit.
 */
class BackingTableSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("backing-table")

  override def beforeAll(): Unit = {
    spark.sql("CREATE TABLE btb_base (k INT, v INT) USING delta")
    spark.sql("INSERT INTO btb_base VALUES (1, 10), (2, 20), (2, 5)")
    ViewLifecycle.create(spark,
      IvmStatementParser.recognise("CREATE MATERIALIZED VIEW btb_mv AS " +
        "SELECT k, sum(v) AS s FROM btb_base GROUP BY k").get.asInstanceOf[CreateMaterializedView])
  }

  private def meta = ViewCatalog.lookup(spark, Seq("btb_mv"))
  private def log = DeltaTables.log(spark, meta.backing)
  private def view: Set[Row] = spark.table("btb_mv").collect().toSet

  test("CREATE commits the rows with the refresh record and the view's transaction") {
    val snapshot = log.update()
    val (record, foreign) = ViewCatalog.lastRefresh(spark, meta)
    assert(record.number == 0 && foreign.isEmpty && record.backingVersion == snapshot.version)
    val info = log.history.getHistory(snapshot.version, Some(snapshot.version)).head
    assert(info.userMetadata.contains(snapshot.metadata.configuration(ViewCatalog.RecordProperty)))
    assert(snapshot.transactions.get(meta.id).contains(0L))
    assert(view == Set(Row(1, 10L), Row(2, 25L)))
    assert(BackingTable.sizeInBytes(spark, meta) > 0)
    assert(BackingTable.stateRoot(spark, meta.backing).toString == s"${log.dataPath}/_ivm_state")
  }

  test("an apply with no change commits the record only, and restores the session's settings") {
    val before = log.update().version
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", "the user's")
    try {
      val (last, _) = ViewCatalog.lastRefresh(spark, meta)
      val maintenance = ViewAnalysis.reanalyze(spark, meta, incremental = true).maintenance
      val metrics = BackingTable.apply(spark, meta, maintenance, None, last.copy(number = last.number + 1))
      assert(metrics == ApplyMetrics(0, 0, 0) && metrics.total == 0)
      assert(spark.conf.get("spark.databricks.delta.commitInfo.userMetadata") == "the user's")
      assert(spark.conf.getOption("spark.databricks.delta.write.txnAppId").isEmpty)
    } finally spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
    val snapshot = log.update()
    assert(snapshot.version == before + 1 && snapshot.transactions.get(meta.id).contains(1L))
    assert(ViewCatalog.recordedNumber(snapshot.metadata.configuration).contains(1L))
    assert(view == Set(Row(1, 10L), Row(2, 25L)))
  }

  test("current reads the rows, with their own places on request; an overwrite replaces them") {
    val plain = SparkInternals.dataFrame(spark, BackingTable.current(spark, meta))
    assert(plain.columns.toSeq == spark.table(meta.backing.quotedString).columns.toSeq)
    spark.conf.set("spark.ivm.heldTables.maxRows", "0")
    try {
      val placed = SparkInternals.dataFrame(spark, BackingTable.current(spark, meta, positions = true))
      assert(placed.columns.toSeq.takeRight(3) == ViewMaintenance.PositionColumns)
      val version = log.update().version
      val own = spark.table(meta.backing.quotedString).selectExpr("k", "_metadata.file_path", "_metadata.row_index")
        .collect().map(r => (r.get(0), r.getString(1), r.getLong(2))).toSet
      assert(placed.collect().map(r =>
        (r.getAs[Any]("k"), r.getAs[String](ViewMaintenance.PositionColumns(0)),
          r.getAs[Long](ViewMaintenance.PositionColumns(1)))).toSet == own)
      assert(placed.collect().forall(_.getAs[Long](ViewMaintenance.PositionColumns(2)) == version))
    } finally spark.conf.unset("spark.ivm.heldTables.maxRows")
    val (last, _) = ViewCatalog.lastRefresh(spark, meta)
    val replacement = spark.table(meta.backing.quotedString).where("k = 2")
      .localCheckpoint()
    val maintenance = ViewAnalysis.prepare(ViewAnalysis.analyze(spark, meta.queryText, "default"), Seq("k", "s"),
      incremental = true, instant = 0L).maintenance
    BackingTable.overwrite(spark, meta, replacement, last.copy(number = last.number + 1), maintenance)
    assert(view == Set(Row(2, 25L)))
  }

  test("distinct values, sorted, or none past the limit") {
    val df = spark.range(0, 10).selectExpr("(9 - id) % 4 AS x")
    assert(BackingTable.distinctValues(df, 4).contains(Seq(0L, 1L, 2L, 3L)))
    assert(BackingTable.distinctValues(df, 3).isEmpty)
  }
}
