package io.sparkivm.state

import scala.jdk.CollectionConverters._

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession

/**
 * Every arrangement spark-ivm keeps between refreshes, in one place, under one memory budget per
 * place (`spark.ivm.state.driverMaxBytes`, `spark.ivm.state.executorMaxBytes`): the registry
 * admits, finds, moves forward and evicts them, least recently used first by bytes, as
 * Materialize's `TraceManager` keeps every arrangement of a dataflow.
 *
 * An arrangement is held under its [[StateId]] with a stamp (the Delta table ids and versions it
 * is of, as its kind writes them): a lookup names the stamp it needs and finds nothing at another.
 * It may name the table it is of (a data path), so that spark-ivm's own commits move it forward
 * ([[committed]]), and the view it serves, so that dropping the view drops it.
 */
object StateRegistry extends Logging {

  /** What is held, as [[held]] shows it. */
  final case class Held(id: StateId, stamp: String, table: Option[String], view: Option[String],
      place: StatePlace, bytes: Long)

  private final class Entry(val id: StateId, val stamp: String, val table: Option[String],
      val view: Option[String], val value: Arrangement, var bytes: Long) {
    def held: Held = Held(id, stamp, table, view, value.place, bytes)
  }

  /** Access-ordered: iteration starts at the least recently used. */
  private val entries = new java.util.LinkedHashMap[StateId, Entry](16, 0.75f, true)

  /** Ids refreshes asked for (see [[ask]]), least recently asked first. */
  private val asked = new java.util.LinkedHashMap[StateId, String](16, 0.75f, true)
  private val MaxAsked = 1024
  private var evictions = 0L

  /** The bytes each place holds (guarded by `this`, as `entries`). */
  private val totals = scala.collection.mutable.Map[StatePlace, Long]().withDefaultValue(0L)

  private def hold(e: Entry): Unit = {
    Option(entries.put(e.id, e)).foreach(old => totals(old.value.place) -= old.bytes)
    totals(e.value.place) += e.bytes
  }

  private def unhold(id: StateId): Option[Entry] = {
    val e = Option(entries.remove(id))
    e.foreach(x => totals(x.value.place) -= x.bytes)
    e
  }

  private def resize(e: Entry, bytes: Long): Unit = {
    totals(e.value.place) += bytes - e.bytes
    e.bytes = bytes
  }

  /** The bytes `place` may hold, as the session's settings say. */
  def budget(spark: SparkSession, place: StatePlace): Long = StateBudget.of(spark, place)

