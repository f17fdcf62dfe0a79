package io.sparkivm.execution

import java.util.concurrent.{Executors, ScheduledFuture, ThreadFactory, TimeUnit}

import scala.util.control.{NoStackTrace, NonFatal}

import org.apache.spark.SparkContext

/**
 * The time an incremental refresh under REFRESH POLICY AUTO may spend computing its changed rows
 * before it is stopped and the view recomputed instead ([[io.sparkivm.policy.RefreshPolicies]]'s
 * `stopAfterMs`): AUTO's estimates cannot foresee every plan, and a refresh that costs many
 * recomputations is worse than one recomputation. Only the computing of the changed rows is
 * guarded ([[guard]]): nothing is written before it ends, and what follows (the view's state,
 * the apply) always runs to its end.
 *
 * Past the time, a watchdog cancels the jobs the guarded work started (they carry a tag of their
 * own), again every 200 ms in case a step falls back to another job, and each step of the
 * refresh ([[RefreshSteps]]) checks [[check]] before it starts one.
 */
final class AutoStop private[execution] (sc: SparkContext, val afterMs: Long, attempt: String) {
  private val tag = s"spark-ivm-stop:$attempt"
  @volatile private var armed = false
  @volatile private var fired = false
  private var startedNs = 0L
  private var watchdog: Option[ScheduledFuture[_]] = None

  /** Whether the time ran out while the work was guarded. */
  def stopped: Boolean = fired

  /** How long the guarded work has run, in ms. */
  def elapsedMs: Long = (System.nanoTime() - startedNs) / 1000000L

  /** Throws [[AutoStop.Stopped]] if the time ran out while the work is guarded. */
  def check(): Unit = if (armed && fired) throw AutoStop.Stopped(elapsedMs)

  /** Runs `body` within the time; a failure after the time ran out (a cancelled job among them)
   * becomes [[AutoStop.Stopped]]. */
  def guard[T](body: => T): T = {
    startedNs = System.nanoTime()
    sc.addJobTag(tag)
    // Cancelled tasks are interrupted, not left running beside the recomputation that follows
    // (the guarded work reads and checkpoints; it writes no table).
    val interrupt = sc.getLocalProperty(AutoStop.InterruptOnCancel)
    sc.setInterruptOnCancel(true)
    armed = true
    watchdog = Some(AutoStop.timer.scheduleAtFixedRate(() => {
        if (armed) {
          fired = true
          sc.cancelJobsWithTag(tag, s"spark-ivm: AUTO stopped the incremental refresh after $afterMs ms")
        }
      }, afterMs, 200, TimeUnit.MILLISECONDS))
    try body
    catch {
      case s: AutoStop.Stopped => throw s
      case NonFatal(_) if fired => throw AutoStop.Stopped(elapsedMs)
    } finally {
      armed = false
      watchdog.foreach(_.cancel(false))
      sc.removeJobTag(tag)
      sc.setLocalProperty(AutoStop.InterruptOnCancel, interrupt)
    }
  }
}

object AutoStop {

  /** The local property `SparkContext.setInterruptOnCancel` sets. */
  private val InterruptOnCancel = "spark.job.interruptOnCancel"

  /** The guarded work ran out of time after `elapsedMs`. */
  final case class Stopped(elapsedMs: Long) extends RuntimeException(s"stopped after $elapsedMs ms") with NoStackTrace

  private val timer = Executors.newSingleThreadScheduledExecutor(new ThreadFactory {
    def newThread(r: Runnable): Thread = {
      val t = new Thread(r, "spark-ivm-auto-stop")
      t.setDaemon(true)
      t
    }
  })

  /** Guards `body` with a stop after `afterMs`, or runs it unguarded. */
  def guard[T](stop: Option[AutoStop])(body: => T): T = stop.fold(body)(_.guard(body))
}
