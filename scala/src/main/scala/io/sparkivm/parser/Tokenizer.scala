package io.sparkivm.parser

/** A token of a spark-ivm statement, with its offset in the statement text. */
private[parser] sealed trait Token { def offset: Int }
private[parser] case class Word(text: String, quoted: Boolean, offset: Int) extends Token
private[parser] case class StringLit(value: String, offset: Int) extends Token
private[parser] case class NumberLit(text: String, offset: Int) extends Token
private[parser] case class Symbol(text: String, offset: Int) extends Token
private[parser] case class End(offset: Int) extends Token

private[parser] class TokenizeError(val offset: Int, val message: String) extends Exception(message)

/**
 * Splits the head of a statement into tokens. Comments (`--`, and `/* */` nested as in Spark)
 * and white space are skipped; identifiers may be back-quoted (`` `a``b` ``); strings use
 * single or double quotes with backslash escapes, as in Spark SQL.
 */
private[parser] object Tokenizer {

  /** Offset of the first character at or after `from` that is not white space or comment. */
  def skipBlank(text: String, from: Int): Int = {
    var i = from
    var moved = true
    while (moved && i < text.length) {
      moved = false
      if (text(i).isWhitespace) { i += 1; moved = true }
      else if (text.startsWith("--", i)) {
        while (i < text.length && text(i) != '\n') i += 1
        moved = true
      } else if (text.startsWith("/*", i)) {
        var depth = 0
        var closed = false
        while (i < text.length && !closed) {
          if (text.startsWith("/*", i)) { depth += 1; i += 2 }
          else if (text.startsWith("*/", i)) { depth -= 1; i += 2; closed = depth == 0 }
          else i += 1
        }
        if (!closed) throw new TokenizeError(text.length, "unclosed comment")
        moved = true
      }
    }
    i
  }

  /** The first `n` tokens of `text` (all of them by default), End left out. */
  def tokens(text: String, n: Int = Int.MaxValue): Vector[Token] =
    Iterator.iterate(next(text, 0)) { case (_, pos) => next(text, pos) }.map(_._1)
      .takeWhile(!_.isInstanceOf[End]).take(n).toVector

  /** The token that starts at or after `from`, and the offset just past it. */
  def next(text: String, from: Int): (Token, Int) = {
    val i = skipBlank(text, from)
    if (i >= text.length) return (End(i), i)
    val c = text(i)
    if (c == '`') {
      val sb = new StringBuilder
      var j = i + 1
      var done = false
      while (!done) {
        if (j >= text.length) throw new TokenizeError(i, "unclosed back-quoted identifier")
        if (text(j) == '`') {
          if (j + 1 < text.length && text(j + 1) == '`') { sb += '`'; j += 2 }
          else { done = true; j += 1 }
        } else { sb += text(j); j += 1 }
      }
      (Word(sb.toString, quoted = true, i), j)
    } else if (c == '\'' || c == '"') {
      val sb = new StringBuilder
      var j = i + 1
      var done = false
      while (!done) {
        if (j >= text.length) throw new TokenizeError(i, "unclosed string literal")
        val d = text(j)
        if (d == '\\' && j + 1 < text.length) { sb += unescape(text(j + 1)); j += 2 }
        else if (d == c) { done = true; j += 1 }
        else { sb += d; j += 1 }
      }
      (StringLit(sb.toString, i), j)
    } else if (c.isDigit || (c == '-' && i + 1 < text.length && text(i + 1).isDigit)) {
      var j = i + 1
      while (j < text.length && (text(j).isLetterOrDigit || text(j) == '.')) j += 1
      (NumberLit(text.substring(i, j), i), j)
    } else if (c.isLetter || c == '_') {
      var j = i + 1
      while (j < text.length && (text(j).isLetterOrDigit || text(j) == '_')) j += 1
      (Word(text.substring(i, j), quoted = false, i), j)
    } else {
      (Symbol(c.toString, i), i + 1)
    }
  }

  private def unescape(c: Char): Char = c match {
    case 'n' => '\n'
    case 't' => '\t'
    case 'r' => '\r'
    case '0' => '\u0000'
    case other => other
  }
}
