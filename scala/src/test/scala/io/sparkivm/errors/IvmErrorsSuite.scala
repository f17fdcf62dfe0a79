package io.sparkivm.errors

import io.sparkivm.{GeneratedDocs, MainSources}
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
    assert(
      e.getMessage.startsWith("[IVM_UNSUPPORTED_OPERATOR] LIMIT cannot be maintained incrementally. Drop the LIMIT."))
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

  test("each condition has a method of its own, and no other package raises one by name or a bare JVM error") {
    val errors = sourceFiles.collect { case (path, text) if path.endsWith("errors/IvmErrors.scala") => text }
    assert(errors.size == 1)
    IvmErrors.conditions.foreach { c =>
      assert(errors.head.contains(s"\"$c\""), s"$c has no method of its own in IvmErrors")
    }
    // Outside the errors package an error is raised through a method named for it; a state
    // that should never be reached is IvmErrors.internal (Spark's INTERNAL_ERROR).
    val banned = Seq("IvmErrors.of(", "IvmErrors.withCause(", "new IllegalStateException",
      "new IllegalArgumentException", "new RuntimeException", "sys.error(")
    val found = for {
      (path, text) <- sourceFiles if !path.contains("/io/sparkivm/errors/")
      (line, n) <- text.split("\n").zipWithIndex
      b <- banned if line.contains(b)
    } yield s"$path:${n + 1}: $b"
    assert(found.isEmpty, found.mkString("\n"))
  }

  test("an internal error is Spark's INTERNAL_ERROR, naming the view it reaches the user from") {
    val e = IvmErrors.internal("no delta rule for Foo")
    assert(e.getCondition == "INTERNAL_ERROR")
    assert(e.getMessage.contains("spark-ivm: no delta rule for Foo"))
    val named = IvmErrors.inView("db.v", e)
    assert(named.asInstanceOf[org.apache.spark.SparkThrowable].getCondition == "INTERNAL_ERROR")
    assert(named.getMessage.contains("materialized view db.v") && named.getMessage.contains("no delta rule for Foo"))
    assert(named.getCause eq e)
    val other = IvmErrors.notFound("db.w")
    assert(IvmErrors.inView("db.w", other) eq other)
    assert(IvmErrors.inView("db.v", named) eq named)
  }

  test("an error of a helper view's refresh names its view, its condition and other parameters kept") {
    val cause = new IllegalStateException("gone")
    val e = IvmErrors.sourceMissing("`db`.`__ivm_rec_v_r_1a2b3c4d`", "db.ed", cause)
    val named = IvmErrors.throughHelper("`db`.`v`", "__ivm_rec_v_r_1a2b3c4d", e).asInstanceOf[IvmException]
    assert(named.getCondition == e.getCondition && (named.getCause eq cause))
    assert(named.parameters == e.parameters + ("view" -> "`db`.`v`"))
    assert(!named.getMessage.contains("__ivm_rec_") && named.getMessage.contains("`db`.`v`"))
    assert(named.getStackTrace.sameElements(e.getStackTrace))
    // errors of other views, and errors without a view, pass as they are
    val other = IvmErrors.sourceMissing("`db`.`w`", "db.ed", cause)
    assert(IvmErrors.throughHelper("`db`.`v`", "__ivm_rec_v_r_1a2b3c4d", other) eq other)
    val internal = IvmErrors.internal("x")
    assert(IvmErrors.throughHelper("`db`.`v`", "__ivm_rec_v_r_1a2b3c4d", internal) eq internal)
  }

  private def sources: Seq[String] = sourceFiles.map(_._2)

  private def sourceFiles: Seq[(String, String)] = MainSources.files

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
