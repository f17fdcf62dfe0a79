package io.sparkivm.catalog

import io.sparkivm.TestSpark
import io.sparkivm.errors.IvmException
import org.apache.spark.sql.SparkSession
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * Spark's own DDL and DML on a materialized view's two catalog objects are refused as they are
 * parsed, naming the statement to use instead; the same statements on other objects, on a
 * temporary view of the name, or run by spark-ivm itself pass. The view's objects are made here
 * as CREATE MATERIALIZED VIEW makes them (a catalog view marked and naming its backing table,
 * a backing table naming its view).
 */
class CatalogGuardSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("catalog-guard")

  override def beforeAll(): Unit = {
    spark.sql("CREATE TABLE cg_base (i INT) USING delta")
    spark.sql(s"CREATE TABLE ${ViewCatalog.BackingPrefix}cg_mv (i INT) USING delta " +
      s"TBLPROPERTIES ('${ViewCatalog.ViewProperty}' = 'default.cg_mv')")
    spark.sql(s"CREATE VIEW cg_mv TBLPROPERTIES ('${ViewCatalog.MarkerProperty}' = 'true', " +
      s"'${ViewCatalog.BackingProperty}' = 'default.${ViewCatalog.BackingPrefix}cg_mv') AS " +
      s"SELECT i FROM ${ViewCatalog.BackingPrefix}cg_mv")
    spark.sql("CREATE VIEW cg_plain AS SELECT i FROM cg_base")
  }

  private def guard(sql: String): Unit = CatalogGuard.check(spark, spark.sessionState.sqlParser.parsePlan(sql))

  private def refused(sql: String): IvmException = {
    val e = intercept[IvmException](guard(sql))
    assert(e.getCondition == "IVM_MATERIALIZED_VIEW_OBJECT", e.getMessage)
    e
  }

  private val backing = s"${ViewCatalog.BackingPrefix}cg_mv"

  test("DDL on the catalog view is refused, naming the materialized-view statement to use") {
    val drop = refused("DROP VIEW cg_mv")
    assert(drop.getMessageParameters.get("instead") == "DROP MATERIALIZED VIEW `spark_catalog`.`default`.`cg_mv`")
    assert(refused("ALTER VIEW cg_mv AS SELECT 1 AS i").getMessageParameters.get("statement") == "ALTER VIEW ... AS")
    assert(refused("CREATE OR REPLACE VIEW cg_mv AS SELECT 1 AS i").getMessageParameters.get("effect")
        .contains("plain view"))
    assert(refused("ALTER VIEW cg_mv RENAME TO cg_other").getMessageParameters.get("instead").contains("new name"))
    refused("DROP TABLE default.cg_mv")
  }

  test("writes and DDL on the backing table are refused, naming its view") {
    Seq(s"INSERT INTO $backing VALUES (1)", s"DELETE FROM $backing WHERE i = 1", s"UPDATE $backing SET i = 2",
      s"MERGE INTO $backing b USING cg_base s ON b.i = s.i WHEN MATCHED THEN DELETE", s"TRUNCATE TABLE $backing",
      s"DROP TABLE $backing", s"ALTER TABLE $backing RENAME TO cg_x").foreach { sql =>
      val e = refused(sql)
      assert(e.getMessageParameters.get("role") == "stores the rows of materialized view " +
          "`spark_catalog`.`default`.`cg_mv`", sql)
    }
    assert(refused(s"INSERT INTO $backing VALUES (1)").getMessageParameters.get("instead")
        .startsWith("REFRESH MATERIALIZED VIEW"))
  }

  test("other objects, a temporary view of the name, and spark-ivm's own statements pass") {
    Seq("DROP VIEW cg_plain", "INSERT INTO cg_base VALUES (1)", "DELETE FROM cg_base", "DROP TABLE cg_base",
      "CREATE OR REPLACE VIEW cg_plain AS SELECT 2 AS i", "DROP VIEW IF EXISTS nothing_here").foreach(guard)
    spark.sql("CREATE TEMPORARY VIEW cg_mv AS SELECT 1 AS i")
    try guard("DROP VIEW cg_mv")
    finally spark.sql("DROP VIEW cg_mv") // the temporary one
    refused("DROP VIEW cg_mv")
    CatalogGuard.internal(guard("DROP VIEW cg_mv"))
    CatalogGuard.internal(guard(s"INSERT INTO $backing VALUES (1)"))
  }
}
