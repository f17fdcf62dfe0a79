package io.sparkivm.catalog

import io.sparkivm.TestSpark
import io.sparkivm.errors.IvmException
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * Keys declared on Delta tables: checked against the rows when declared (NULL and duplicate
 * primary keys, orphan foreign keys under MATCH SIMPLE), stored as table properties and read
 * back as declared (names with backquotes, RELY), refused with the reason otherwise.
 */
class KeyConstraintsSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("key-constraints")

  private val dim = TableIdentifier("kc_dim", Some("default"))
  private val fact = TableIdentifier("kc_fact", Some("default"))

  override def beforeAll(): Unit = {
    spark.sql("CREATE TABLE kc_dim (id INT, `we``ird` INT) USING delta")
    spark.sql("INSERT INTO kc_dim VALUES (1, 10), (2, 20), (3, 30)")
    spark.sql("CREATE TABLE kc_fact (k INT, d INT, d2 INT) USING delta")
    spark.sql("INSERT INTO kc_fact VALUES (1, 1, NULL), (2, 2, NULL), (3, NULL, NULL)")
  }

  private def violated(f: => Unit): IvmException = {
    val e = intercept[IvmException](f)
    assert(e.getCondition == "IVM_CONSTRAINT_VIOLATED", e.getMessage)
    e
  }

  test("a primary key is checked against the rows, stored, and read back as declared") {
    KeyConstraints.add(spark, PrimaryKey("pk_dim", dim, Seq("id")))
    assert(KeyConstraints.primaryKey(spark, dim) == Some(PrimaryKey("pk_dim", dim, Seq("id"))))
    // One primary key per table.
    val second = intercept[IvmException](KeyConstraints.add(spark, PrimaryKey("pk2", dim, Seq("we`ird"))))
    assert(second.getCondition == "IVM_CONSTRAINT_ALREADY_EXISTS")
  }

  test("a foreign key references the primary key; orphans fail it, NULL keys do not (MATCH SIMPLE)") {
    val fk = ForeignKey("fk_d", fact, Seq("d"), dim, Seq("id"), rely = true)
    KeyConstraints.add(spark, fk)
    assert(KeyConstraints.of(spark, fact) == Seq(fk))
    spark.sql("INSERT INTO kc_fact VALUES (4, 9, NULL), (5, 8, NULL)")
    val e = violated(KeyConstraints.add(spark, ForeignKey("fk_again", fact, Seq("d"), dim, Seq("id"))))
    assert(e.getMessageParameters.get("violations").startsWith("2 keys have no row in"), e.getMessage)
    // Not the parent's primary key, or a parent without one.
    val notPk = intercept[IvmException](KeyConstraints.add(spark,
        ForeignKey("fk_w", fact, Seq("d2"), dim, Seq("we`ird"))))
    assert(notPk.getCondition == "IVM_CONSTRAINT_INVALID" && notPk.getMessage.contains("primary key"))
    val noPk = intercept[IvmException](KeyConstraints.add(spark, ForeignKey("fk_f", dim, Seq("id"), fact, Seq("k"))))
    assert(noPk.getCondition == "IVM_CONSTRAINT_INVALID" && noPk.getMessage.contains("no primary key"))
    assert(KeyConstraints.drop(spark, fact, "FK_D") && !KeyConstraints.drop(spark, fact, "fk_d"))
    assert(KeyConstraints.of(spark, fact).isEmpty)
  }

  test("NULL and duplicate primary keys are counted, with examples") {
    val nulls = violated(KeyConstraints.add(spark, PrimaryKey("pk_d", fact, Seq("d2"))))
    assert(nulls.getMessageParameters.get("violations").startsWith("5 rows have a NULL key"), nulls.getMessage)
    spark.sql("CREATE TABLE kc_dup (a INT, b STRING) USING delta")
    spark.sql("INSERT INTO kc_dup VALUES (1, 'x'), (1, 'x'), (1, 'y'), (2, 'x')")
    val dups = violated(KeyConstraints.add(spark, PrimaryKey("pk_ab", TableIdentifier("kc_dup"), Seq("a", "b"))))
    assert(dups.getMessageParameters.get("violations") == "1 keys appear more than once, for example (1, x, 2)")
    val single = violated(KeyConstraints.add(spark, PrimaryKey("pk_a", TableIdentifier("kc_dup"), Seq("a"))))
    assert(single.getMessageParameters.get("violations") == "1 keys appear more than once, for example (1, 3)")
    assert(KeyConstraints.of(spark, TableIdentifier("kc_dup")).isEmpty)
  }

  test("a stored constraint reads back whatever its columns and parent are named") {
    val t = TableIdentifier("t", Some("db"))
    val fk = ForeignKey("f", t, Seq("a`b", "c d"), TableIdentifier("p", Some("db2"), Some("spark_catalog")),
      Seq("x", "y"), rely = true)
    assert(KeyConstraints.parse("f", t, fk.text) == fk)
    assert(KeyConstraints.parse("f", t, fk.copy(rely = false).text) == fk.copy(rely = false))
    val pk = PrimaryKey("p", t, Seq("`q`"))
    assert(KeyConstraints.parse("p", t, pk.text) == pk)
    assert(intercept[IvmException](KeyConstraints.parse("x", t, "garbage")).getCondition == "IVM_CONSTRAINT_INVALID")
  }
}
