package io.sparkivm.policy

import java.time.{ZoneId, ZonedDateTime}

import io.sparkivm.catalog.{HistoryEntry, RefreshHistory, Schedule}
import org.scalatest.funsuite.AnyFunSuite

class CostModelSuite extends AnyFunSuite {
  private val MB = 1L << 20
  private def entry(mode: String, ms: Long, change: Long = -1, table: Long = -1) =
    HistoryEntry(1, 0, ms, mode, "", 0, Map.empty, change, table, "sql")

  test("a small change stays incremental, a change of most of the data recomputes") {
    // CREATE read 100 MiB in 2 s: a recomputation costs about 1 s + 100 MiB at ~100 KiB/ms.
    val history = Seq(entry("create", 2000, table = 100 * MB))
    val small = CostModel.decide(history, changeBytes = 10000, tableBytes = 100 * MB, factor = 3, minGainMs = 500)
    assert(small.mode == "incremental" && small.reason.startsWith("AUTO chose incremental"))
    val large = CostModel.decide(history, changeBytes = 200 * MB, tableBytes = 100 * MB, factor = 3, minGainMs = 500)
    assert(large.mode == "full")
    val est = large.candidates.map(c => c.mode -> c.ms).toMap
    assert(est("full") + 500 < est("incremental"))
  }

  test("where both cost about the same, incremental stays; history moves the crossover") {
    // A small table: however large its change, both cost the fixed part.
    val tiny = Seq(entry("create", 1500, table = 10000))
    assert(CostModel.decide(tiny, 30000, 10000, 3, 500).mode == "incremental")
    // Measured incremental refreshes cheaper per byte than the prior: a larger change stays incremental.
    val create = entry("create", 2000, table = 100 * MB)
    val prior = CostModel.decide(Seq(create), 60 * MB, 100 * MB, 3, 500)
    val measured = Seq(create, entry("incremental", 800, change = 1000), entry("incremental", 1300, change = 40 * MB))
    val learned = CostModel.decide(measured, 60 * MB, 100 * MB, 3, 500)
    assert(prior.mode == "full" && learned.mode == "incremental", (prior, learned))
    // failed refreshes teach nothing, nor does a small change that happened to be slow
    val failed = measured :+ entry("incremental", 99999, change = 1).copy(error = Some("boom"))
    assert(CostModel.decide(failed, 60 * MB, 100 * MB, 3, 500) == learned)
    val slowSmall = Seq(create, entry("incremental", 800, change = 1000), entry("incremental", 5000, change = 2000))
    assert(CostModel.decide(slowSmall, 3000, 100 * MB, 3, 500).mode == "incremental")
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
