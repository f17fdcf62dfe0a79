package io.sparkivm

import org.scalatest.funsuite.AnyFunSuite

/** Set when [[WarmupProbe]]'s static initializer runs. */
object WarmupProbeState {
  @volatile var initialized = false
}

/** A class whose initialization is visible: the warm-up must load it without running it. */
object WarmupProbe {
  WarmupProbeState.initialized = true
  def touch(): Unit = ()
}

/**
 * The warm-up list names classes of this build, and the warm-up loads them without running
 * any of their code, skipping names that do not exist.
 */
class ClassWarmupSuite extends AnyFunSuite {
  private val loader = getClass.getClassLoader

  test("the list names the refresh's classes, most of which this build has") {
    val names = ClassWarmup.listed(loader)
    assert(names.size > 1000)
    assert(names.contains("io.sparkivm.execution.RefreshPipeline$"))
    assert(names.distinct.size == names.size)
    assert(!names.exists(n => n.contains("$$Lambda") || n.contains("/0x")))
    val found = ClassWarmup.load(loader, names)
    assert(found > names.size * 0.95, s"$found of ${names.size} listed classes load")
  }

  test("classes are loaded, not initialized; missing names are skipped") {
    val probe = "io.sparkivm.WarmupProbe$"
    assert(ClassWarmup.load(loader, Seq("io.sparkivm.NoSuchClass", probe, "not a class name")) == 1)
    assert(!WarmupProbeState.initialized, "the warm-up ran a static initializer")
    WarmupProbe.touch()
    assert(WarmupProbeState.initialized)
  }
}
