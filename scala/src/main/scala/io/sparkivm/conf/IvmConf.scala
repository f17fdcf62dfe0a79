package io.sparkivm.conf

import java.time.ZoneOffset
import java.util.Locale

import scala.collection.mutable

import io.sparkivm.errors.IvmErrors
import org.apache.spark.SparkConf
import org.apache.spark.network.util.JavaUtils
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.util.DateTimeUtils
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.ivm.ConfRegistration
import org.apache.spark.unsafe.types.UTF8String

/**
 * One `spark.ivm.*` setting: its key, type, default, allowed values and doc, declared once in
 * [[IvmConf]]. Entries are registered with Spark's SQLConf (as Delta's `DeltaSQLConf` entries
 * are), so `SET key=bad` is refused when it is set, `SET -v` lists them with their docs, and
 * static entries cannot be changed by SET at all.
 */
final case class IvmConfEntry[T](key: String, default: T, typeName: String, doc: String,
    static: Boolean, parse: String => Either[String, T], render: T => String, internal: Boolean = false) {

  /** The value for this session: set by SET or the session builder, else the default. */
  def get(spark: SparkSession): T = spark.conf.getOption(key).map(read).getOrElse(default)

  /** The same, where only the session's SQLConf is at hand (planner rules). */
  def get(conf: SQLConf): T = Option(conf.getConfString(key, null)).map(read).getOrElse(default)

  /** The value the application sets (static settings, read before any session exists). */
  def get(conf: SparkConf): T = conf.getOption(key).map(read).getOrElse(default)

  /** A value given as text; IVM_INVALID_CONF if it is not one of the allowed values. */
  def read(value: String): T = parse(value) match {
    case Right(v) => v
    case Left(expected) => throw IvmErrors.invalidConf(key, value, expected)
  }

  def defaultString: String = render(default)
}

/**
 * The registry of every setting spark-ivm reads. Nothing else reads a `spark.ivm.*` key;
 * `docs/sql.md`'s table of settings is generated from here ([[markdownTable]]).
 */
object IvmConf {
  private val entries = mutable.ArrayBuffer[IvmConfEntry[_]]()

  private def entry[T](key: String, default: T, typeName: String, doc: String, static: Boolean = false,
      internal: Boolean = false)(parse: String => Either[String, T],
      render: T => String = (v: T) => v.toString): IvmConfEntry[T] = {
    val e = IvmConfEntry(key, default, typeName, doc, static, parse, render, internal)
    entries += e
    e
  }

  private def bool(key: String, default: Boolean, doc: String, static: Boolean = false, internal: Boolean = false) =
    entry(key, default, "boolean", doc, static, internal) { v =>
      v.trim.toLowerCase(Locale.ROOT) match {
        case "true" => Right(true)
        case "false" => Right(false)
        case _ => Left("true or false")
      }
    }

  private def int(key: String, default: Int, doc: String, min: Int = 0, internal: Boolean = false) =
    entry(key, default, "int", doc, internal = internal) { v =>
      v.trim.toIntOption.filter(_ >= min).toRight(s"a whole number >= $min")
    }

  private def double(key: String, default: Double, doc: String, min: Double, internal: Boolean = false) =
    entry(key, default, "double", doc, internal = internal) { v =>
      v.trim.toDoubleOption.filter(d => d >= min && !d.isInfinite).toRight(s"a number >= $min")
    }

  private def text(key: String, doc: String, internal: Boolean = false) =
    entry(key, "", "string", doc, internal = internal)(v => Right(v))

  private def long(key: String, default: Long, doc: String, min: Long = 0L, internal: Boolean = false) =
    entry(key, default, "long", doc, internal = internal) { v =>
      v.trim.toLongOption.filter(_ >= min).toRight(s"a whole number >= $min")
    }

