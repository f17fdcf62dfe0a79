package io.sparkivm.conf

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Paths}

import io.sparkivm.IvmException
import org.scalatest.funsuite.AnyFunSuite

/** The settings registry: every entry typed and documented, and docs/sql.md generated from it. */
class IvmConfSuite extends AnyFunSuite {
  private val Begin = "<!-- settings: generated from IvmConf by `make docs`; do not edit -->"
  private val End = "<!-- end of settings -->"

  test("every setting is under spark.ivm., documented, and its default is one of its values") {
    assert(IvmConf.all.map(_.key).distinct.size == IvmConf.all.size)
    IvmConf.all.foreach { e =>
      assert(e.key.startsWith("spark.ivm."), e.key)
      assert(e.doc.length > 20, e.key)
      assert(e.parse(e.defaultString).isRight, e.key)
    }
  }

  test("bad values are refused with the key and what is expected") {
    val e = intercept[IvmException](IvmConf.LocalMaxRows.read("lots"))
    assert(e.getMessage.contains("spark.ivm.localMaxRows") && e.getMessage.contains("whole number"))
    assert(IvmConf.ApplyMode.read(" MERGE ") == "merge")
    assert(IvmConf.FkPruning.parse("yes").isLeft)
    assert(IvmConf.MaxProbeKeys.parse("0").isLeft)
  }

  test("docs/sql.md lists the settings as the registry declares them") {
    val path = Paths.get("docs", "sql.md")
    val text = new String(Files.readAllBytes(path), UTF_8)
    val start = text.indexOf(Begin)
    val end = text.indexOf(End)
    assert(start >= 0 && end > start, s"docs/sql.md has no settings section ($Begin ... $End)")
    val expected = s"$Begin\n${IvmConf.markdownTable}\n$End"
    val current = text.substring(start, end + End.length)
    if (sys.env.get("IVM_UPDATE_DOCS").contains("1")) {
      Files.write(path, (text.substring(0, start) + expected + text.substring(end + End.length)).getBytes(UTF_8))
    } else {
      assert(current == expected, "docs/sql.md's settings table is out of date: run `make docs`")
    }
  }
}
