package io.sparkivm.policy

import java.time.{ZoneId, ZonedDateTime}

import io.sparkivm.catalog.{HistoryEntry, RefreshHistory, Schedule}
import org.scalatest.funsuite.AnyFunSuite

class CostModelSuite extends AnyFunSuite {
  private val MB = 1L << 20
  private def entry(mode: String, ms: Long, change: Long = -1, table: Long = -1) =
    HistoryEntry(1, 0, ms, mode, "", 0, Map.empty, change, table, "sql")

  private val Min = MB
  private def decide(h: Seq[HistoryEntry], x: Long, y: Long) = CostModel.decide(h, x, y, 100, 500, Min)

  test("a small change stays incremental, a change of much of the data recomputes") {
    // CREATE took 4 s over 256 MiB; recomputations since took 2 s.
    val history = Seq(entry("create", 4000, table = 256 * MB), entry("full", 2000, table = 256 * MB),
      entry("incremental", 1000, change = 100000))
    val small = decide(history, 200000, 256 * MB)
    assert(small.mode == "incremental" && small.reason.startsWith("AUTO chose incremental"))
    val large = decide(history, 100 * MB, 256 * MB)
    assert(large.mode == "full")
    val est = large.candidates.map(c => c.mode -> c.ms).toMap
    assert(est("full") == 2000 && est("full") + 500 < est("incremental"))
  }

  test("a change under the floor stays incremental, whatever the estimates; tables of any size recompute") {
    // On a tiny table the prior per changed byte, drawn from a recomputation that is all fixed
    // cost, favours recomputing; the change is too small for that to be true.
    val tiny = Seq(entry("create", 1500, table = 10000), entry("incremental", 3000, change = 9000))
    val d = decide(tiny, 30000, 10000)
    assert(d.mode == "incremental" && d.reason.contains("where AUTO stays incremental"), d)
    val est = d.candidates.map(c => c.mode -> c.ms).toMap
    assert(est("full") + 500 < est("incremental"), est)
    // 24 MiB of tables (TPC-H SF 0.1) and a change of 5% of them: recomputing is cheaper.
    val mid = Seq(entry("create", 1700, table = 24 * MB), entry("full", 1700, table = 24 * MB),
      entry("incremental", 1500, change = 50000))
    assert(decide(mid, 3 * MB, 24 * MB).mode == "full")
    assert(decide(mid, 50000, 24 * MB).mode == "incremental")
  }

  test("history moves the crossover; AUTO measures a recomputation once") {
    val create = entry("create", 4000, table = 256 * MB)
    val inc = entry("incremental", 1000, change = 100000)
    // No recomputation since CREATE, and incremental estimated at least half as dear: try one.
    val explore = decide(Seq(create, inc), 2 * MB, 256 * MB)
    assert(explore.mode == "full" && explore.reason.contains("measures it"), explore)
    // Once measured, the choice follows the estimates.
    val measured = Seq(create, inc, entry("full", 6000, table = 256 * MB))
    assert(decide(measured, 2 * MB, 256 * MB).mode == "incremental")
    // Incremental refreshes measured cheaper per byte than the prior: larger changes stay incremental.
    val prior = decide(measured, 60 * MB, 256 * MB)
    val learned = measured :+ entry("incremental", 3000, change = 60 * MB)
    assert(prior.mode == "full" && decide(learned, 60 * MB, 256 * MB).mode == "incremental", prior)
    // failed refreshes teach nothing, nor does a small change that happened to be slow
    val failed = learned :+ entry("incremental", 99999, change = 1).copy(error = Some("boom"))
    assert(decide(failed, 60 * MB, 256 * MB) == decide(learned, 60 * MB, 256 * MB))
    val slowSmall = measured :+ entry("incremental", 5000, change = 2000)
    assert(decide(slowSmall, 3000, 256 * MB).mode == "incremental")
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