  /** A size: bytes, or with Spark's units (`64k`, `32m`, `1g`), as Spark's own size settings. */
  private def bytes(key: String, default: Long, doc: String, min: Long = 0L, internal: Boolean = false) =
    entry(key, default, "bytes", doc, internal = internal)(
      v =>
        withUnit(v, JavaUtils.byteStringAsBytes).filter(_ >= min)
          .toRight(s"a size in bytes >= $min (a number, or with a unit: 64k, 32m, 1g)"),
      b => largestUnit(b, Seq((1L << 30) -> "g", (1L << 20) -> "m", (1L << 10) -> "k"), "b"))

  /** A duration: milliseconds, or with Spark's units (`500ms`, `5s`, `10min`, `1h`). */
  private def millis(key: String, default: Long, doc: String, min: Long = 0L, internal: Boolean = false) =
    entry(key, default, "time", doc, internal = internal)(
      v =>
        withUnit(v, JavaUtils.timeStringAsMs).filter(_ >= min)
          .toRight(s"a duration in ms >= $min (a number, or with a unit: 500ms, 5s, 10min)"),
      ms => largestUnit(ms, Seq(3600000L -> "h", 60000L -> "min", 1000L -> "s"), "ms"))

  /** A plain number (so -1 passes where it means "derived"), else Spark's parse of a unit. */
  private def withUnit(v: String, parse: String => Long): Option[Long] =
    v.trim.toLongOption.orElse(scala.util.Try(parse(v.trim)).toOption)

  private def largestUnit(v: Long, units: Seq[(Long, String)], base: String): String =
    units.collectFirst { case (size, unit) if v > 0 && v % size == 0 => s"${v / size}$unit" }
      .getOrElse(if (v < 0) v.toString else s"$v$base")

  // ---- base tables and their changes ----

  val AutoEnableChangeDataFeed: IvmConfEntry[Boolean] = bool("spark.ivm.autoEnableChangeDataFeed",
    default = true,
    "Turn on the change data feed of a base table that lacks it when a view over " +
      "it is created (logged); false makes that an IVM_CHANGE_FEED_DISABLED error.")

  val ChangesLocalMaxBytes: IvmConfEntry[Long] = bytes("spark.ivm.changes.localMaxBytes",
    32L << 20,
    "A refresh reads the change data feed of all changed base tables in one Spark job " +
      "and nets it on the driver when the change files (per the Delta log) total at most this " +
      "many bytes; above it, changes are netted by a distributed aggregate and checkpointed.", internal = true)

  val KnownFilesEnabled: IvmConfEntry[Boolean] = bool("spark.ivm.knownFiles.enabled", default = true,
    "Hold the file lists of the Delta table versions a refresh reads on the driver (advanced from " +
      "the log between versions) and skip files there by their statistics, instead of the Spark " +
      "jobs Delta runs to list and skip files for every scan.", internal = true)

  val KnownFilesQueryMaxBytes: IvmConfEntry[Long] = bytes("spark.ivm.knownFiles.queryMaxBytes",
    default = 256L << 20,
    "Also plan the scans of the session's other queries (reads of a view after its refresh, of the " +
      "base tables it read) from these lists, outside Delta transactions, when the version read is " +
      "held or follows a held one by a few commits and its files total at most this many bytes " +
      "(larger scans keep Delta's data skipping, which reads more kinds of statistics). 0 turns it off.",
    internal = true)

  // Measured in `make demo`: 64 KiB beat both 1 MiB (the driver reads in one thread what a job
  // reads on every core, beside the other broadcasts) and off (a job per broadcast).
  val BroadcastDriverReadMaxBytes: IvmConfEntry[Long] = bytes("spark.ivm.broadcast.driverReadMaxBytes",
    default = 64L << 10,
    "Without adaptive execution (as in a refresh's small queries), the broadcast side of a join " +
      "that scans files totalling at most this many bytes (and rows held on the driver) is read " +
      "and built on the driver instead of by a Spark job of its own. 0 turns it off.", internal = true)

  // ---- planning ----

