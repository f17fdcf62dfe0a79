package io.sparkivm.access

import scala.jdk.CollectionConverters._

import io.sparkivm.TestSpark
import io.sparkivm.catalog.ViewCatalog
import io.sparkivm.commands.{CreateMaterializedView, ViewLifecycle}
import io.sparkivm.errors.IvmException
import io.sparkivm.execution.RefreshPipeline
import io.sparkivm.parser.IvmStatementParser
import net.razorvine.pickle.{IObjectConstructor, Pickler, Unpickler}
import org.apache.spark.sql.SparkSession
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * LookupTrees: a lookup of a view with ACCESS BY answers, from trees built on the first
 * lookup, exactly the view's rows with those inputs (a COUNT(*) view's counts included); the
 * first lookup after a refresh moves the trees forward by the tables' changes and answers as the
 * view does then; a cursor closed before its answers are read expires; a view without trees (no
 * ACCESS BY, not a triangle listing; an aggregate) or inputs named otherwise get null and a
 * reason; forgetting the trees drops them.
 */
class LookupTreesSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("resident-trees")

  private val ordersOf = "SELECT c.ckey AS cust, o.okey AS okey FROM rtr_cust c JOIN rtr_ord o ON c.ckey = o.cust"
  private val counted = "SELECT c.region, o.cust, count(*) AS n FROM rtr_cust c " +
    "JOIN rtr_ord o ON c.ckey = o.cust GROUP BY c.region, o.cust"
  // The same with its group keys renamed, as a view's columns often are.
  private val countedAs = "SELECT c.region AS area, o.cust AS customer, count(*) AS n FROM rtr_cust c " +
    "JOIN rtr_ord o ON c.ckey = o.cust GROUP BY c.region, o.cust"

  private def create(sql: String): Unit =
    ViewLifecycle.create(spark, IvmStatementParser.recognise(sql).get.asInstanceOf[CreateMaterializedView])

  override def beforeAll(): Unit = {
    // Rows arrive pickled as PySpark reads them: a row is _create_row_inbound_converter(schema)(values).
    Unpickler.registerConstructor("pyspark.sql.types", "_parse_datatype_json_string",
      (args: Array[AnyRef]) => args(0))
    Unpickler.registerConstructor("pyspark.sql.types", "_create_row_inbound_converter",
      (_: Array[AnyRef]) => ((values: Array[AnyRef]) => values.toSeq): IObjectConstructor)
    spark.sql("CREATE TABLE rtr_cust (ckey INT, region STRING) USING delta")
    spark.sql("INSERT INTO rtr_cust VALUES (1, 'EU'), (2, 'US'), (3, 'EU')")
    spark.sql("CREATE TABLE rtr_ord (okey INT, cust INT) USING delta")
    spark.sql("INSERT INTO rtr_ord VALUES (10, 1), (11, 1), (12, 2), (13, 3), (14, 9)")
    create(s"CREATE MATERIALIZED VIEW rtr_orders REFRESH POLICY INCREMENTAL ACCESS BY (cust) AS $ordersOf")
    create(s"CREATE MATERIALIZED VIEW rtr_counts REFRESH POLICY INCREMENTAL ACCESS BY (region) AS $counted")
    create(s"CREATE MATERIALIZED VIEW rtr_counts_as REFRESH POLICY INCREMENTAL ACCESS BY (area) AS $countedAs")
    create("CREATE MATERIALIZED VIEW rtr_plain AS SELECT ckey FROM rtr_cust")
  }

  private def pickled(values: Any*): Array[Byte] = new Pickler(true, false).dumps(values.asJava)

  private def open(view: String, inputs: (String, Any)*): LookupTrees.LookupCursor =
    LookupTrees.open(spark, view, inputs.map(_._1).mkString("\u0000"), pickled(inputs.map(_._2): _*))

  /** A lookup of a view that has trees. */
  private def lookup(view: String, inputs: (String, Any)*): LookupTrees.LookupCursor = {
    val c = open(view, inputs: _*)
    assert(c != null, LookupTrees.describe(spark, view))
    c
  }

  /** The answers in batches of `n`, until the empty batch. */
  private def answers(c: LookupTrees.LookupCursor, n: Int = 2): Seq[Seq[Any]] = {
    val out = Seq.newBuilder[Seq[Any]]
    var done = false
    while (!done) {
      val batch = new Unpickler().loads(c.next(n)).asInstanceOf[java.util.List[Seq[Any]]].asScala.toSeq
      assert(batch.size <= n)
      out ++= batch
      done = batch.isEmpty
    }
    out.result()
  }

  /** The view's rows (read once), as (the input column's value, the other columns). */
  private def byInput(view: String): Seq[(Any, Seq[Any])] =
    spark.table(view).collect().map(r => r.get(0) -> r.toSeq.tail).toSeq
  private def rows(of: Seq[(Any, Seq[Any])], input: Any): Seq[Seq[Any]] = of.filter(_._1 == input).map(_._2)

  private def sameBag(a: Seq[Seq[Any]], b: Seq[Seq[Any]]): Unit =
    assert(a.groupBy(identity).map { case (k, v) => k -> v.size } == b.groupBy(identity).map { case (k, v) =>
        k -> v.size
      }, s"$a against $b")

  test("a lookup answers the view's rows with those inputs") {
    val orders = byInput("rtr_orders")
    Seq(1, 2, 9, 4).foreach(cust => sameBag(answers(lookup("rtr_orders", "cust" -> cust)), rows(orders, cust)))
    assert(LookupTrees.describe(spark, "rtr_orders").startsWith("view trees held: "))
    // A COUNT(*) view: each answer is a tuple with its count.
    sameBag(answers(lookup("rtr_counts", "REGION" -> "EU")), rows(byInput("rtr_counts"), "EU"))
    sameBag(answers(lookup("rtr_counts_as", "area" -> "EU")), rows(byInput("rtr_counts_as"), "EU"))
    assert(LookupTrees.describe(spark, "rtr_counts_as").startsWith("view trees held: "))
  }

  test("the first lookup after a refresh moves the trees forward by the changes") {
    spark.sql("INSERT INTO rtr_ord VALUES (15, 2), (16, 9)")
    spark.sql("DELETE FROM rtr_ord WHERE okey = 10")
    spark.sql("INSERT INTO rtr_cust VALUES (9, 'US')")
    Seq("rtr_orders", "rtr_counts", "rtr_counts_as").foreach(v => RefreshPipeline.refresh(spark, Seq(v), full = false))
    val orders = byInput("rtr_orders")
    Seq(1, 2, 9).foreach(cust => sameBag(answers(lookup("rtr_orders", "cust" -> cust)), rows(orders, cust)))
    assert(LookupTrees.describe(spark, "rtr_orders").contains("the last refresh's changes moved"),
      LookupTrees.describe(spark, "rtr_orders"))
    sameBag(answers(lookup("rtr_counts", "region" -> "US")), rows(byInput("rtr_counts"), "US"))
    sameBag(answers(lookup("rtr_counts_as", "area" -> "US")), rows(byInput("rtr_counts_as"), "US"))
  }

  test("a cursor closed before its answers are read expires") {
    val c = open("rtr_orders", "cust" -> 2)
    assert(new Unpickler().loads(c.next(1)).asInstanceOf[java.util.List[_]].size == 1)
    c.close()
    val e = intercept[IvmException](c.next(1))
    assert(e.getCondition == "IVM_LOOKUP_EXPIRED", e.getMessage)
  }

  test("views without trees, and inputs named otherwise, get null and a reason") {
    assert(open("rtr_plain") == null)
    assert(LookupTrees.describe(spark, "rtr_plain").startsWith("no view trees: the view has no ACCESS BY"))
    assert(open("rtr_orders", "okey" -> 1) == null)
    val meta = ViewCatalog.lookup(spark, Seq("rtr_plain"))
    assert(LookupTrees.explain(spark, meta).startsWith("read the materialized result filtered by the inputs"))
    assert(LookupTrees.enumeration(spark, meta).isEmpty)
    assert(LookupTrees.explain(spark, ViewCatalog.lookup(spark, Seq("rtr_orders")))
        .startsWith("enumerate the view's CQAP0 view trees"))
    LookupTrees.forget(ViewCatalog.lookup(spark, Seq("rtr_orders")).view)
    assert(LookupTrees.describe(spark, "rtr_orders").startsWith("view trees held: "))
  }
}
