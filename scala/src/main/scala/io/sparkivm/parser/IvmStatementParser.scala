package io.sparkivm.parser

import io.sparkivm.catalog.{RefreshPolicy, Schedule, ViewColumn, ViewStorage}
import io.sparkivm.commands._
import org.apache.spark.sql.catalyst.parser.{CatalystSqlParser, ParseException}
import org.apache.spark.sql.catalyst.trees.Origin
import org.apache.spark.sql.types.DataType

/**
 * Recognises spark-ivm's statements by their first keywords (as Iceberg's and Delta's parsers
 * do) and parses them by recursive descent. `recognise` returns None for every other statement,
 * which then goes to Spark's own parser unchanged: that includes Spark's pipeline-only forms
 * (CREATE STREAMING TABLE, CREATE FLOW ...).
 *
 * {{{
 *   CREATE [OR (REPLACE | REFRESH)] MATERIALIZED VIEW [IF NOT EXISTS] name
 *       [(col [type] [NOT NULL] [COMMENT 'text'], ...)]
 *       [COMMENT 'text'] [TBLPROPERTIES (key = value, ...)] [USING DELTA]
 *       [PARTITIONED BY (col, ...) | CLUSTER BY (col, ...)]
 *       [REFRESH POLICY (AUTO | INCREMENTAL [STRICT] | FULL)] [schedule] [ACCESS BY (col, ...)] AS query
 *   REFRESH MATERIALIZED VIEW name [FULL] [CASCADE] [SYNC] [WITH REPORT]
 *   DROP MATERIALIZED VIEW [IF EXISTS] name
 *   SHOW MATERIALIZED VIEWS [(IN | FROM) namespace]
 *   SHOW REFRESHES [FOR name] [LIMIT n]
 *   SHOW MATERIALIZED VIEW STATE [FOR name]
 *   (DESCRIBE | DESC) MATERIALIZED VIEW name [AS JSON]
 *   EXPLAIN [EXTENDED] REFRESH MATERIALIZED VIEW name
 *   ALTER MATERIALIZED VIEW name (SET TBLPROPERTIES (k = v, ...) | UNSET TBLPROPERTIES (k, ...)
 *       | SET REFRESH POLICY policy | (ADD | ALTER) schedule | DROP (SCHEDULE | TRIGGER))
 *
 *   schedule: SCHEDULE [REFRESH] EVERY n (MINUTE[S] | HOUR[S] | DAY[S] | WEEK[S])
 *           | SCHEDULE [REFRESH] CRON 'quartz cron' [AT TIME ZONE 'zone']
 *           | TRIGGER ON UPDATE [AT MOST EVERY INTERVAL n (SECOND[S] | MINUTE[S] | HOUR[S])]
 * }}}
 * Keywords are case-insensitive, names may be qualified and back-quoted, comments are allowed
 * anywhere white space is. Errors are Spark ParseExceptions with line and position.
 */
object IvmStatementParser {

  /** The statement, if it is one of spark-ivm's; throws ParseException if it is but is malformed. */
  def recognise(sql: String): Option[IvmStatement] =
    if (!isStatement(sql)) None else Some(new StatementParser(sql).statement())

  /** True if `sql` is one of spark-ivm's statements (by its first words; it may be malformed). */
  def isStatement(sql: String): Boolean = isOurs(firstWords(sql, 4))

  /** True if a statement whose first (unquoted) words are `heads` is one of spark-ivm's. */
  private[parser] def isOurs(heads: List[String]): Boolean =
    heads match {
      case "CREATE" :: "MATERIALIZED" :: "VIEW" :: _ => true
      case "CREATE" :: "OR" :: ("REPLACE" | "REFRESH") :: "MATERIALIZED" :: _ => true
      case ("REFRESH" | "DROP" | "ALTER" | "DESCRIBE" | "DESC") :: "MATERIALIZED" :: "VIEW" :: _ =>
        true
      case "SHOW" :: "MATERIALIZED" :: "VIEWS" :: _ => true
      case "SHOW" :: "MATERIALIZED" :: "VIEW" :: "STATE" :: _ => true
      case "SHOW" :: "REFRESHES" :: _ => true
      case "EXPLAIN" :: "REFRESH" :: "MATERIALIZED" :: "VIEW" :: Nil => true
      case "EXPLAIN" :: "EXTENDED" :: "REFRESH" :: "MATERIALIZED" :: Nil => true
      case _ => false
    }