  val FkPruningEnabled: IvmConfEntry[Boolean] = bool("spark.ivm.fkPruning.enabled", default = true,
    "Use declared foreign keys to prune delta plans (Svingos et al. 2023, Algorithm 1).")

  val KeyProbingEnabled: IvmConfEntry[Boolean] = bool("spark.ivm.keyProbing.enabled", default = false,
    "Push the keys of small deltas into the scans of large tables of a join block as filters, " +
      "so that Delta skips files. Pays where tables are laid out by the probed key and changes " +
      "cluster. (An operator recomputed for its changed keys, such as an outer join or a window, " +
      "always filters its large inputs by those keys.)")

  val KeyProbingMaxKeys: IvmConfEntry[Int] = int("spark.ivm.keyProbing.maxKeys", 100000,
    "Most keys collected to the driver for one probe (or IN-list filter); above it the plan " +
      "joins instead.", min = 1, internal = true)

  val KeyProbingMaxRanges: IvmConfEntry[Int] = int("spark.ivm.keyProbing.maxRanges", 64,
    "Most ranges in one probe filter over keys whose values a hash set cannot match as the join " +
      "does (floating-point values, strings under a collation: Delta tests each range against every " +
      "file's min and max); integer, date, timestamp, decimal and plain string keys are probed " +
      "as a hash set.",
    min = 1, internal = true)

  val KeyProbingMinTableBytes: IvmConfEntry[Long] = bytes("spark.ivm.keyProbing.minTableBytes", 16L << 20,
    "Tables smaller than this are joined as they are, never probed.", internal = true)

  val SharedReadsMinTableBytes: IvmConfEntry[Long] = bytes("spark.ivm.sharedReads.minTableBytes", 1L << 20,
    "A table at least this large that an operator recomputed by key reads (at Pre, at Post, or " +
      "in several places) is read once per refresh for the changed keys (at most " +
      "keyProbing.maxKeys of them) and the rows are held on the driver and shared; a smaller one " +
      "is read as part of each query that needs it.", internal = true)

  val KeyCountsEnabled: IvmConfEntry[Boolean] = bool("spark.ivm.keyCounts.enabled", default = true,
    "Keep, in the executors' memory, the rows of a large table counted per key where a view " +
      "needs only those counts of it: the right side of a semi, anti or existence join on one " +
      "equi-join key (EXISTS, IN, NOT EXISTS), and the referencing side of a foreign key whose " +
      "integrity a refresh checks. A refresh then looks up its changed keys' counts instead of " +
      "scanning the table. The counts are made (one aggregate of the table) the second time a " +
      "refresh in the application needs them; they take executor memory in proportion to the " +
      "table's distinct keys. The integrity checks' counts are also kept in storage, in the " +
      "backing table's hidden `_ivm_state` directory (written at CREATE, moved on by each " +
      "refresh), so that an application's first refresh reads them instead of scanning.")

  val KeyCountsMinTableBytes: IvmConfEntry[Long] = bytes("spark.ivm.keyCounts.minTableBytes", 1L << 20,
    "Tables smaller than this are read for their changed keys instead of being counted.", internal = true)

  // ---- state kept between refreshes ----

  val StateDriverMaxBytes: IvmConfEntry[Long] = bytes("spark.ivm.state.driverMaxBytes", -1L,
    "The most bytes of state spark-ivm keeps in the driver's memory between refreshes: small " +
      "tables' rows, small results, file lists, lookup trees. Past it the least recently used state " +
      "is dropped (and made again when a refresh needs it); one table's state is never made if it " +
      "would take more than half. -1 (the default) is a fifth of the driver's heap; 0 keeps none.",
    min = -1L)

