package io.sparkivm.access

import io.sparkivm.TestSpark
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.ivm.SparkInternals
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * AccessPatterns: a view's query as a CQAP. Table occurrences are the atoms (a table's second
 * occurrence named `#2`), columns made equal by inner-join equalities are one variable named by
 * its first view column, ACCESS BY's columns are the inputs and the other variable columns the
 * outputs, aggregates carry no variable, and a variable bound in one atom only is dropped; a
 * filter of one table is its atom's selection. Computed columns, non-equality joins, aggregates
 * as inputs and access patterns naming missing or repeated columns are refused with the reason.
 */
class AccessPatternsSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("access-patterns")

  override def beforeAll(): Unit = {
    spark.sql("CREATE TABLE apt_cust (ckey INT, region STRING) USING delta")
    spark.sql("CREATE TABLE apt_ord (okey INT, cust INT, amount INT) USING delta")
    spark.sql("CREATE TABLE apt_edge (src INT, dst INT) USING delta")
  }

  private def plan(sql: String): LogicalPlan = SparkInternals.analyzed(spark.sql(sql))
  private def bind(sql: String, accessBy: String*) = {
    val p = plan(sql)
    AccessPatterns.bind(p, p.output.map(_.name), accessBy)
  }

  private val ordersOf = "SELECT c.ckey AS cust, o.okey FROM apt_cust c JOIN apt_ord o ON c.ckey = o.cust"

  test("atoms, variables, inputs and outputs of a join") {
    val b = bind(s"$ordersOf WHERE o.amount > 5 AND c.region = 'EU'", "cust").toOption.get
    assert(b.query.atoms == Seq(Atom("apt_cust", Set("cust")), Atom("apt_ord", Set("cust", "okey"))), b.query)
    assert(b.query.inputs == Set("cust") && b.query.outputs == Set("okey"))
    assert(b.columnVars == Seq(Some("cust"), Some("okey")))
    // Each table's filter is its atom's selection; the join equality is neither's.
    assert(b.selections.map(_.map(_.sql)) == Seq(Seq("(c.region = 'EU')"), Seq("(o.amount > 5)")), b.selections)
    assert(b.atomColumns(1).map(_._1).toSet == Set("cust", "okey"))
    val a = AccessPatterns.analysis(plan(ordersOf), Seq("cust", "okey"), Seq("cust"))
    assert(AccessPatterns.summary(a).startsWith("CQAP0"), AccessPatterns.summary(a))
    assert(AccessPatterns.cqap(plan(ordersOf), Seq("cust", "okey"), Seq("cust")).map(_.free) ==
      Right(Set("cust", "okey")))
  }

  test("a self-join names its second occurrence; group keys are variables, aggregates none") {
    val b = bind("SELECT e1.src AS a, e2.dst AS c, count(*) AS n FROM apt_edge e1 JOIN apt_edge e2 " +
        "ON e1.dst = e2.src GROUP BY e1.src, e2.dst", "a").toOption.get
    assert(b.query.atoms.map(_.name) == Seq("apt_edge", "apt_edge#2"))
    assert(b.columnVars.take(2) == Seq(Some("a"), Some("c")) && b.columnVars(2).isEmpty)
    // The joined variable is bound (no view column), named by its first table column.
    val bound = b.query.bound
    assert(bound.size == 1 && b.query.atoms.forall(_.vars.intersect(bound).nonEmpty), b.query)
    assert(b.query.inputs == Set("a") && b.query.outputs == Set("c"))
  }

  test("a variable bound in one atom only is summed out") {
    val b = bind("SELECT c.ckey AS cust, sum(o.amount) AS total FROM apt_cust c JOIN apt_ord o " +
        "ON c.ckey = o.cust GROUP BY c.ckey", "cust").toOption.get
    assert(b.query.vars == Set("cust"), b.query)
    assert(b.query.outputs.isEmpty)
  }

  test("what is not a CQAP is refused with the reason") {
    def why(sql: String, accessBy: String*): String = bind(sql, accessBy: _*).left.toOption.get
    assert(why("SELECT c.ckey + 1 AS k FROM apt_cust c", "k").contains("column k is computed"))
    assert(why("SELECT c.ckey AS cust, o.okey FROM apt_cust c JOIN apt_ord o ON c.ckey < o.cust", "cust")
        .contains("is not an equality of columns"))
    assert(why("SELECT o.cust, sum(o.amount) AS total FROM apt_ord o GROUP BY o.cust", "total")
        .contains("an input column is an aggregate's value"))
    assert(AccessPatterns.summary(Left("because")) == "not classified: because")
  }

  test("CREATE's check of an access pattern: existing columns, each once") {
    assert(AccessPatterns.check(Seq("cust", "okey"), Seq("CUST")).isEmpty)
    assert(AccessPatterns.check(Seq("cust", "okey"), Seq("nope")).contains(
        "the view has no column nope (its columns: cust, okey)"))
    assert(AccessPatterns.check(Seq("cust", "okey"), Seq("cust", "Cust")).contains("column cust is named twice"))
  }
}
