package io.sparkivm.planner

import scala.util.Random

import io.sparkivm.TestSpark
import io.sparkivm.execution.RefreshSteps
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.LeftSemi
import org.apache.spark.sql.catalyst.plans.logical.{Aggregate, Join, LocalRelation, LogicalPlan}
import org.apache.spark.sql.expressions.Window
import org.apache.spark.sql.functions._
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.IntegerType
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * The invariant of a key restriction: `KeyRestriction(plan, keys, affected)` returns exactly the
 * rows of `plan` whose keys equal (null-safely) a row of `affected`, multiplicities included, over
 * random data with NULL keys and duplicates, through every operator it pushes into; and the semi
 * join lands below the aggregates it can cut.
 */
class KeyRestrictionSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("key-restriction")

  /** Values in 0 until `domain`, one in eight NULL. */
  private def table(rnd: Random, cols: Seq[String], rows: Int, domain: Int = 6): DataFrame = {
    import spark.implicits._
    val data = Seq.fill(rows)(cols.map(_ => if (rnd.nextInt(8) == 0) None else Some(rnd.nextInt(domain))))
    data.map(r => (r(0), r(1), r(2))).toDF(cols: _*)
  }

  private def rows(plan: LogicalPlan): Seq[String] =
    SparkInternals.dataFrame(spark, plan).collect().toSeq.map(_.toString).sorted

  private def restricted(plan: LogicalPlan, key: String, keys: Set[Option[Int]], steps: PlanSteps): LogicalPlan = {
    val affected = LocalRelation.fromExternalRows(
      Seq(org.apache.spark.sql.catalyst.expressions.AttributeReference("__k", IntegerType)()),
      keys.toSeq.map(k => Row(k.orNull)))
    val k: Attribute = plan.output.find(_.name == key).get
    new KeyRestriction(steps)(plan, Seq(k), affected)
  }

  private def expected(df: DataFrame, key: String, keys: Set[Option[Int]]): Seq[String] = {
    val at = df.schema.fieldIndex(key)
    df.collect().toSeq.filter(r => keys.contains(Option(r.get(at)).map(_.asInstanceOf[Int]))).map(_.toString).sorted
  }

  test("restricted plans hold exactly the rows of the keys, through every operator, NULL keys included") {
    val rnd = new Random(42)
    for (round <- 1 to 4) {
      val r = table(rnd, Seq("k", "a", "v"), 40)
      // Keys of s and t that r lacks: unmatched rows, padded by outer joins.
      val s = table(rnd, Seq("k", "b", "w"), 30, domain = 10)
      val t = table(rnd, Seq("a", "c", "x"), 30, domain = 10)
      val byK = Window.partitionBy("k").orderBy("v", "a")
      val plans: Seq[(String, DataFrame, String)] = Seq(
        ("aggregate under a HAVING",
          r.groupBy("k").agg(sum("v").as("sv"), count(lit(1)).as("n"))
            .where(col("n") > 1), "k"),
        ("projection with an alias", r.select((col("k")).as("kk"), (col("v") + 1).as("v1")), "kk"),
        ("left outer join", r.join(s, r("k") === s("k"), "left_outer").select(r("k"), r("v"), s("w")), "k"),
        ("right outer join", r.join(s, r("k") === s("k"), "right_outer").select(s("k"), r("v"), s("w")), "k"),
        ("semi join", r.join(s.groupBy("k").agg(max("w").as("mw")).where(col("mw") > 2), Seq("k"), "left_semi"), "k"),
        ("anti join with a residual condition",
          r.join(s, r("k") === s("k") && r("v") =!= s("w"), "left_anti"), "k"),
        ("inner join on another column (the Yannakakis step)",
          r.join(t.groupBy("a").agg(sum("x").as("sx")), Seq("a")), "k"),
        ("full outer join (not pushed)", r.join(s, r("k") === s("k"), "full_outer").select(r("k"), s("w")), "k"),
        ("union", r.select("k", "v").union(s.select("k", "w")), "k"),
        ("partitioned window", r.withColumn("rn", row_number().over(byK)), "k"),
        ("generator", r.select(col("k"), explode(array(col("v"), col("a"))).as("e")), "k"))
      for ((name, df, key) <- plans; steps <- Seq[PlanSteps](PlanOnly, new RefreshSteps(spark, ProbeSettings.Off, 1000))) {
        val keys = (Seq.fill(4)(Some(rnd.nextInt(10)): Option[Int]) ++ (if (round % 2 == 0) Seq(None) else Nil)).toSet
        val plan = df.queryExecution.analyzed
        assert(rows(restricted(plan, key, keys, steps)) == expected(df, key, keys), s"$name, round $round, keys $keys")
      }
    }
  }

  test("the semi join lands below the aggregate, on the scan, where the keys are its groups") {
    val r = table(new Random(1), Seq("k", "a", "v"), 10)
    val plan = r.groupBy("k").agg(sum("v").as("sv")).where(col("sv") > 0).queryExecution.analyzed
    val out = restricted(plan, "k", Set(Some(1)), PlanOnly)
    val below = out.collect { case a: Aggregate =>
      a.child.exists {
        case j: Join => j.joinType == LeftSemi
        case _ => false
      }
    }
    assert(below == Seq(true), out.treeString)
  }
}