  val StateExecutorMaxBytes: IvmConfEntry[Long] = bytes("spark.ivm.state.executorMaxBytes", -1L,
    "The most bytes of state spark-ivm keeps in the executors' memory between refreshes: tables' " +
      "rows a view reads by key, a view's keys and aggregate states, counts per key, IVM^eps " +
      "state, each partitioned and indexed by the key a refresh looks it up with, made the second " +
      "time a refresh of the application asks for it. Past it the least recently used state is " +
      "dropped; one table's state is never made if it would take more than half. -1 (the " +
      "default) is half of the executors' storage memory; 0 keeps none.",
    min = -1L)

  val StateBuildInBackground: IvmConfEntry[Boolean] = bool("spark.ivm.state.buildInBackground", default = true,
    "Make executor state between refreshes, on a background thread once no refresh runs (a " +
      "refresh that starts cancels it), instead of in the refresh that asks for it: the refresh " +
      "that asks then costs what a refresh without the state costs, and the next one finds it.")

  val HeldTablesMaxRows: IvmConfEntry[Long] = long("spark.ivm.heldTables.maxRows", 20000L,
    "A Delta table of at most this many rows (and at most 2 MiB, in at most two files per core) " +
      "that a refresh reads whole, a small dimension or a view's backing table, has its rows held " +
      "in the driver's memory by table version: read once (one job), or derived from the version " +
      "before and the change a refresh applied, and then joined on the driver with no Spark job. " +
      "0 turns this off.", internal = true)

  val EpsilonEnabled: IvmConfEntry[Boolean] = bool("spark.ivm.epsilon.enabled", default = true,
    "Maintain triangle views with IVM^eps; false gives them the generic (first-order) rules.")

  val EpsilonResidentState: IvmConfEntry[Boolean] = bool("spark.ivm.epsilon.residentState", default = true,
    "Keep the IVM^eps auxiliary views of triangle views in the executors' memory between " +
      "refreshes, partitioned by the key refreshes look them up by; false reads them from their " +
      "Delta state tables in every refresh.", internal = true)

  val EpsilonCheckInvariants: IvmConfEntry[Boolean] = bool("spark.ivm.epsilon.checkInvariants",
    default = false,
    "Check the IVM^eps invariants (degrees, sizes, auxiliary views) inside every " +
      "refresh of a triangle view, failing it if one is violated. For tests; costs several jobs.", internal = true)

  // ---- apply ----

  val LocalMaxRows: IvmConfEntry[Int] = int("spark.ivm.localMaxRows", 500000,
    "Intermediate results of a refresh (the folded delta, the changed rows of the view) of at " +
      "most this many rows are held on the driver, so that later steps run no Spark job on them; " +
      "larger ones are checkpointed on the executors and applied with joins on the view's keys " +
      "(a bound on the driver memory one refresh takes).", min = 1)

  val RecursionDriverMaxRows: IvmConfEntry[Int] = int("spark.ivm.recursion.driverMaxRows", 2000000,
    "A refresh of a view over a recursive CTE steps the recursion's change on the driver, with no " +
      "Spark job per step, when its seed and every step have at most spark.ivm.localMaxRows rows " +
      "and the inputs its recursive part joins the recursion with (tables, filtered and projected " +
      "as the query does) have at most this many rows in all: those are read once, held in the " +
      "driver's memory for the refresh and hash-indexed by their join keys. Otherwise Spark's " +
      "recursion runs each step as a job. 0 turns this off.")

  val TopRowsBuffer: IvmConfEntry[Int] = int("spark.ivm.topRows.buffer", 1000,
    "A top-k view (ORDER BY ... LIMIT k OFFSET o) marks its first k + o rows and this many " +
      "below them, which its read reads alone. A refresh moves the marks with its changed rows; " +
      "only when deletes leave fewer than k + o marked rows does it scan the view's rows to mark " +
      "k + o + this many again, and when inserts leave more than k + o + twice this many, it " +
      "unmarks the lowest. Larger buffers make those scans rarer and reads larger.", min = 0)