  private def firstWords(sql: String, n: Int): List[String] = {
    var pos = 0
    val out = List.newBuilder[String]
    var count = 0
    var stop = false
    while (count < n && !stop) {
      // A malformed token ends the head; the statement's own parser reports it if it is ours.
      (try Some(Tokenizer.next(sql, pos))
      catch { case _: TokenizeError => None }) match {
        case Some((Word(w, false, _), p)) =>
          out += w.toUpperCase(java.util.Locale.ROOT); pos = p; count += 1
        case _ => stop = true
      }
    }
    out.result()
  }

  /** Words that end a column's type in a column list: its properties. */
  private val ColumnPropertyWords =
    Set("NOT", "COMMENT", "DEFAULT", "GENERATED", "MASK", "CONSTRAINT", "PRIMARY", "REFERENCES", "CHECK", "UNIQUE")

  private val NoConstraints = "a materialized view takes no constraints: declare keys on its base tables " +
    "(ALTER TABLE ... ADD CONSTRAINT), which its refreshes use"

  private val PartitionedOrClustered =
    "a Delta table is partitioned or clustered, not both: give PARTITIONED BY or CLUSTER BY"

  private class StatementParser(sql: String) {
    private var pos = 0

    private def peek: Token =
      try Tokenizer.next(sql, pos)._1
      catch {
        case e: TokenizeError => fail(e.offset, s"'${sql.substring(e.offset).take(10)}'", e.message)
      }
    private def advance(): Token = {
      val (t, p) =
        try Tokenizer.next(sql, pos)
        catch {
          case e: TokenizeError => fail(e.offset, s"'${sql.substring(e.offset).take(10)}'", e.message)
        }
      pos = p
      t
    }

    private def isKeyword(t: Token, kw: String): Boolean = t match {
      case Word(w, false, _) => w.equalsIgnoreCase(kw)
      case _ => false
    }
    private def acceptKeyword(kw: String): Boolean =
      if (isKeyword(peek, kw)) { advance(); true }
      else false
    private def expectKeyword(kw: String): Unit =
      if (!acceptKeyword(kw)) unexpected(peek, s"expected $kw")
    private def acceptSymbol(s: String): Boolean = peek match {
      case Symbol(`s`, _) => advance(); true
      case _ => false
    }
    private def expectSymbol(s: String): Unit = if (!acceptSymbol(s)) unexpected(peek, s"expected '$s'")

    private def describe(t: Token): String = t match {
      case End(_) => "end of input"
      case Word(w, true, _) => s"'`$w`'"
      case Word(w, _, _) => s"'$w'"
      case StringLit(v, _) => s"'\"$v\"'"
      case NumberLit(n, _) => s"'$n'"
      case Symbol(s, _) => s"'$s'"
    }

    private def unexpected(t: Token, hint: String): Nothing = fail(t.offset, describe(t), hint)

    private def fail(offset: Int, near: String, hint: String): Nothing = {
      val before = sql.substring(0, math.min(offset, sql.length))
      val line = before.count(_ == '\n') + 1
      val column = offset - (before.lastIndexOf('\n') + 1)
      throw new ParseException(
        Some(sql), Origin(line = Some(line), startPosition = Some(column)),
        "PARSE_SYNTAX_ERROR", Map("error" -> near, "hint" -> s": $hint"))
    }

    /** Optional trailing semicolon, then the end of the text. */
    private def expectEnd(): Unit = {
      acceptSymbol(";")
      peek match {
        case End(_) =>
        case t => unexpected(t, "expected end of statement")
      }
    }

    private def identifier(what: String): String = peek match {
      case Word(w, _, _) => advance(); w
      case t => unexpected(t, s"expected $what")
    }

    private def multipartName(): Seq[String] = peek match {
      case w @ Word(kw, false, _) if kw.equalsIgnoreCase("IDENTIFIER") && followedBy("(") => identifierClause(w)
      case _ => plainName()
    }

