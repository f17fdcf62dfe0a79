package io.sparkivm.parser

import java.util.Locale

/**
 * spark-ivm's statements inside a SQL script (`BEGIN ... END`, Spark's SQL scripting). Spark's
 * grammar parses a script whole, and knows none of spark-ivm's statements: it read `REFRESH
 * MATERIALIZED VIEW v;` as a REFRESH of a resource path and CREATE MATERIALIZED VIEW as a
 * declarative pipeline's dataset, which it refuses to run. Each of spark-ivm's statements in a
 * script is rewritten to `EXECUTE IMMEDIATE '<its text>'`, which Spark runs, at that point of
 * the script, through this parser.
 */
private[parser] object ScriptStatements {

  /** Words after which a statement of a script starts. */
  private val StatementStarts = Set("BEGIN", "THEN", "ELSE", "DO", "REPEAT", "LOOP")

  /** The script with spark-ivm's statements rewritten, or None if `sql` is not a script or has
   *  none of them (or cannot be tokenized: Spark's parser then reports it). */
  def rewritten(sql: String): Option[String] = {
    val tokens =
      try if (isScript(Tokenizer.tokens(sql, 3))) Tokenizer.tokens(sql) else return None
      catch { case _: TokenizeError => return None }
    // Each of spark-ivm's statements: from its first word to the `;` that ends it.
    val spans = tokens.indices.flatMap { i =>
      val starts = i > 0 && (tokens(i - 1) match {
        case Symbol(";", _) => true
        case w: Word => !w.quoted && StatementStarts(upper(w))
        case _ => false
      })
      if (!starts || !IvmStatementParser.isOurs(heads(tokens, i))) None
      else end(tokens, i).map(e => tokens(i).offset -> tokens(e).offset)
    }
    if (spans.isEmpty) None
    else
      Some(spans.foldRight(sql) { case ((from, until), text) =>
        text.substring(0, from) + "EXECUTE IMMEDIATE " + quoted(text.substring(from, until).trim) +
          text.substring(until)
      })
  }

  /** `BEGIN ...` or `label: BEGIN ...`. */
  private def isScript(tokens: Vector[Token]): Boolean = tokens match {
    case (w: Word) +: _ if !w.quoted && upper(w) == "BEGIN" => true
    case (_: Word) +: Symbol(":", _) +: (w: Word) +: _ if !w.quoted && upper(w) == "BEGIN" => true
    case _ => false
  }

  private def heads(tokens: Vector[Token], from: Int): List[String] =
    tokens.iterator.drop(from).take(4).takeWhile {
      case w: Word => !w.quoted
      case _ => false
    }.map { case w: Word => upper(w); case _ => "" }.toList

  /** The index of the `;` that ends the statement starting at `from` (outside parentheses). */
  private def end(tokens: Vector[Token], from: Int): Option[Int] = {
    var depth = 0
    (from until tokens.length).find { i =>
      tokens(i) match {
        case Symbol("(", _) => depth += 1; false
        case Symbol(")", _) => depth -= 1; false
        case Symbol(";", _) => depth == 0
        case _ => false
      }
    }
  }

  private def upper(w: Word): String = w.text.toUpperCase(Locale.ROOT)

  /** A Spark SQL string literal of `text`: backslashes and single quotes escaped. */
  private def quoted(text: String): String =
    "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
}
