package io.sparkivm.catalog

import java.time.{Instant, ZoneId, ZonedDateTime}
import java.util.Locale

import scala.util.control.NonFatal

import com.cronutils.model.CronType
import com.cronutils.model.definition.CronDefinitionBuilder
import com.cronutils.model.time.ExecutionTime
import com.cronutils.parser.CronParser
import io.sparkivm.errors.IvmErrors
import org.json4s._
import org.json4s.jackson.JsonMethods.{compact, parse, render}

/**
 * When the refresh service ([[io.sparkivm.service.RefreshService]]) refreshes a view, in the
 * syntax of Databricks' materialized views:
 * {{{
 *   SCHEDULE [REFRESH] EVERY n {MINUTE[S] | HOUR[S] | DAY[S] | WEEK[S]}
 *   SCHEDULE [REFRESH] CRON '<quartz cron>' [AT TIME ZONE '<zone id>']
 *   TRIGGER ON UPDATE [AT MOST EVERY INTERVAL n {SECOND[S] | MINUTE[S] | HOUR[S]}]
 * }}}
 * A view has at most one. It is stored as JSON in the backing table's `ivm.schedule` property.
 */
sealed trait Schedule {

  /** The clause as it would be written in CREATE MATERIALIZED VIEW. */
  def sql: String
  def toJson: JValue

  /**
   * When the view is next due, given when it was last refreshed or tried (epoch ms); for
   * [[Schedule.OnUpdate]] the earliest time the rate limit allows, a base-table commit permitting.
   */
  def nextDue(lastMs: Long): Long
}

object Schedule {
  val Property = "ivm.schedule"

  /** Units of EVERY and of a trigger's interval, with their length in ms. */
  private val Units: Seq[(String, Long)] = Seq("SECOND" -> 1000L, "MINUTE" -> 60000L,
    "HOUR" -> 3600000L, "DAY" -> 86400000L, "WEEK" -> 604800000L)
  val EveryUnits: Seq[String] = Seq("MINUTE", "HOUR", "DAY", "WEEK")
  val IntervalUnits: Seq[String] = Seq("SECOND", "MINUTE", "HOUR")

  /** A unit as written (singular or plural, any case), if it is one of `allowed`. */
  def unit(word: String, allowed: Seq[String]): Option[String] = {
    val u = word.toUpperCase(Locale.ROOT).stripSuffix("S")
    allowed.find(_ == u)
  }

  private def millis(n: Long, unit: String): Long = n * Units.find(_._1 == unit).get._2
  private def plural(n: Long, unit: String) = s"$n $unit${if (n == 1) "" else "S"}"

  case class Every(n: Long, unit: String) extends Schedule {
    def periodMs: Long = millis(n, unit)
    def sql: String = s"SCHEDULE EVERY ${plural(n, unit)}"
    def toJson: JValue = JObject("every" -> JLong(n), "unit" -> JString(unit))
    def nextDue(lastMs: Long): Long = lastMs + periodMs
  }

  case class Cron(expression: String, timeZone: Option[String]) extends Schedule {
    private lazy val execution = ExecutionTime.forCron(parseCron(expression))
    def zone: ZoneId = timeZone.map(ZoneId.of).getOrElse(ZoneId.of("UTC"))
    def sql: String = s"SCHEDULE CRON ${ViewCatalog.sqlString(expression)}" +
      timeZone.map(z => s" AT TIME ZONE ${ViewCatalog.sqlString(z)}").getOrElse("")
    def toJson: JValue = JObject("cron" -> JString(expression),
      "timeZone" -> timeZone.map(JString(_)).getOrElse(JNothing))

    /** The first fire time after `lastMs`; never, if the expression has none left. */
    def nextDue(lastMs: Long): Long = {
      val next = execution.nextExecution(ZonedDateTime.ofInstant(Instant.ofEpochMilli(lastMs), zone))
      if (next.isPresent) next.get.toInstant.toEpochMilli else Long.MaxValue
    }
  }

  /** Refresh when a base table commits, at most once per `minIntervalMs` (0: no limit). */
  case class OnUpdate(interval: Option[(Long, String)]) extends Schedule {
    def minIntervalMs: Long = interval.map { case (n, u) => millis(n, u) }.getOrElse(0L)
    def sql: String = "TRIGGER ON UPDATE" +
      interval.map { case (n, u) => s" AT MOST EVERY INTERVAL ${plural(n, u)}" }.getOrElse("")
    def toJson: JValue = JObject("onUpdate" -> JBool(true),
      "atMostEvery" -> interval.map { case (n, u) => JObject("n" -> JLong(n), "unit" -> JString(u)) }
        .getOrElse(JNothing))
    def nextDue(lastMs: Long): Long = lastMs + minIntervalMs
  }

  private lazy val cronParser = new CronParser(CronDefinitionBuilder.instanceDefinitionFor(CronType.QUARTZ))

  private def parseCron(expression: String) = cronParser.parse(expression).validate()

  /** The schedule if it is valid, else IVM_INVALID_SCHEDULE naming what is wrong. */
  def validated(s: Schedule): Schedule = {
    def invalid(reason: String) = IvmErrors.invalidSchedule(s.sql, reason)
    s match {
      case Every(n, _) if n <= 0 => throw invalid("the interval must be a positive number")
      case OnUpdate(Some((n, _))) if n <= 0 => throw invalid("the interval must be a positive number")
      case c: Cron =>
        try parseCron(c.expression)
        catch {
          case NonFatal(e) => throw invalid(s"'${c.expression}' is not a Quartz cron expression " +
              s"(seconds minutes hours day-of-month month day-of-week [year]): ${e.getMessage}")
        }
        c.timeZone.foreach { z =>
          try ZoneId.of(z)
          catch {
            case NonFatal(_) => throw invalid(s"'$z' is not a time zone id (such as 'UTC' or 'Europe/Paris')")
          }
        }
      case _ =>
    }
    s
  }

  /** The stored form of a schedule. */
  def json(s: Schedule): String = compact(render(s.toJson))

  def fromJson(json: String): Option[Schedule] =
    try {
      parse(json) match {
        case o: JObject if (o \ "every") != JNothing =>
          val JInt(n) = o \ "every": @unchecked
          val JString(u) = o \ "unit": @unchecked
          Some(Every(n.toLong, u))
        case o: JObject if (o \ "cron") != JNothing =>
          val JString(c) = o \ "cron": @unchecked
          Some(Cron(c, (o \ "timeZone") match { case JString(z) => Some(z); case _ => None }))
        case o: JObject if (o \ "onUpdate") != JNothing =>
          Some(OnUpdate((o \ "atMostEvery") match {
            case a: JObject =>
              val JInt(n) = a \ "n": @unchecked
              val JString(u) = a \ "unit": @unchecked
              Some(n.toLong -> u)
            case _ => None
          }))
        case _ => None
      }
    } catch { case NonFatal(_) => None }
}