    /** The token after the next one (End if there is none or it cannot be read). */
    private def afterNext: Token =
      try Tokenizer.next(sql, Tokenizer.next(sql, pos)._2)._1
      catch { case _: TokenizeError => End(pos) }

    /** True if the token after the next one is the symbol `s`. */
    private def followedBy(s: String): Boolean = afterNext match {
      case Symbol(`s`, _) => true
      case _ => false
    }

    /** True if the token after the next one is the keyword `kw`. */
    private def followedByWord(kw: String): Boolean = isKeyword(afterNext, kw)

    /** `IDENTIFIER('db.name')`, as Spark takes a name from a constant string anywhere a name goes. */
    private def identifierClause(at: Token): Seq[String] = {
      advance()
      expectSymbol("(")
      val text = stringLiteral("the name, as a string")
      expectSymbol(")")
      try CatalystSqlParser.parseMultipartIdentifier(text)
      catch { case _: ParseException => unexpected(at, s"expected a name in IDENTIFIER(...), not '$text'") }
    }

    private def plainName(): Seq[String] = {
      val parts = Seq.newBuilder[String]
      parts += identifier("a name")
      while (peek match { case Symbol(".", _) => true; case _ => false }) {
        advance()
        parts += identifier("a name after '.'")
      }
      parts.result()
    }

    /** A string literal; adjacent literals concatenate, as in Spark ('it''s' is 'its'). */
    private def stringLiteral(what: String): String = peek match {
      case StringLit(_, _) =>
        val sb = new StringBuilder
        while (peek match { case StringLit(_, _) => true; case _ => false }) {
          sb ++= advance().asInstanceOf[StringLit].value
        }
        sb.toString
      case t => unexpected(t, s"expected $what as a quoted string")
    }

    /** `(key = value, ...)`; keys are dotted names or strings; values strings, numbers, words. */
    private def propertyList(withValues: Boolean): Seq[(String, String)] = {
      expectSymbol("(")
      val out = Seq.newBuilder[(String, String)]
      var more = true
      while (more) {
        val key = peek match {
          case StringLit(v, _) => advance(); v
          case Word(_, _, _) =>
            val parts = multipartName()
            parts.mkString(".")
          case t => unexpected(t, "expected a property key")
        }
        val value = if (!withValues) ""
        else {
          acceptSymbol("=")
          peek match {
            case StringLit(_, _) => stringLiteral("a value")
            case NumberLit(n, _) => advance(); n
            case Word(w, false, _) => advance(); w
            case t => unexpected(t, s"expected a value for property '$key'")
          }
        }
        out += key -> value
        more = acceptSymbol(",")
      }
      expectSymbol(")")
      out.result()
    }

    private def positiveNumber(what: String): Long = peek match {
      case NumberLit(n, _) if n.forall(_.isDigit) && n.length <= 9 => advance(); n.toLong
      case t => unexpected(t, s"expected $what as a whole number")
    }

    /** After REFRESH: POLICY (AUTO | INCREMENTAL [STRICT] | FULL). */
    private def refreshPolicy(): RefreshPolicy = {
      expectKeyword("POLICY")
      if (acceptKeyword("AUTO")) RefreshPolicy.Auto
      else if (acceptKeyword("FULL")) RefreshPolicy.Full
      else if (acceptKeyword("INCREMENTAL")) {
        if (acceptKeyword("STRICT")) RefreshPolicy.IncrementalStrict else RefreshPolicy.Incremental
      } else unexpected(peek, "expected AUTO, INCREMENTAL, INCREMENTAL STRICT or FULL")
    }

    /** `n unit`, the unit one of `allowed` (singular or plural). */
    private def interval(allowed: Seq[String]): (Long, String) = {
      val n = peek match {
        case NumberLit(v, _) if v.forall(_.isDigit) && v.length <= 9 => advance(); v.toLong
        case t => unexpected(t, "expected a whole number")
      }
      val unit = peek match {
        case Word(w, false, _) if Schedule.unit(w, allowed).isDefined => advance(); Schedule.unit(w, allowed).get
        case t => unexpected(t, s"expected ${allowed.map(u => s"${u}S").mkString(", ")}")
      }
      (n, unit)
    }

