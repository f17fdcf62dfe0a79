package io.sparkivm.state

import io.sparkivm.TestSpark
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.types.{IntegerType, StructType}
import org.scalatest.BeforeAndAfterEach
import org.scalatest.funsuite.AnyFunSuite

/**
 * The registry's invariants: what a place holds never exceeds its budget, eviction takes the
 * least recently used first, an arrangement is found only at its stamp, a commit moves each
 * arrangement of its table or drops it, and everything dropped is released exactly once.
 */
class StateRegistrySuite extends AnyFunSuite with BeforeAndAfterEach {
  private lazy val spark: SparkSession = TestSpark.session("state")

  /** An arrangement of a fixed size that counts its releases and moves by a commit when asked to. */
  private final class Fixed(val bytes: Long, val place: StatePlace = StatePlace.Driver,
      moves: Boolean = false)
      extends Arrangement {
    var released = 0
    override def release(): Unit = released += 1
    override def committed(c: TableCommit): Option[Arrangement] =
      if (moves && c.added.isDefined) Some(new Fixed(bytes + c.added.get.size, place, moves)) else None
  }

  private def id(n: String) = StateId(StateKind.Results, n)

  override def beforeEach(): Unit = {
    StateRegistry.clear()
    SparkSession.setActiveSession(spark)
    spark.conf.set("spark.ivm.state.driverMaxBytes", "1000")
    spark.conf.set("spark.ivm.state.executorMaxBytes", "1000")
  }

  override def afterEach(): Unit = {
    spark.conf.unset("spark.ivm.state.driverMaxBytes")
    spark.conf.unset("spark.ivm.state.executorMaxBytes")
    StateRegistry.clear()
  }

  private def held(place: StatePlace): Long = StateRegistry.held.filter(_.place == place).map(_.bytes).sum

  test("a place never holds more than its budget: the least recently used are evicted first") {
    val all = (1 to 5).map(i => i -> new Fixed(300))
    val before = StateRegistry.evicted
    all.foreach { case (i, a) =>
      assert(StateRegistry.put(id(s"r$i"), "v1", a))
      // r1 is used after each put but the second: it stays, the others go in order.
      if (i != 2) assert(StateRegistry.get[Fixed](id("r1"), "v1").contains(all.head._2))
      assert(held(StatePlace.Driver) <= 1000)
    }
    assert(StateRegistry.held.map(_.id.name).toSet == Set("r1", "r4", "r5"))
    assert(StateRegistry.evicted - before == 2)
    assert(all.map(_._2.released) == Seq(0, 1, 1, 0, 0))
    // The other place's budget is its own.
    assert(StateRegistry.put(StateId(StateKind.ViewRows, "x"), "v1", new Fixed(400, StatePlace.Executors)))
    assert(StateRegistry.held.size == 4 && held(StatePlace.Executors) == 400)
  }

  test("an arrangement larger than half its place's budget is not held, and is released") {
    val big = new Fixed(501)
    assert(!StateRegistry.admits(spark, StatePlace.Driver, 501))
    assert(!StateRegistry.put(id("big"), "v1", big))
    assert(big.released == 1 && StateRegistry.held.isEmpty)
    spark.conf.set("spark.ivm.state.driverMaxBytes", "0")
    assert(!StateRegistry.put(id("small"), "v1", new Fixed(1)))
  }

  test("an arrangement is found only at its stamp; replacing one releases the old") {
    val a = new Fixed(10)
    val b = new Fixed(10)
    StateRegistry.put(id("s"), "t@1", a)
    assert(StateRegistry.get[Fixed](id("s"), "t@2").isEmpty)
    assert(StateRegistry.get[Fixed](id("s"), "t@1").contains(a))
    StateRegistry.put(id("s"), "t@2", b)
    assert(a.released == 1 && StateRegistry.get[Fixed](id("s"), "t@1").isEmpty)
    // Putting the same arrangement again (measured again) does not release it.
    StateRegistry.put(id("s"), "t@3", b)
    assert(b.released == 0 && StateRegistry.latest[Fixed](id("s")).map(_._1).contains("t@3"))
    StateRegistry.remove(id("s"), a)
    assert(StateRegistry.get[Fixed](id("s"), "t@3").contains(b))
  }

  test("a commit moves each arrangement of its table to the new version or drops it") {
    val moving = new Fixed(10, moves = true)
    val stuck = new Fixed(10)
    val other = new Fixed(10)
    StateRegistry.put(StateId(StateKind.TableRows, "/t"), TableStamp("id", 4).toString, moving, table = Some("/t"))
    StateRegistry.put(StateId(StateKind.ViewRows, "/t"), TableStamp("id", 4).toString, stuck, table = Some("/t"))
    StateRegistry.put(StateId(StateKind.ViewRows, "/u"), TableStamp("id2", 4).toString, other, table = Some("/u"))
    val row = InternalRow(1)
    StateRegistry.committed(TableCommit("/t", "id", 4, 5, replacesAll = false, Seq("k"), Some(Set(row)),
        new StructType().add("k", IntegerType), Some(Seq(row -> None, row -> None))))
    val moved = StateRegistry.get[Fixed](StateId(StateKind.TableRows, "/t"), "id@5")
    assert(moved.exists(_.bytes == 12))
    assert(StateRegistry.get[Fixed](StateId(StateKind.ViewRows, "/t"), "id@4").isEmpty && stuck.released == 1)
    assert(StateRegistry.get[Fixed](StateId(StateKind.ViewRows, "/u"), "id2@4").contains(other))
  }

  test("state is made the second time a refresh asks for it") {
    val s = id("asked")
    assert(!StateRegistry.ask(s, "refresh-1"))
    assert(!StateRegistry.ask(s, "refresh-1"))
    assert(StateRegistry.ask(s, "refresh-2"))
  }

  test("dropping a view's state releases what served it and nothing else") {
    val mine = new Fixed(10)
    val shared = new Fixed(10)
    StateRegistry.put(id("a"), "v", mine, view = Some("db.v"))
    StateRegistry.put(id("b"), "v", shared)
    StateRegistry.removeWhere(_.view.contains("db.v"))
    assert(mine.released == 1 && shared.released == 0 && StateRegistry.held.map(_.id.name) == Seq("b"))
  }

  test("builds wait while a refresh runs, and a refresh that starts cancels the running one") {
    var ran = 0
    StateBuilds.refreshStarted(spark)
    StateBuilds.submit(spark, id("build"))(ran += 1)
    StateBuilds.submit(spark, id("build"))(ran += 1)
    Thread.sleep(100)
    assert(ran == 0)
    StateBuilds.refreshEnded()
    assert(StateBuilds.awaitIdle(10000))
    assert(ran == 1)
    // A build whose Spark job a refresh cancels makes nothing, and the builder goes on.
    val started = new java.util.concurrent.CountDownLatch(1)
    StateBuilds.submit(spark, id("slow")) {
      started.countDown()
      spark.sparkContext.parallelize(Seq(1), 1).map { i => Thread.sleep(5000); i }.collect()
      ran += 10
    }
    assert(started.await(60, java.util.concurrent.TimeUnit.SECONDS))
    // Cancelled once its job runs (a cancel finds only the jobs running then).
    val deadline = System.currentTimeMillis() + 60000
    while (spark.sparkContext.statusTracker.getActiveJobIds().isEmpty && System.currentTimeMillis() < deadline) {
      Thread.sleep(20)
    }
    StateBuilds.refreshStarted(spark)
    StateBuilds.refreshEnded()
    assert(StateBuilds.awaitIdle(60000))
    assert(ran == 1)
  }
}