  val RefreshInterpretedMaxBytes: IvmConfEntry[Long] = bytes("spark.ivm.refresh.interpretedMaxBytes", 32L << 20,
    "A refresh whose inputs (the base tables it reads and the view's backing table, sized from " +
      "their Delta logs) total at most this many bytes runs its queries without generated code: " +
      "operators run one by one (no whole-stage code generation) and their expressions are " +
      "interpreted. Over larger inputs, an incremental refresh decides per query: one that scans " +
      "more than this many bytes of files (its tables at full size) generates code, the others do " +
      "not; a recomputation generates code throughout. Generating and compiling the code (anew for " +
      "each plan of a changing shape, and all of it in a new application) costs more than it saves " +
      "on small inputs. 0: always generate it.", internal = true)

  val LayoutRowsPerFile: IvmConfEntry[Long] = long("spark.ivm.layout.rowsPerFile", 250000L,
    "Backing tables are written in files of at most this many rows, ordered by the view's first " +
      "ACCESS BY input (else its first key), so that Delta's file statistics let a lookup by that " +
      "column, and a refresh's search for the files holding a changed key, read only the files that " +
      "may match. 0: no bound (one file per write task).", internal = true)

  val ApplyRewriteWithoutSearchBytes: IvmConfEntry[Long] = bytes("spark.ivm.apply.rewriteWithoutSearchBytes", 1L << 20,
    "A refresh's candidate files (those whose statistics admit a changed key) up to this many " +
      "bytes in all are rewritten without first finding which rows hold a changed key (one Spark " +
      "job instead of two); above it, that search runs and the rows are removed by deletion vectors " +
      "where the table has them.", internal = true)

  val ApplyCompactMinFiles: IvmConfEntry[Int] = int("spark.ivm.apply.compactMinFiles", 16,
    "When a backing table holds at least this many small files (under 8 MiB and under a quarter " +
      "of spark.ivm.layout.rowsPerFile rows: an apply that marks rows deleted by deletion vectors " +
      "appends one each time), the next apply also rewrites them " +
      "into the file it writes, in the same commit, so that the view's files stay few however " +
      "often it is refreshed. 0: never.", min = 0, internal = true)

  val ApplyDeletionVectors: IvmConfEntry[Boolean] = bool("spark.ivm.apply.deletionVectors", default = true,
    "Create backing tables with Delta's deletion vectors, and apply a refresh whose candidate files " +
      "are large by marking the changed keys' rows deleted in place and appending the new rows, " +
      "instead of rewriting every file that holds a changed key (backing tables whose change data " +
      "feed is on, because a view reads them, are rewritten).")

  // ---- refresh policies and the refresh service ----

  /** A policy's stored name (`incremental_strict`); `policy.RefreshPolicies.default` reads it as
   * a `catalog.RefreshPolicy`, which settings, below every other package, do not know. */
  val RefreshPolicyDefault: IvmConfEntry[String] = entry("spark.ivm.refreshPolicy.default",
    "auto", "string",
    "The REFRESH POLICY of views created without one: auto, " +
      "incremental, incremental_strict or full.") { v =>
    val name = v.trim.toLowerCase(Locale.ROOT).replaceAll("[\\s_]+", "_")
    if (Seq("auto", "incremental", "incremental_strict", "full").contains(name)) Right(name)
    else Left("auto, incremental, incremental_strict or full")
  }

  val RefreshPolicyAutoCostFactor: IvmConfEntry[Double] = double("spark.ivm.refreshPolicy.autoCostFactor", 100.0,
    "The AUTO policy's prior, used until a view's history measures it: how many times more a " +
      "changed byte costs an incremental refresh than a base-table byte costs a recomputation " +
      "(beyond its fixed part).", min = 0.0, internal = true)

  val RefreshPolicyAutoMinChangeBytes: IvmConfEntry[Long] = bytes("spark.ivm.refreshPolicy.autoMinChangeBytes", 1L << 20,
    "Until a view's incremental refreshes have been measured, the AUTO policy's prior alone does " +
      "not recompute it for a change under this many bytes (as the change data feed stores them) " +
      "that is smaller than its tables: that change is refreshed incrementally, and measured.", min = 0L,
    internal = true)

