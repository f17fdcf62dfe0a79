package io.sparkivm.policy

import java.time.{ZoneId, ZonedDateTime}

import io.sparkivm.catalog.{HistoryEntry, RefreshHistory, Schedule}
import org.scalatest.funsuite.AnyFunSuite

class CostModelSuite extends AnyFunSuite {
  private val MB = 1L << 20
  private def entry(mode: String, ms: Long, change: Long = -1, table: Long = -1) =
    HistoryEntry(1, 0, ms, mode, "", 0, Map.empty, change, table, "sql")

  private val Min = MB
  private def decide(h: Seq[HistoryEntry], x: Long, y: Long) = CostModel.decide(h, x, y, 100, 200, Min)

  test("a small change stays incremental, a change of much of the data recomputes") {
    // CREATE took 4 s over 256 MiB; recomputations since took 2 s.
    val history = Seq(entry("create", 4000, table = 256 * MB), entry("full", 2000, table = 256 * MB),
      entry("incremental", 1000, change = 100000))
    val small = decide(history, 200000, 256 * MB)
    assert(small.mode == "incremental" && small.reason.startsWith("AUTO chose incremental"))
    val large = decide(history, 100 * MB, 256 * MB)
    assert(large.mode == "full")
    val est = large.candidates.map(c => c.mode -> c.ms).toMap
    assert(est("full") == 2000 && est("full") + 200 < est("incremental"))
  }

  test("the prior alone never sends a small change to a recomputation; measurements do") {
    // No incremental refresh measured yet: a small change is tried incrementally.
    val created = Seq(entry("create", 1500, table = 10000))
    assert(decide(created, 1000, 10000).mode == "incremental")
    // Measured: an incremental refresh that took twice the recomputation is not repeated, however
    // small the change (TPC-H at SF 0.01: 1.9-3.6 s against 1.0-1.3 s).
    val measured = created ++ Seq(entry("full", 1100, table = 10000), entry("incremental", 2500, change = 900),
      entry("incremental", 3400, change = 1100))
    val d = decide(measured, 1000, 10000)
    assert(d.mode == "full" && !d.reason.contains("tries"), d)
    // A change as large as the tables (every row updated) is not small, whatever its bytes.
    val table = Seq(entry("create", 1500, table = 200000))
    val whole = decide(table, 400000, 200000)
    assert(whole.mode == "full" && whole.reason.contains("as large as the base tables"), whole)
    // 24 MiB of tables (TPC-H SF 0.1) and a change of 5% of them: recomputing is cheaper.
    val mid = Seq(entry("create", 1700, table = 24 * MB), entry("full", 1700, table = 24 * MB),
      entry("incremental", 300, change = 50000), entry("incremental", 1500, change = 2 * MB))
    assert(decide(mid, 3 * MB, 24 * MB).mode == "full")
    assert(decide(mid, 50000, 24 * MB).mode == "incremental")
  }

  test("an incremental attempt AUTO stopped counts as one at least that long; the recomputation without it") {
    // The first refresh of a small change ran 20 s before AUTO stopped it and recomputed in 1 s.
    val stopped = entry("full", 21000, change = 5000, table = 10000).copy(stoppedMs = Some(20000))
    val h = Seq(entry("create", 1500, table = 10000), stopped)
    val d = decide(h, 5000, 10000)
    val est = d.candidates.map(c => c.mode -> c.ms).toMap
    assert(d.mode == "full", d)
    assert(est("full") == 1000 && est("incremental") >= 20000, est)
    assert(d.candidates.find(_.mode == "incremental").get.basis.startsWith("4.9 KiB of changes; fitted to 1"), d)
    // Kept in the history as written.
    val json = RefreshHistory.render(Seq(stopped))
    assert(RefreshHistory.read(Map(RefreshHistory.Property -> json)).map(_.stoppedMs) == Seq(Some(20000L)))
    assert(RefreshHistory.read(Map(RefreshHistory.Property -> RefreshHistory.render(h.take(1))))
      .map(_.stoppedMs) == Seq(None))
  }

  test("the estimates never contradict the choice unless the reason says what overruled them") {
    val histories = Seq(
      Seq(entry("create", 1500, table = 10000)),
      Seq(entry("create", 4000, table = 256 * MB), entry("incremental", 1000, change = 100000)),
      Seq(entry("create", 3000, table = 5 * MB), entry("full", 2000, table = 5 * MB),
        entry("incremental", 1900, change = 2000), entry("incremental", 2100, change = 9000)))
    for (h <- histories; x <- Seq(100L, 5000L, 2 * MB, 50 * MB)) {
      val d = decide(h, x, h.head.tableBytes)
      val est = d.candidates.map(c => c.mode -> c.ms).toMap
      val other = if (d.mode == "full") "incremental" else "full"
      if (est(d.mode) > est(other)) {
        assert(d.reason.contains("; "), s"$d contradicts its estimates without saying why")
      }
    }
  }

  test("a slow refresh among fast ones does not move the fit") {
    val h = Seq(entry("create", 3000, table = 64 * MB), entry("full", 2500, table = 64 * MB)) ++
      Seq(300L, 320L, 9000L, 310L, 330L).zipWithIndex.map { case (ms, i) =>
        entry("incremental", ms,
          change = 1000L * (i + 1) * (i + 1))
      }
    val d = decide(h, 5000, 64 * MB)
    assert(d.mode == "incremental" && d.candidates.find(_.mode == "incremental").get.ms < 1000, d)
  }

  test("history is kept in a bounded property") {
    var conf = Map.empty[String, String]
    (1 to RefreshHistory.MaxEntries + 5).foreach { i =>
      conf = RefreshHistory.recorded(conf, Some(entry("incremental", -1).copy(number = i, startMs = 0)))
    }
    val entries = RefreshHistory.read(conf)
    assert(entries.size == RefreshHistory.MaxEntries && entries.last.number == RefreshHistory.MaxEntries + 5)
    assert(entries.forall(_.durationMs >= 0))
  }

  test("schedules: when each kind is due, and stored forms round-trip") {
    val utc = ZoneId.of("UTC")
    def ms(h: Int, m: Int) = ZonedDateTime.of(2026, 3, 2, h, m, 0, 0, utc).toInstant.toEpochMilli
    assert(Schedule.Every(2, "HOUR").nextDue(ms(10, 0)) == ms(12, 0))
    val cron = Schedule.Cron("0 30 * * * ?", Some("UTC"))
    assert(cron.nextDue(ms(10, 0)) == ms(10, 30) && cron.nextDue(ms(10, 30)) == ms(11, 30))
    val paris = Schedule.Cron("0 0 9 * * ?", Some("Europe/Paris"))
    assert(paris.nextDue(ms(0, 0)) == ms(8, 0)) // 09:00 in Paris is 08:00 UTC in March
    assert(Schedule.OnUpdate(Some(10L -> "SECOND")).nextDue(ms(10, 0)) == ms(10, 0) + 10000)
    Seq(Schedule.Every(3, "DAY"), cron, Schedule.OnUpdate(None), Schedule.OnUpdate(Some(1L -> "MINUTE")))
      .foreach(s => assert(Schedule.fromJson(Schedule.json(s)).contains(s)))
  }
}
