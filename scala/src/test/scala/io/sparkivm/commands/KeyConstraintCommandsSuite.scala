package io.sparkivm.commands

import io.sparkivm.TestSpark
import io.sparkivm.catalog.{ForeignKey, KeyConstraints, PrimaryKey}
import io.sparkivm.errors.IvmException
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.parser.CatalystSqlParser
import org.apache.spark.sql.catalyst.plans.logical.{CreateTable, LogicalPlan, UnresolvedTableSpec}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * KeyConstraintCommands takes over exactly the plans that declare or drop a PRIMARY KEY or
 * FOREIGN KEY (CHECK constraints stay with Delta), strips the keys from the CREATE it runs, and
 * its commands store the keys with the table under the names given or generated from the table
 * and columns; a CREATE whose keys do not hold leaves no table, and keys on a table that is not a
 * Delta table of the session catalog are refused.
 */
class KeyConstraintCommandsSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("key-constraint-commands")

  private def parsed(sql: String): LogicalPlan = CatalystSqlParser.parsePlan(sql)
  private def intercepted(sql: String): Option[LogicalPlan] = KeyConstraintCommands.intercept(parsed(sql))
  private def run(sql: String): Unit = intercepted(sql) match {
    case Some(c: org.apache.spark.sql.execution.command.LeafRunnableCommand) => c.run(spark)
    case other => fail(s"not taken over: $other")
  }
  private def id(t: String) = TableIdentifier(t, Some("default"), Some("spark_catalog"))

  override def beforeAll(): Unit = {
    spark.sql("CREATE TABLE kcc_plain (a INT) USING parquet")
  }

  test("only key constraints are taken over, as plans alone") {
    assert(intercepted("ALTER TABLE t ADD CONSTRAINT t_pk PRIMARY KEY (a)").exists {
      case AddKeyConstraintCommand(Seq("t"), _) => true
      case _ => false
    })
    assert(intercepted("ALTER TABLE t ADD CONSTRAINT t_fk FOREIGN KEY (b) REFERENCES u (id)")
        .exists(_.isInstanceOf[AddKeyConstraintCommand]))
    assert(intercepted("ALTER TABLE t ADD CONSTRAINT positive CHECK (a > 0)").isEmpty)
    assert(intercepted("ALTER TABLE t DROP CONSTRAINT whatever").exists {
      case DropKeyConstraintCommand(Seq("t"), "whatever", false, _) => true
      case _ => false
    })
    assert(intercepted("CREATE TABLE t (a INT) USING delta").isEmpty)
    assert(intercepted("SELECT 1").isEmpty)
  }

  test("a CREATE with keys runs without them and declares them after") {
    val cmd = intercepted("CREATE TABLE t (a INT PRIMARY KEY, b INT, CONSTRAINT ck CHECK (b > 0)) USING delta")
    cmd match {
      case Some(CreateTableWithKeysCommand(Seq("t"), create: CreateTable, keys)) =>
        assert(keys.size == 1 && keys.head.getClass.getSimpleName == "PrimaryKeyConstraint")
        val left = create.tableSpec.asInstanceOf[UnresolvedTableSpec].constraints
        assert(left.size == 1 && left.head.getClass.getSimpleName == "CheckConstraint", left)
      case other => fail(s"$other")
    }
  }

  test("keys declared by CREATE and ALTER are stored under given or generated names") {
    run("CREATE TABLE kcc_dim (id INT PRIMARY KEY, v INT) USING delta")
    assert(KeyConstraints.primaryKey(spark, id("kcc_dim")) == Some(PrimaryKey("kcc_dim_pk", id("kcc_dim"), Seq("id"))))
    spark.sql("INSERT INTO kcc_dim VALUES (1, 10), (2, 20)")
    spark.sql("CREATE TABLE kcc_fact (k INT, d INT) USING delta")
    spark.sql("INSERT INTO kcc_fact VALUES (1, 1), (2, 2)")
    run("ALTER TABLE kcc_fact ADD CONSTRAINT Fact_Dim FOREIGN KEY (d) REFERENCES kcc_dim (id)")
    val fks = KeyConstraints.of(spark, id("kcc_fact")).collect { case f: ForeignKey => f }
    assert(fks.map(f => (f.name, f.columns, f.parent, f.parentColumns)) ==
        Seq(("fact_dim", Seq("d"), id("kcc_dim"), Seq("id"))), fks)
    run("ALTER TABLE kcc_fact DROP CONSTRAINT fact_dim")
    assert(KeyConstraints.of(spark, id("kcc_fact")).isEmpty)
  }

  test("a CREATE whose keys do not hold leaves no table") {
    spark.sql("CREATE TABLE kcc_nokey (a INT) USING delta")
    val e = intercept[IvmException](run(
        "CREATE TABLE kcc_bad (a INT, CONSTRAINT bad_fk FOREIGN KEY (a) REFERENCES kcc_nokey (a)) USING delta"))
    assert(e.getCondition == "IVM_CONSTRAINT_INVALID" && e.getMessage.contains("has no primary key"), e.getMessage)
    assert(!spark.catalog.tableExists("kcc_bad"))
    // IF NOT EXISTS on a table that exists declares nothing.
    run("CREATE TABLE IF NOT EXISTS kcc_nokey (a INT PRIMARY KEY) USING delta")
    assert(KeyConstraints.of(spark, id("kcc_nokey")).isEmpty)
  }

  test("a drop of a constraint that is not a key is handed to Spark; keys on other tables are refused") {
    spark.sql("CREATE TABLE kcc_other (a INT) USING delta")
    val drop = "ALTER TABLE kcc_other DROP CONSTRAINT IF EXISTS not_a_key"
    val spark_ = scala.util.Try(spark.sql(drop).collect()).failed.toOption.map(_.getMessage)
    // The plan the session's parser (Delta's) makes, as the extension sees it.
    val plan = org.apache.spark.sql.ivm.SessionInternals.parser(spark).parsePlan(drop)
    val ours = scala.util.Try(KeyConstraintCommands.intercept(plan).get
        .asInstanceOf[org.apache.spark.sql.execution.command.LeafRunnableCommand].run(spark)).failed.toOption
      .map(_.getMessage)
    assert(ours == spark_)
    Seq("ALTER TABLE kcc_plain ADD CONSTRAINT p PRIMARY KEY (a)",
      "ALTER TABLE kcc_missing ADD CONSTRAINT p PRIMARY KEY (a)").foreach { sql =>
      val e = intercept[IvmException](run(sql))
      assert(e.getCondition == "IVM_CONSTRAINT_INVALID", e.getMessage)
    }
  }
}
