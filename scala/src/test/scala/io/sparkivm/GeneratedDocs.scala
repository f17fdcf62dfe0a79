package io.sparkivm

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Paths}

import org.scalatest.Assertions.{assert => require}

/**
 * Sections of docs/sql.md generated from a registry: `check` fails when one is out of date, and
 * with IVM_UPDATE_DOCS=1 (`make docs`) rewrites it instead.
 */
object GeneratedDocs {
  def check(name: String, source: String, content: String): Unit = {
    val begin = s"<!-- $name: generated from $source by `make docs`; do not edit -->"
    val end = s"<!-- end of $name -->"
    val path = Paths.get("docs", "sql.md")
    val text = new String(Files.readAllBytes(path), UTF_8)
    val start = text.indexOf(begin)
    val stop = text.indexOf(end)
    require(start >= 0 && stop > start, s"docs/sql.md has no $name section ($begin ... $end)")
    val expected = s"$begin\n$content\n$end"
    if (sys.env.get("IVM_UPDATE_DOCS").contains("1")) {
      Files.write(path, (text.substring(0, start) + expected + text.substring(stop + end.length)).getBytes(UTF_8))
    } else {
      require(text.substring(start, stop + end.length) == expected,
        s"docs/sql.md's $name are out of date: run `make docs`")
    }
  }
}
