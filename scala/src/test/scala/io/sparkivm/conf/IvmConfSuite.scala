package io.sparkivm.conf

import io.sparkivm.GeneratedDocs
import io.sparkivm.errors.IvmException
import org.scalatest.funsuite.AnyFunSuite

/** The settings registry: every entry typed and documented, and docs/sql.md generated from it. */
class IvmConfSuite extends AnyFunSuite {
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
    assert(IvmConf.FkPruning.parse("yes").isLeft)
    assert(IvmConf.MaxProbeKeys.parse("0").isLeft)
  }

  test("docs/sql.md lists the settings as the registry declares them") {
    GeneratedDocs.check("settings", "IvmConf", IvmConf.markdownTable)
  }
}
