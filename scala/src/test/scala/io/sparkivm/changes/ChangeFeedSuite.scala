package io.sparkivm.changes

import scala.util.Random

import io.sparkivm.TestSpark
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * The net change of a table between two versions, as a refresh reads it: netted on the driver,
 * by a distributed aggregate, or left as a plan (EXPLAIN), it is the same rows with the same
 * signs, and it is Post minus Pre as bags (a row inserted then deleted in between cancels).
 */
class ChangeFeedSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("change-feed")
  private val table = TableIdentifier("cf_t", Some("default"))

  override def beforeAll(): Unit = {
    spark.sql("CREATE TABLE cf_t (k INT, v STRING) USING delta TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    spark.sql("INSERT INTO cf_t VALUES (1, 'a'), (2, 'b'), (2, 'b'), (3, NULL)")
  }

  private def version: Long = spark.sql("DESCRIBE HISTORY cf_t").selectExpr("max(version)").first().getLong(0)

  private def bag(rows: Seq[Row]): Map[Seq[Any], Int] = rows.map(_.toSeq).groupBy(identity).map {
    case (k, v) => k -> v.size
  }

  /** Post minus Pre, each row with +1 or -1 per unit of its multiplicity's change. */
  private def expected(from: Long, to: Long): Map[Seq[Any], Int] = {
    val pre = bag(spark.sql(s"SELECT * FROM cf_t VERSION AS OF $from").collect().toSeq)
    val post = bag(spark.sql(s"SELECT * FROM cf_t VERSION AS OF $to").collect().toSeq)
    (pre.keySet ++ post.keySet).toSeq.flatMap { k =>
      val n = post.getOrElse(k, 0) - pre.getOrElse(k, 0)
      if (n == 0) None else Some((k :+ (if (n > 0) 1 else -1)) -> math.abs(n))
    }.toMap
  }

  private def asBag(change: TableChange): Map[Seq[Any], Int] = bag(change.frame(spark).collect().toSeq)

  test("netted on the driver, distributed or planned, the net change is Post minus Pre") {
    val rnd = new Random(5)
    val statements = Seq(
      () => s"INSERT INTO cf_t VALUES (${rnd.nextInt(5)}, '${"abc" (rnd.nextInt(3))}')",
      () => s"DELETE FROM cf_t WHERE k = ${rnd.nextInt(5)}",
      () => s"UPDATE cf_t SET v = '${"xyz" (rnd.nextInt(3))}' WHERE k = ${rnd.nextInt(5)}",
      () => s"UPDATE cf_t SET k = k + 1 WHERE v IS NULL")
    var changedRounds = 0
    (1 to 4).foreach { round =>
      val from = version
      (1 to 3 + rnd.nextInt(3)).foreach(_ => spark.sql(statements(rnd.nextInt(statements.size))()))
      // A row inserted and deleted within the interval nets to nothing.
      spark.sql("INSERT INTO cf_t VALUES (99, 'gone')")
      spark.sql("DELETE FROM cf_t WHERE k = 99")
      val to = version
      val request = ChangeRequest(table, from, to, Some(spark.table("cf_t").schema))
      val want = expected(from, to)
      if (want.nonEmpty) changedRounds += 1
      assert(!want.keys.exists(_.head == 99), s"round $round")
      val onDriver = ChangeFeed.read(spark, "v", Seq(request), localMaxBytes = Long.MaxValue)(request.name)
      val distributed = ChangeFeed.read(spark, "v", Seq(request), localMaxBytes = -1L)(request.name)
      val planned = ChangeFeed.planned(spark, "v", Seq(request))(request.name)
      assert(onDriver.isInstanceOf[DriverChange] && distributed.isInstanceOf[DistributedChange], s"round $round")
      assert(asBag(onDriver) == want, s"round $round, on the driver")
      assert(asBag(distributed) == want, s"round $round, distributed")
      assert(asBag(planned) == want, s"round $round, planned")
      assert(onDriver.rows == want.values.sum && distributed.rows == want.values.sum, s"round $round")
      distributed.release()
    }
    assert(changedRounds >= 3)
  }

  test("the change's size is that of the files the commits wrote; none for no commit") {
    val from = version
    assert(ChangeFeed.changeBytes(spark, "v", ChangeRequest(table, from, from)) == 0L)
    spark.sql("INSERT INTO cf_t VALUES (7, 'q')")
    assert(ChangeFeed.changeBytes(spark, "v", ChangeRequest(table, from, version)) > 0L)
  }
}
