package io.sparkivm.catalog

import org.apache.spark.sql.catalyst.parser.CatalystSqlParser
import org.scalatest.funsuite.AnyFunSuite

class ViewColumnsSuite extends AnyFunSuite {

  test("a column list and a layout read back as they were written") {
    val columns = Seq(
      ViewColumn("k", Some(CatalystSqlParser.parseDataType("DECIMAL(10, 2)")), notNull = true, Some("it's the key")),
      ViewColumn("a b", Some(CatalystSqlParser.parseDataType("ARRAY<STRUCT<x: INT, y: STRING COLLATE UTF8_LCASE>>"))),
      ViewColumn("plain"),
      ViewColumn("c", comment = Some("ünïcode \"quoted\" \\ back")))
    val storage = ViewStorage(Seq("plain", "a b"), Nil)
    val props = ViewColumns.properties(columns, storage)
    assert(ViewColumns.columns(props) == columns)
    assert(ViewColumns.storage(props) == storage)
    assert(ViewColumns.storage(ViewColumns.properties(Nil, ViewStorage(Nil, Seq("c")))) == ViewStorage(Nil, Seq("c")))
  }

  test("nothing declared writes nothing and reads as nothing") {
    assert(ViewColumns.properties(Nil, ViewStorage()).isEmpty)
    assert(ViewColumns.columns(Map.empty).isEmpty && ViewColumns.storage(Map.empty).isEmpty)
  }
}
