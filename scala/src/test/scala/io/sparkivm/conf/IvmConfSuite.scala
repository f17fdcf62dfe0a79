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
    assert(IvmConf.FkPruningEnabled.parse("yes").isLeft)
    assert(IvmConf.KeyProbingMaxKeys.parse("0").isLeft)
  }

  test("sizes and durations take Spark's units; -1 stays where it means derived") {
    assert(IvmConf.ChangesLocalMaxBytes.read("32m") == (32L << 20))
    assert(IvmConf.ChangesLocalMaxBytes.read("1048576") == (1L << 20))
    assert(IvmConf.ChangesLocalMaxBytes.parse("-1").isLeft)
    assert(IvmConf.StateDriverMaxBytes.read("-1") == -1L)
    assert(IvmConf.StateDriverMaxBytes.read("2g") == (2L << 30))
    assert(IvmConf.ChangesLocalMaxBytes.parse("lots").isLeft)
    assert(IvmConf.ServicePollIntervalMs.read("5s") == 5000L)
    assert(IvmConf.ServicePollIntervalMs.read("250") == 250L)
    assert(IvmConf.ServicePollIntervalMs.parse("5ms").isLeft) // below its minimum of 10 ms
    assert(IvmConf.ChangesLocalMaxBytes.defaultString == "32m")
    assert(IvmConf.ServiceMaxBackoffMs.defaultString == "10min")
  }

  test("the Scala name of a setting is its key") {
    val names = IvmConf.getClass.getMethods.filter(_.getReturnType == classOf[IvmConfEntry[_]])
      .map(m => m.invoke(IvmConf).asInstanceOf[IvmConfEntry[_]].key -> m.getName).toMap
    assert(names.size == IvmConf.all.size)
    names.foreach { case (key, name) =>
      val expected = key.stripPrefix("spark.ivm.").split('.').map(_.capitalize).mkString
      assert(name == expected, key)
    }
  }

  test("docs/sql.md lists the settings as the registry declares them, tuning knobs apart") {
    assert(IvmConf.all.exists(_.internal) && IvmConf.all.exists(!_.internal))
    assert(IvmConf.all.filter(_.key.startsWith("spark.ivm.testing.")).forall(_.internal))
    GeneratedDocs.check("settings", "IvmConf", IvmConf.markdownTable(internal = false))
    GeneratedDocs.check("internal settings", "IvmConf", IvmConf.markdownTable(internal = true))
  }
}