  val RefreshPolicyAutoMinGainMs: IvmConfEntry[Long] = millis("spark.ivm.refreshPolicy.autoMinGainMs", 500L,
    "The AUTO policy recomputes a view only if that is estimated to save at least this many ms " +
      "(and 10%) over an incremental refresh: where both cost about the same, the refresh stays " +
      "incremental.", internal = true)

  val RefreshPolicyAutoStopFactor: IvmConfEntry[Double] = double("spark.ivm.refreshPolicy.autoStopFactor", 4.0,
    "Under REFRESH POLICY AUTO, an incremental refresh still computing its changed rows after this " +
      "many times the recomputation AUTO estimated (and spark.ivm.refreshPolicy.autoStopMinMs) is " +
      "stopped before it writes anything, and the view is recomputed in the same refresh; the view's " +
      "history keeps how long the attempt ran, so AUTO weighs it next time. 0 turns this off.", min = 0.0)

  val RefreshPolicyAutoStopMinMs: IvmConfEntry[Long] = millis("spark.ivm.refreshPolicy.autoStopMinMs", 30000L,
    "The least time spark.ivm.refreshPolicy.autoStopFactor gives an incremental refresh before it " +
      "may stop it: a cold start's fixed costs are not taken for a dear change.", internal = true)

  val RefreshInstant: IvmConfEntry[String] = entry("spark.ivm.refresh.instant", "", "string",
    "The instant at which a refresh (and CREATE) reads current_timestamp(), now(), current_date() " +
      "and localtimestamp() in a view's filters, as a timestamp in the session time zone " +
      "('2026-11-29 06:00:00'); empty: when the refresh starts. For replaying a refresh at an " +
      "instant of one's choosing.") { v =>
    val text = v.trim
    if (text.isEmpty || DateTimeUtils.stringToTimestamp(UTF8String.fromString(text), ZoneOffset.UTC).isDefined) {
      Right(text)
    } else Left("a timestamp such as '2026-11-29 06:00:00', or empty")
  }

  val ServicePollIntervalMs: IvmConfEntry[Long] = millis("spark.ivm.service.pollIntervalMs", 1000L,
    "How often the refresh service checks schedules and base-table versions (from the Delta logs, " +
      "no Spark job).", min = 10L)

  val ServiceMaxBackoffMs: IvmConfEntry[Long] = millis("spark.ivm.service.maxBackoffMs", 600000L,
    "Longest wait of the refresh service before it retries a view whose refresh failed (the wait " +
      "doubles from 5 seconds with each failure in a row).", min = 0L)

  // ---- reports ----

  val RefreshProgress: IvmConfEntry[String] = entry("spark.ivm.refresh.progress", "auto", "string",
    "Whether a refresh that runs longer than spark.ivm.refresh.progressIntervalMs says on the " +
      "console (standard error) what it is doing: the view, the phase and the time so far, again " +
      "after each such interval. on, off, or auto: when Spark's console progress bar is on " +
      "(spark.ui.showConsoleProgress, which spark-ivm-sql turns on).")(v =>
    Some(v.trim.toLowerCase(Locale.ROOT)).filter(Seq("auto", "on", "off").contains).toRight("auto, on or off"))

  val RefreshProgressIntervalMs: IvmConfEntry[Long] = millis("spark.ivm.refresh.progressIntervalMs", 5000L,
    "How long a refresh runs before it first says on the console what it is doing, and how often " +
      "it says so again (spark.ivm.refresh.progress).", min = 10L, internal = true)

  val MetricsRowsJoined: IvmConfEntry[Boolean] = bool("spark.ivm.metrics.rowsJoined", default = false,
    "Count the rows that enter joins in a refresh's queries (RefreshReport.rows_joined, the work " +
      "measure of the benchmarks). Off by default: it waits for Spark's listener bus.", internal = true)