    /** A SCHEDULE or TRIGGER ON UPDATE clause at the current token, validated; None if there is none. */
    private def scheduleClause(): Option[Schedule] = {
      val parsed = if (acceptKeyword("SCHEDULE")) {
        if (acceptKeyword("TRIGGER")) Some(onUpdate())
        else {
          acceptKeyword("REFRESH")
          if (acceptKeyword("EVERY")) {
            val (n, unit) = interval(Schedule.EveryUnits)
            Some(Schedule.Every(n, unit))
          } else if (acceptKeyword("CRON")) {
            val expression = stringLiteral("the cron expression")
            val zone = if (acceptKeyword("AT")) {
              expectKeyword("TIME"); expectKeyword("ZONE")
              Some(stringLiteral("the time zone"))
            } else None
            Some(Schedule.Cron(expression, zone))
          } else unexpected(peek, "expected EVERY or CRON")
        }
      } else if (acceptKeyword("TRIGGER")) Some(onUpdate())
      else None
      parsed.map(Schedule.validated)
    }

    private def onUpdate(): Schedule = {
      expectKeyword("ON"); expectKeyword("UPDATE")
      if (acceptKeyword("AT")) {
        expectKeyword("MOST"); expectKeyword("EVERY")
        acceptKeyword("INTERVAL")
        Schedule.OnUpdate(Some(interval(Schedule.IntervalUnits)))
      } else Schedule.OnUpdate(None)
    }

    def statement(): IvmStatement = {
      val first = advance().asInstanceOf[Word].text.toUpperCase(java.util.Locale.ROOT)
      first match {
        case "CREATE" => create()
        case "REFRESH" =>
          expectKeyword("MATERIALIZED"); expectKeyword("VIEW")
          val name = multipartName()
          var full = false
          var cascade = false
          var more = true
          var sync = false
          while (more) {
            if (!full && acceptKeyword("FULL")) full = true
            else if (!cascade && acceptKeyword("CASCADE")) cascade = true
            // SYNC, as other engines write it: a REFRESH returns when the view is up to date.
            else if (!sync && acceptKeyword("SYNC")) sync = true
            else if (isKeyword(peek, "ASYNC")) {
              unexpected(peek,
                "a REFRESH runs to its end (SYNC); refresh in the background with a " +
                  "SCHEDULE or TRIGGER ON UPDATE clause, which the refresh service runs")
            } else more = false
          }
          val withReport = acceptKeyword("WITH") && { expectKeyword("REPORT"); true }
          expectEnd()
          RefreshMaterializedView(name, full, cascade, withReport)
        case "DROP" =>
          expectKeyword("MATERIALIZED"); expectKeyword("VIEW")
          val ifExists = if (acceptKeyword("IF")) { expectKeyword("EXISTS"); true }
          else false
          val name = multipartName()
          expectEnd()
          DropMaterializedView(name, ifExists)
        case "SHOW" if acceptKeyword("REFRESHES") =>
          val name = if (acceptKeyword("FOR")) Some(multipartName()) else None
          val limit = if (acceptKeyword("LIMIT")) Some(positiveNumber("the number of refreshes").toInt) else None
          expectEnd()
          ShowRefreshes(name, limit)
        case "SHOW" =>
          expectKeyword("MATERIALIZED")
          if (acceptKeyword("VIEW")) {
            expectKeyword("STATE")
            val name = if (acceptKeyword("FOR")) Some(multipartName()) else None
            expectEnd()
            ShowState(name)
          } else {
            expectKeyword("VIEWS")
            val ns = if (acceptKeyword("IN") || acceptKeyword("FROM")) Some(multipartName()) else None
            expectEnd()
            ShowMaterializedViews(ns)
          }
        case "DESCRIBE" | "DESC" =>
          expectKeyword("MATERIALIZED"); expectKeyword("VIEW")
          val name = multipartName()
          val asJson = if (acceptKeyword("AS")) { expectKeyword("JSON"); true }
          else false
          expectEnd()
          DescribeMaterializedView(name, asJson)
        case "EXPLAIN" =>
          val extended = acceptKeyword("EXTENDED")
          expectKeyword("REFRESH"); expectKeyword("MATERIALIZED"); expectKeyword("VIEW")
          val name = multipartName()
          expectEnd()
          ExplainRefresh(name, extended)
        case "ALTER" =>
          expectKeyword("MATERIALIZED"); expectKeyword("VIEW")
          val name = multipartName()
          val stmt = if (acceptKeyword("SET")) {
            if (acceptKeyword("REFRESH")) {
              AlterRefreshPolicy(name, refreshPolicy())
            } else {
              if (!isKeyword(peek, "TBLPROPERTIES")) unexpected(peek, "expected TBLPROPERTIES or REFRESH POLICY")
              advance()
              AlterMaterializedViewProperties(name, propertyList(withValues = true).toMap, Nil)
            }
          } else if (acceptKeyword("UNSET")) {
            expectKeyword("TBLPROPERTIES")
            AlterMaterializedViewProperties(name, Map.empty, propertyList(withValues = false).map(_._1))
          } else if (isKeyword(peek, "ADD") || isKeyword(peek, "ALTER")) {
            val action = advance().asInstanceOf[Word].text.toUpperCase(java.util.Locale.ROOT)
            scheduleClause() match {
              case Some(s) => AlterSchedule(name, action, Some(s))
              case None => unexpected(peek, "expected SCHEDULE or TRIGGER ON UPDATE")
            }
          } else if (acceptKeyword("DROP")) {
            if (!acceptKeyword("SCHEDULE") && !acceptKeyword("TRIGGER")) unexpected(peek, "expected SCHEDULE or TRIGGER")
            AlterSchedule(name, "DROP", None)
          } else unexpected(peek,
            "expected SET TBLPROPERTIES, UNSET TBLPROPERTIES, SET REFRESH POLICY, " +
              "ADD SCHEDULE, ALTER SCHEDULE or DROP SCHEDULE")
          expectEnd()
          stmt
      }
    }

