package io.sparkivm.state

import java.util.concurrent.{Executors, ThreadFactory}

import scala.collection.mutable
import scala.util.control.NonFatal

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.ivm.SparkInternals

/**
 * Makes arrangements between refreshes, never during one: a refresh that finds the state it
 * asks for missing answers from storage as a cold refresh does and queues the state's build
 * here; the build runs once no refresh is running (on one background thread, as Spark jobs of
 * their own group), and a refresh that starts meanwhile cancels it (it is queued again by the
 * next refresh that asks). So the refresh that asks for state never pays for it, and a build
 * never delays a refresh: Spark runs jobs first come, first served, and a build's jobs would
 * otherwise hold the cores a refresh's jobs wait for.
 */
object StateBuilds extends Logging {
  private val JobGroup = "spark-ivm-state"

  private final case class Build(id: StateId, spark: SparkSession, work: () => Unit)

  private val queued = mutable.LinkedHashMap[StateId, Build]()
  private var running: Option[Build] = None
  private var refreshes = 0
  private var generation = 0L

  private val pool = Executors.newSingleThreadExecutor(new ThreadFactory {
    override def newThread(r: Runnable): Thread = {
      val t = new Thread(r, "spark-ivm-state-builds")
      t.setDaemon(true)
      t
    }
  })

  /**
   * Queues `work` (which makes the arrangement `id` and holds it in the [[StateRegistry]]) to run
   * once no refresh is running; nothing if it is queued or running already.
   */
  def submit(spark: SparkSession, id: StateId)(work: => Unit): Unit = synchronized {
    if (!running.exists(_.id == id) && !queued.contains(id)) {
      queued(id) = Build(id, spark, () => work)
      startNext()
    }
  }

  /** A refresh starts: builds wait, and the running one is cancelled. */
  def refreshStarted(spark: SparkSession): Unit = {
    val cancel = synchronized {
      refreshes += 1
      generation += 1
      running.map(_.spark)
    }
    cancel.foreach(s => if (!s.sparkContext.isStopped) s.sparkContext.cancelJobGroup(JobGroup))
  }

  /** A refresh ended (committed or failed): builds go on when no other refresh runs. */
  def refreshEnded(): Unit = synchronized {
    refreshes = math.max(0, refreshes - 1)
    startNext()
  }

  private def startNext(): Unit = synchronized {
    if (refreshes == 0 && running.isEmpty && queued.nonEmpty) {
      val (id, next) = queued.head
      queued.remove(id)
      running = Some(next)
      val started = generation
      pool.execute(() => run(next, started))
    }
  }

  private def run(b: Build, started: Long): Unit = {
    val sc = b.spark.sparkContext
    try {
      if (!sc.isStopped && synchronized(generation == started)) {
        SparkInternals.clearLocalProperties(sc)
        // The session that asked: its settings (the budget among them) are the build's.
        SparkSession.setActiveSession(b.spark)
        sc.setJobGroup(JobGroup, s"spark-ivm: making ${b.id.kind} of ${b.id.name}", interruptOnCancel = false)
        b.work()
      }
    } catch {
      case NonFatal(e) =>
        // Cancelled by a refresh, or failed: the next refresh that asks queues it again.
        logInfo(s"spark-ivm: ${b.id.kind} of ${b.id.name} not made: ${e.getMessage}")
    } finally {
      if (!sc.isStopped) sc.clearJobGroup()
      synchronized {
        running = None
        notifyAll()
        startNext()
      }
    }
  }

  /** Waits until no build is queued or running, at most `timeoutMs`; true if none is. */
  def awaitIdle(timeoutMs: Long): Boolean = synchronized {
    val deadline = System.currentTimeMillis() + timeoutMs
    while ((running.nonEmpty || (queued.nonEmpty && refreshes == 0)) && System.currentTimeMillis() < deadline) {
      wait(math.max(1L, deadline - System.currentTimeMillis()))
    }
    running.isEmpty && (queued.isEmpty || refreshes > 0)
  }
}