  /** The bytes `place` may hold, as the active session's settings say (the defaults without one). */
  def budget(place: StatePlace): Long = StateBudget.of(
    SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession), place)

  /**
   * True if an arrangement of about `bytes` would be admitted in `place`: spark-ivm makes state
   * only where it fits its budget, evicting others (no single arrangement takes more than half
   * of it, so that one table never flushes everything else).
   */
  def admits(spark: SparkSession, place: StatePlace, bytes: Long): Boolean =
    bytes <= largestAdmitted(spark, place)

  /** The bytes of the largest arrangement `place` admits: half its budget. */
  def largestAdmitted(spark: SparkSession, place: StatePlace): Long = largestUnder(budget(spark, place))

  private def largestUnder(limit: Long): Long = limit / 2

  /**
   * Marks `id` as asked for by refresh `refresh` (a refresh may ask more than once); true if an
   * earlier refresh asked for it too. State is made the second time a refresh of the application
   * asks for it: an application that refreshes once (a scheduled job) never pays for it.
   */
  def ask(id: StateId, refresh: String): Boolean = synchronized {
    val before = Option(asked.put(id, refresh)).exists(_ != refresh)
    if (asked.size > MaxAsked) asked.remove(asked.keySet.iterator.next())
    before
  }

  /** The arrangement held under `id` at `stamp`, if one is (it is then the most recently used). */
  def get[A <: Arrangement](id: StateId, stamp: String): Option[A] = {
    val (found, evicted) = synchronized {
      Option(entries.get(id)) match {
        case Some(e) if !e.value.alive =>
          drop(e)
          (None, Nil)
        case Some(e) if e.stamp == stamp =>
          // Executor rows are measured once computed: held lazily, they measured 0 when put.
          if (e.bytes == 0) resize(e, e.value.bytes)
          // Within the budget as it is now (it may have been lowered since): this one may go too.
          val more = evictBeyond(e.value.place, budget(e.value.place), keep = null)
          (Some(e.value.asInstanceOf[A]).filter(_ => entries.containsKey(id)), more)
        case _ => (None, Nil)
      }
    }
    evicted.foreach(_.value.release())
    found
  }

  /** The arrangement held under `id` at whatever stamp, with its stamp. */
  def latest[A <: Arrangement](id: StateId): Option[(String, A)] = synchronized {
    Option(entries.get(id)).filter { e =>
      if (!e.value.alive) drop(e)
      e.value.alive
    }.map(e => e.stamp -> e.value.asInstanceOf[A])
  }

  /**
   * Holds `value` under `id` at `stamp`, replacing what was held there (released unless `value`
   * [[Arrangement.shares]] it), then evicts the least recently used arrangements of its place until the place's
   * held bytes are within budget. Returns false, releasing `value`, if it alone exceeds
   * [[admits]].
   */
  def put(id: StateId, stamp: String, value: Arrangement, table: Option[String] = None,
      view: Option[String] = None): Boolean = {
    val bytes = value.bytes
    val limit = budget(value.place)
    val ok = bytes <= largestUnder(limit)
    val dropped = synchronized {
      val old = unhold(id)
      if (ok) hold(new Entry(id, stamp, table, view, value, bytes))
      val evicted = if (ok) evictBeyond(value.place, limit, keep = id) else Nil
      old.filterNot(o => value.shares(o.value)).toSeq ++ evicted
    }
    dropped.foreach(_.value.release())
    if (!ok) {
      value.release()
      logInfo(s"Not holding ${id.kind} ${id.name}: ${bytes} bytes exceed half the ${value.place} budget " +
        s"of $limit bytes")
    }
    ok
  }

  /** The least recently used entries of `place` past `limit` bytes, removed (not `keep`). */
  private def evictBeyond(place: StatePlace, limit: Long, keep: StateId): Seq[Entry] = {
    val out = Seq.newBuilder[Entry]
    if (totals(place) > limit) {
      val it = entries.values.iterator
      while (totals(place) > limit && it.hasNext) {
        val e = it.next()
        if (e.value.place == place && e.id != keep) {
          it.remove()
          totals(place) -= e.bytes
          evictions += 1
          out += e
          logInfo(s"Evicted ${e.id.kind} ${e.id.name} (${e.bytes} bytes) from the $place state: its budget " +
            s"is $limit bytes")
        }
      }
    }
    out.result()
  }

  /** Drops what is held under `id`. */
  def remove(id: StateId): Unit = {
    val e = synchronized(unhold(id))
    e.foreach(_.value.release())
  }

  /** Drops what is held under `id` if it is `value` (a concurrent refresh may have moved it on). */
  def remove(id: StateId, value: Arrangement): Unit = {
    val e = synchronized {
      Option(entries.get(id)).filter(_.value eq value).flatMap(_ => unhold(id))
    }
    e.foreach(_.value.release())
  }

  /** Drops every arrangement whose held description passes `p` (a dropped view's, say). */
  def removeWhere(p: Held => Boolean): Unit = {
    val gone = synchronized {
      val matching = entries.values.asScala.filter(e => p(e.held)).toSeq
      matching.foreach(e => unhold(e.id))
      matching
    }
    gone.foreach(_.value.release())
  }

  private def drop(e: Entry): Unit = {
    unhold(e.id)
    e.value.release()
  }

  /**
   * A commit of spark-ivm's own: each arrangement of the committed table moves itself forward to
   * the new version, or is dropped.
   */
  def committed(commit: TableCommit): Unit = {
    val of = synchronized(entries.values.asScala.filter(_.table.contains(commit.path)).toSeq)
    of.foreach { e =>
      val next =
        try e.value.committed(commit)
        catch {
          case scala.util.control.NonFatal(err) =>
            logWarning(s"Dropping ${e.id.kind} ${e.id.name}: moving it past commit ${commit.to} failed", err)
            None
        }
      next match {
        case Some(v) => put(e.id, commitStamp(e.stamp, commit), v, e.table, e.view)
        case None => remove(e.id, e.value)
      }
    }
  }

  /** The stamp of an arrangement moved by `commit`: its version part advanced. */
  private def commitStamp(stamp: String, commit: TableCommit): String =
    TableStamp.parse(stamp).filter(_.id == commit.id).map(_.copy(version = commit.to).toString).getOrElse(stamp)

  /**
   * What is held of `kind` under ids that pass `p`, with stamps (not made more recently used:
   * a store looks for an earlier version to move forward).
   */
  def find[A <: Arrangement](kind: StateKind)(p: StateId => Boolean): Seq[(StateId, String, A)] = synchronized {
    entries.values.asScala.iterator.filter(e => e.id.kind == kind && p(e.id) && e.value.alive)
      .map(e => (e.id, e.stamp, e.value.asInstanceOf[A])).toSeq
  }

  /** What is held, most recently used last. */
  def held: Seq[Held] = synchronized(entries.values.asScala.map(_.held).toSeq)

  /** Arrangements evicted for the budget since the JVM started. */
  def evicted: Long = synchronized(evictions)

  /** Drops everything (tests; a stopped context's state goes by itself). */
  def clear(): Unit = removeWhere(_ => true)
}

/** The stamp of an arrangement of one Delta table: its id and version. */
final case class TableStamp(id: String, version: Long) {
  override def toString: String = s"$id@$version"
}

object TableStamp {
  def parse(s: String): Option[TableStamp] = s.lastIndexOf('@') match {
    case -1 => None
    case i => s.substring(i + 1).toLongOption.map(TableStamp(s.substring(0, i), _))
  }
}
