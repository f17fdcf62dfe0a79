package io.sparkivm.epsilon

import io.sparkivm.execution.MaintenanceStrategy
import org.scalatest.funsuite.AnyFunSuite

class EpsilonStrategyProviderSuite extends AnyFunSuite {
  test("the pipeline finds IVM^eps through its service file, once") {
    // Without it triangle views would silently fall back to counting IVM.
    assert(MaintenanceStrategy.providers.map(_.getClass) == Seq(classOf[EpsilonStrategyProvider]))
  }
}
