package io.sparkivm.catalog

import java.nio.file.Files

import io.sparkivm.TestSpark
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.ivm.SparkInternals
import org.scalatest.funsuite.AnyFunSuite

/**
 * A refresh's session keeps each table's catalog entry from its first lookup until released, so
 * it reads the table it pinned even if DDL elsewhere moves the name; every other session, and
 * the refresh's once released or told to forget, asks the catalog each time.
 */
class DeltaTablesSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("delta-tables")

  private def dir(): String = Files.createTempDirectory("ivm-delta-tables").toUri.toString

  private def tableAt(name: String, location: String): Unit = {
    spark.sql(s"DROP TABLE IF EXISTS $name")
    spark.sql(s"CREATE TABLE $name (k INT) USING delta LOCATION '$location'")
  }

  private def dataPath(s: SparkSession, id: TableIdentifier): String =
    DeltaTables.log(s, id).dataPath.toUri.getPath.stripSuffix("/")

  private def pathOf(location: String): String = new Path(location).toUri.getPath.stripSuffix("/")

  test("a scoped session keeps the entry it looked up; others see the table moved") {
    val (first, second) = (dir(), dir())
    tableAt("dt_moved", first)
    val id = TableIdentifier("dt_moved", Some("default"))
    val refresh = DeltaTables.scoped(SparkInternals.isolated(spark))
    try {
      assert(dataPath(refresh, TableIdentifier("dt_moved")) == pathOf(first))
      tableAt("dt_moved", second) // DDL in another session while the refresh runs
      assert(dataPath(spark, id) == pathOf(second))
      // The same table however the name is written.
      assert(dataPath(refresh, id) == pathOf(first))
      assert(dataPath(refresh, TableIdentifier("DT_MOVED", Some("DEFAULT"))) == pathOf(first))
      assert(DeltaTables.entry(refresh, id).location.getPath.stripSuffix("/") == pathOf(first))
      DeltaTables.forget(refresh, id)
      assert(dataPath(refresh, id) == pathOf(second))
      tableAt("dt_moved", first)
      assert(dataPath(refresh, id) == pathOf(second))
    } finally DeltaTables.release(refresh)
    assert(dataPath(refresh, id) == pathOf(first), "a released session asks the catalog again")
  }

  test("a missing table is not kept: created later, it is found") {
    spark.sql("DROP TABLE IF EXISTS dt_later")
    val refresh = DeltaTables.scoped(SparkInternals.isolated(spark))
    try {
      val id = TableIdentifier("dt_later", Some("default"))
      intercept[Exception](DeltaTables.log(refresh, id))
      val location = dir()
      tableAt("dt_later", location)
      assert(dataPath(refresh, id) == pathOf(location))
    } finally DeltaTables.release(refresh)
  }

  test("entryIfExists: none for a missing table or database, the entry once created") {
    spark.sql("DROP TABLE IF EXISTS dt_maybe")
    val id = TableIdentifier("dt_maybe", Some("default"))
    val refresh = DeltaTables.scoped(SparkInternals.isolated(spark))
    try {
      assert(DeltaTables.entryIfExists(refresh, id).isEmpty)
      assert(DeltaTables.entryIfExists(refresh, TableIdentifier("dt_maybe", Some("dt_no_such_db"))).isEmpty)
      val location = dir()
      tableAt("dt_maybe", location)
      val entry = DeltaTables.entryIfExists(refresh, id)
      assert(entry.map(_.location.getPath.stripSuffix("/")).contains(pathOf(location)))
      assert(DeltaTables.log(refresh, entry.get).dataPath.toUri.getPath.stripSuffix("/") == pathOf(location))
    } finally DeltaTables.release(refresh)
  }

  test("a table named by its path needs no catalog entry") {
    val location = dir()
    spark.sql(s"CREATE TABLE delta.`${pathOf(location)}` (k INT) USING delta")
    val refresh = DeltaTables.scoped(SparkInternals.isolated(spark))
    try assert(dataPath(refresh, TableIdentifier(pathOf(location), Some("delta"))) == pathOf(location))
    finally DeltaTables.release(refresh)
  }
}
