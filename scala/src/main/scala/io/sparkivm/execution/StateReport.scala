package io.sparkivm.execution

import scala.util.control.NonFatal

import io.sparkivm.catalog.{DeltaTables, ViewCatalog, ViewMetadata}
import io.sparkivm.state.{StatePlace, StateRegistry}
import org.apache.spark.sql.SparkSession

/**
 * The state spark-ivm holds, as users see it (SHOW MATERIALIZED VIEW STATE, DESCRIBE): of one
 * view, what the view owns, what is of its backing table, and what is of the tables it reads
 * (shared with other views that read them).
 */
object StateReport {

  /** One arrangement: its kind, what it is of, where, its bytes, the view it serves and its stamp. */
  final case class Line(kind: String, of: String, place: String, bytes: Long, view: Option[String], stamp: String)

  private def line(h: StateRegistry.Held): Line =
    Line(h.id.kind.name, h.id.name, h.place.name, h.bytes, h.view, h.stamp)

  /** Everything held, most recently used last. */
  def all: Seq[Line] = StateRegistry.held.map(line)

  /** What is held for `meta`'s view. */
  def of(spark: SparkSession, meta: ViewMetadata): Seq[Line] = {
    val paths = (meta.backing +: meta.sources.map(s => ViewCatalog.qualify(spark, s.table.split('.').toSeq.takeRight(2))))
      .flatMap(t =>
        try Some(DeltaTables.log(spark, t).dataPath.toString)
        catch { case NonFatal(_) => None })
    val view = meta.view.unquotedString
    StateRegistry.held.filter(h =>
      h.view.contains(view) || h.table.exists(paths.contains) ||
        paths.exists(p => isOf(h.id.name, p))).map(line)
  }

  /** True if a state name names the table at `path` (names embed the path or its log's path). */
  private def isOf(name: String, path: String): Boolean = {
    val at = name.indexOf(path)
    at >= 0 && (at + path.length == name.length || "/#@".contains(name.charAt(at + path.length)))
  }

  /** The budget of each place and what it holds, for DESCRIBE: "driver 1.2 MiB of 800 MiB, ...". */
  def summary(spark: SparkSession): String = {
    val held = StateRegistry.held
    StatePlace.all.map { p =>
      s"$p ${bytes(held.filter(_.place == p).map(_.bytes).sum)} of ${bytes(StateRegistry.budget(spark, p))}"
    }.mkString(", ") + s" (${StateRegistry.evicted} evicted since the application started)"
  }

  def bytes(n: Long): String =
    if (n < 1024) s"$n B"
    else if (n < (1L << 20)) f"${n / 1024.0}%.1f KiB"
    else if (n < (1L << 30)) f"${n / 1048576.0}%.1f MiB"
    else f"${n / 1073741824.0}%.2f GiB"
}