  // ---- fault injection (tests only) ----

  val Verify: IvmConfEntry[String] = entry("spark.ivm.verify", "off", "string",
    "Checks each incremental refresh against its query at the versions it consumed, and repairs a " +
      "view that differs by a full refresh (reported, and kept in the history; under REFRESH POLICY " +
      "INCREMENTAL STRICT also raised as IVM_VERIFY_MISMATCH): off, sample (a sample of the changed " +
      "keys), changed (every changed key, read by key) or all (the whole view, a recomputation).")(v =>
    Some(v.trim.toLowerCase(Locale.ROOT)).filter(Seq("off", "sample", "changed", "all").contains)
      .toRight("off, sample, changed or all"))

  val VerifySampleKeys: IvmConfEntry[Int] = int("spark.ivm.verify.sampleKeys", 64,
    "How many of a refresh's changed keys spark.ivm.verify = sample checks.", min = 1)

  val VerifyWholeMaxBytes: IvmConfEntry[Long] = bytes("spark.ivm.verify.wholeMaxBytes", 64L << 20,
    "A view without keys (a global aggregate) can be checked only by recomputing it: under " +
      "spark.ivm.verify = changed or sample, only where its base tables total at most this many bytes.")

  val WarmupEnabled: IvmConfEntry[Boolean] = bool("spark.ivm.warmup.enabled", default = true,
    "Static: when the application's first session with the extension starts, load the classes a " +
      "refresh uses (Spark's, Delta's, Parquet's and spark-ivm's, about 4,000) on a background " +
      "thread, so that the application's first refresh does not load them one by one as it runs " +
      "(about a second in a new JVM). Classes are loaded, not initialized: no code of theirs runs.",
    static = true)

  val TestingEnabled: IvmConfEntry[Boolean] = bool("spark.ivm.testing.enabled", default = false,
    "Static: allow the spark.ivm.testing.* fault-injection hooks. Without it they do nothing, " +
      "whatever a session sets.", static = true, internal = true)

  val TestingKillAt: IvmConfEntry[String] = text("spark.ivm.testing.killAt",
    "Test mode only: halt the JVM at this fault-injection point.", internal = true)
  val TestingSqlAt: IvmConfEntry[String] = text("spark.ivm.testing.sqlAt",
    "Test mode only: <point>:<statement> runs the statement once at that point.", internal = true)
  val TestingFailAt: IvmConfEntry[String] = text("spark.ivm.testing.failAt",
    "Test mode only: throw once at this fault-injection point.", internal = true)
  val TestingCorruptApply: IvmConfEntry[Boolean] = bool("spark.ivm.testing.corruptApply", default = false,
    "Test mode only: the next incremental refresh applies none of its changed rows (a wrong apply, " +
      "for spark.ivm.verify to catch).", internal = true)

  def all: Seq[IvmConfEntry[_]] = entries.toSeq

  /** Registers every entry with Spark's SQLConf (once per JVM). */
  lazy val registered: Unit = all.foreach { e =>
    ConfRegistration.register(e.key, e.doc, e.defaultString, e.static, e.internal,
      v => e.parse(v).isRight, s"expected ${e.typeName}")
  }

  /** The settings users set as a Markdown table (docs/sql.md); with `internal`, the tuning knobs
   * and test hooks, which Spark's `SET -v` leaves out too. */
  def markdownTable(internal: Boolean): String =
    ("| setting | type | default | meaning |" +: "|---|---|---|---|" +: all.filter(_.internal == internal).map { e =>
      s"| `${e.key}` | ${e.typeName} | ${if (e.defaultString.isEmpty) "(unset)" else s"`${e.defaultString}`"} | " +
        s"${e.doc.replace("|", "\\|")} |"
    }).mkString("\n")

  def main(args: Array[String]): Unit = println(markdownTable(internal = false))
}
