package io.sparkivm

import scala.io.Source

import org.scalatest.funsuite.AnyFunSuite

class IvmErrorsSuite extends AnyFunSuite {
  test("every condition is declared once, with a message template and a SQLSTATE") {
    assert(IvmErrors.conditions.nonEmpty)
    IvmErrors.conditions.foreach { c =>
      assert(c.startsWith("IVM_"), c)
      assert(IvmErrors.reader.getSqlState(c).matches("[0-9A-Z]{5}"), c)
      assert(IvmErrors.reader.getMessageTemplate(c).nonEmpty, c)
    }
  }

  test("an error carries its condition, parameters and SQLSTATE, as Spark's own do") {
    val e = IvmErrors.unsupported("LIMIT", "Drop the LIMIT.")
    assert(e.getCondition == "IVM_UNSUPPORTED_OPERATOR")
    assert(e.getSqlState == "0A000")
    assert(e.getMessageParameters.get("operator") == "LIMIT")
    assert(e.getMessage.startsWith("[IVM_UNSUPPORTED_OPERATOR] LIMIT cannot be maintained incrementally. Drop the LIMIT."))
    assert(e.getMessage.endsWith("SQLSTATE: 0A000"))
  }

  test("an error must be given exactly its template's parameters") {
    intercept[IllegalArgumentException](IvmErrors.of("IVM_VIEW_NOT_FOUND"))
    intercept[IllegalArgumentException](IvmErrors.of("IVM_VIEW_NOT_FOUND", "name" -> "v", "extra" -> 1))
    intercept[Exception](IvmErrors.of("IVM_NO_SUCH_CONDITION"))
  }

  test("every condition raised in the sources is declared, and every declared one is raised") {
    val raised = sources.flatMap(s => "\"(IVM_[A-Z_]+)\"".r.findAllMatchIn(s).map(_.group(1))).toSet
    assert(raised -- IvmErrors.conditions == Set.empty)
    assert(IvmErrors.conditions.toSet -- raised == Set.empty)
  }

  private def sources: Seq[String] = {
    val root = new java.io.File("scala/src/main/scala")
    def walk(f: java.io.File): Seq[java.io.File] =
      if (f.isDirectory) f.listFiles().toSeq.flatMap(walk) else Seq(f).filter(_.getName.endsWith(".scala"))
    walk(root).map { f =>
      val s = Source.fromFile(f, "UTF-8")
      try s.mkString finally s.close()
    }
  }

  test("docs/sql.md lists the errors as the registry declares them") {
    val rows = IvmErrors.conditions.map { c =>
      // Parameters as code, so that Markdown does not take `<view>` for an HTML tag.
      val template = IvmErrors.reader.getMessageTemplate(c).replace("|", "\\|")
        .replaceAll("<([a-z]+)>", "`<$1>`")
      s"| `$c` | ${IvmErrors.reader.getSqlState(c)} | $template |"
    }
    GeneratedDocs.check("errors", "error/ivm-error-conditions.json",
      ("| Condition | SQLSTATE | Message |" +: "|---|---|---|" +: rows).mkString("\n"))
  }
}
