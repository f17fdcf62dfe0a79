package io.sparkivm.planner

import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.catalog.CatalogTable
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, OneRowRelation, Range}
import org.apache.spark.sql.delta.catalog.DeltaTableV2
import org.apache.spark.sql.execution.datasources.LogicalRelation
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation
import org.apache.spark.sql.ivm.OnDriver

/** One occurrence of a catalog table in a view's plan (a self-join has two). */
case class SourceLeaf(table: TableIdentifier, provider: Option[String], output: Seq[Attribute],
    plan: LogicalPlan) {
  def name: String = table.unquotedString
}

object SourceLeaf {

  /** The catalog table a plan leaf scans, if it is one. */
  def unapply(plan: LogicalPlan): Option[SourceLeaf] = {
    val table: Option[CatalogTable] = plan match {
      case r: LogicalRelation => r.catalogTable
      case r: DataSourceV2Relation => r.table match {
          case d: DeltaTableV2 => d.catalogTable
          case _ => None
        }
      case _ => None
    }
    table.map { t =>
      val id = t.identifier
      SourceLeaf(id.copy(catalog = Some(id.catalog.getOrElse("spark_catalog"))), t.provider, plan.output, plan)
    }
  }

  /** Leaves whose rows never change: VALUES, SELECT without FROM, range(). */
  def isConstant(plan: LogicalPlan): Boolean = plan match {
    case OnDriver(_) | _: OneRowRelation | _: Range => true
    case _ => false
  }
}