    private def create(): IvmStatement = {
      val (orReplace, orRefresh) = if (acceptKeyword("OR")) {
        if (acceptKeyword("REPLACE")) (true, false)
        else if (acceptKeyword("REFRESH")) (false, true)
        else unexpected(peek, "expected REPLACE or REFRESH")
      } else (false, false)
      expectKeyword("MATERIALIZED"); expectKeyword("VIEW")
      val ifNotExists =
        if (acceptKeyword("IF")) { expectKeyword("NOT"); expectKeyword("EXISTS"); true }
        else false
      if ((orReplace || orRefresh) && ifNotExists) {
        fail(pos, "'IF NOT EXISTS'",
          s"OR ${if (orReplace) "REPLACE" else "REFRESH"} and IF NOT EXISTS cannot be used together")
      }
      val name = multipartName()
      val columns = if (peek match { case Symbol("(", _) => true; case _ => false }) columnList() else Nil
      var comment: Option[String] = None
      var props: Option[Map[String, String]] = None
      var policy: Option[RefreshPolicy] = None
      var schedule: Option[Schedule] = None
      var accessBy: Option[Seq[String]] = None
      var partitionedBy: Option[Seq[String]] = None
      var clusteredBy: Option[Seq[String]] = None
      var provider = false
      var done = false
      def once(t: Token, twice: Boolean, clause: String): Unit =
        if (twice) unexpected(t, s"$clause is given twice")
      while (!done) {
        val t = peek
        if (isKeyword(t, "ACCESS")) {
          once(t, accessBy.isDefined, "ACCESS BY")
          advance()
          expectKeyword("BY")
          accessBy = Some(nameList("a column name"))
        } else if (isKeyword(t, "REFRESH")) {
          once(t, policy.isDefined, "REFRESH POLICY")
          advance()
          policy = Some(refreshPolicy())
        } else if (isKeyword(t, "SCHEDULE") || isKeyword(t, "TRIGGER")) {
          if (schedule.isDefined) unexpected(t, "a view has one schedule or trigger")
          schedule = scheduleClause()
        } else if (isKeyword(t, "COMMENT")) {
          once(t, comment.isDefined, "COMMENT")
          advance()
          comment = Some(stringLiteral("the comment"))
        } else if (isKeyword(t, "TBLPROPERTIES")) {
          once(t, props.isDefined, "TBLPROPERTIES")
          advance()
          props = Some(propertyList(withValues = true).toMap)
        } else if (isKeyword(t, "USING")) {
          once(t, provider, "USING")
          advance()
          val format = peek
          if (!isKeyword(format, "DELTA")) {
            unexpected(format, "expected DELTA: a materialized view's rows are kept in a Delta table")
          }
          advance()
          provider = true
        } else if (isKeyword(t, "PARTITIONED")) {
          once(t, partitionedBy.isDefined, "PARTITIONED BY")
          if (clusteredBy.isDefined) unexpected(t, PartitionedOrClustered)
          advance()
          expectKeyword("BY")
          partitionedBy = Some(layoutColumns("PARTITIONED BY"))
        } else if (isKeyword(t, "CLUSTER")) {
          once(t, clusteredBy.isDefined, "CLUSTER BY")
          if (partitionedBy.isDefined) unexpected(t, PartitionedOrClustered)
          advance()
          expectKeyword("BY")
          if (isKeyword(peek, "AUTO") || isKeyword(peek, "NONE")) {
            unexpected(peek, "expected the clustering columns in parentheses: CLUSTER BY (col, ...)")
          }
          clusteredBy = Some(layoutColumns("CLUSTER BY"))
        } else if (isKeyword(t, "AS")) {
          advance()
          done = true
        } else {
          unexpected(t,
            unsupportedClause(t).getOrElse(
              "expected COMMENT, TBLPROPERTIES or AS (or REFRESH POLICY, SCHEDULE, TRIGGER ON UPDATE, " +
                "ACCESS BY, PARTITIONED BY, CLUSTER BY, USING DELTA)"))
        }
      }
      val queryStart = Tokenizer.skipBlank(sql, pos)
      var queryEnd = sql.length
      // A trailing semicolon (and blanks or comments after it) ends the statement.
      val trimmed = sql.reverse.dropWhile(c => c.isWhitespace)
      if (trimmed.headOption.contains(';')) queryEnd = sql.length - (sql.length - trimmed.length) - 1
      val query = sql.substring(queryStart, math.max(queryStart, queryEnd)).trim
      if (query.isEmpty) unexpected(End(queryStart), "expected the view's query after AS")
      val inPlace = sql.substring(0, queryStart).map(c => if (c == '\n') '\n' else ' ') +
        sql.substring(queryStart, math.max(queryStart, queryEnd))
      CreateMaterializedView(name, ifNotExists, orReplace, columns, comment,
        props.getOrElse(Map.empty), query, inPlace, policy, schedule, accessBy.getOrElse(Nil),
        ViewStorage(partitionedBy.getOrElse(Nil), clusteredBy.getOrElse(Nil)), orRefresh)
    }

    /** `(name, ...)`: one or more names, each followed by `check` (of the token after it). */
    private def nameList(what: String, check: Token => Unit = _ => ()): Seq[String] = {
      expectSymbol("(")
      val names = Seq.newBuilder[String]
      var more = true
      while (more) {
        names += identifier(what)
        check(peek)
        more = acceptSymbol(",")
      }
      expectSymbol(")")
      names.result()
    }

    /** PARTITIONED BY's or CLUSTER BY's columns: names of the view's columns, nothing more. */
    private def layoutColumns(clause: String): Seq[String] =
      nameList("a column of the view",
        {
          case t @ Symbol("(", _) =>
            unexpected(t,
              s"$clause takes columns of the view: compute a value in the query " +
                "(year(ts) AS ts_year) and name that column")
          case t @ Word(_, _, _) => unexpected(t, s"$clause names columns of the view, without types")
          case _ =>
        })

    /** What to write instead of a clause of Spark's CREATE that a materialized view does not take. */
    private def unsupportedClause(t: Token): Option[String] = t match {
      case Word(w, false, _) => w.toUpperCase(java.util.Locale.ROOT) match {
          case "LOCATION" => Some("a materialized view's rows are kept in a managed Delta table of its " +
              "database: create the view in a database whose LOCATION is where they should be")
          case "OPTIONS" => Some("give the backing Delta table's settings as TBLPROPERTIES ('delta.key' = 'value')")
          case "WITH" => Some("a materialized view has no row filter: filter in its query")
          case "DEFAULT" => Some("a materialized view has no default collation: collate in its query")
          case "CLUSTERED" | "SKEWED" | "STORED" | "ROW" =>
            Some("a materialized view is a Delta table: lay it out with PARTITIONED BY or CLUSTER BY")
          case _ => None
        }
      case _ => None
    }

    /**
     * The column list of CREATE: `name [type] [NOT NULL] [COMMENT 'text']`, as Spark's pipeline
     * grammar takes it. Constraints, defaults, generated columns and masks are refused with what
     * to do instead.
     */
    private def columnList(): Seq[ViewColumn] = {
      expectSymbol("(")
      val columns = Seq.newBuilder[ViewColumn]
      var more = true
      while (more) {
        refuseConstraint(peek)
        val name = identifier("a column name")
        val dataType = columnType()
        var notNull = false
        var comment: Option[String] = None
        var properties = true
        while (properties) {
          val t = peek
          if (!notNull && acceptKeyword("NOT")) {
            expectKeyword("NULL")
            notNull = true
          } else if (comment.isEmpty && acceptKeyword("COMMENT")) {
            comment = Some(stringLiteral("a column comment"))
          } else {
            columnPropertyHint(t).foreach(unexpected(t, _))
            properties = false
          }
        }
        columns += ViewColumn(name, dataType, notNull, comment)
        more = acceptSymbol(",")
      }
      expectSymbol(")")
      columns.result()
    }

    private def refuseConstraint(t: Token): Unit = t match {
      case Word(w, false, _) if w.equalsIgnoreCase("CONSTRAINT") && expectation =>
        unexpected(t,
          "a materialized view has no expectations: filter its query (WHERE cond) to drop the " +
            "rows that fail one, or check them with a view of the failing rows")
      case Word(w, false, _)
          if (w.equalsIgnoreCase("CONSTRAINT") && !followedBy(",") && !followedBy(")")) ||
            ((w.equalsIgnoreCase("PRIMARY") || w.equalsIgnoreCase("FOREIGN")) && followedByWord("KEY")) ||
            ((w.equalsIgnoreCase("UNIQUE") || w.equalsIgnoreCase("CHECK")) && followedBy("(")) =>
        unexpected(t, NoConstraints)
      case _ =>
    }

    /** True if the tokens ahead are `CONSTRAINT name EXPECT`, a pipeline's expectation. */
    private def expectation: Boolean =
      (try Tokenizer.tokens(sql.substring(pos), 3)
      catch { case _: TokenizeError => Vector.empty }) match {
        case Vector(_, Word(_, _, _), Word(w, false, _)) => w.equalsIgnoreCase("EXPECT")
        case _ => false
      }

    /** What to do instead of a column property a view's column does not take, if `t` is one. */
    private def columnPropertyHint(t: Token): Option[String] = t match {
      case Word(w, false, _) => w.toUpperCase(java.util.Locale.ROOT) match {
          case "DEFAULT" | "GENERATED" =>
            Some("a materialized view's columns are computed by its query: compute the value there")
          case "MASK" => Some("a materialized view's columns have no masks: mask in its query")
          case "CONSTRAINT" | "PRIMARY" | "REFERENCES" | "CHECK" | "UNIQUE" =>
            Some(NoConstraints)
          case _ => None
        }
      case _ => None
    }

    /**
     * A column's data type, if one follows its name: the text up to the next `,` or `)`, or to a
     * column property, outside brackets, parsed by Spark's type parser.
     */
    private def columnType(): Option[DataType] = {
      def ends(t: Token): Boolean = t match {
        case Symbol("," | ")", _) | End(_) => true
        case Word(w, false, _) => ColumnPropertyWords.contains(w.toUpperCase(java.util.Locale.ROOT))
        case _ => false
      }
      val start = peek
      if (ends(start)) None
      else {
        var depth = 0
        while (depth > 0 || !ends(peek)) {
          advance() match {
            case Symbol("(" | "<", _) => depth += 1
            case Symbol(")" | ">", _) => depth -= 1
            case End(o) => unexpected(End(o), "expected ')' after the column list")
            case _ =>
          }
        }
        val text = sql.substring(start.offset, peek.offset).trim
        try Some(CatalystSqlParser.parseDataType(text))
        catch { case _: ParseException => unexpected(start, s"expected a data type, not '$text'") }
      }
    }
  }
}
