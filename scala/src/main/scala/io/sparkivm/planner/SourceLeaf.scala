package io.sparkivm.planner

import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.catalog.CatalogTable
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, OneRowRelation, Range}
import org.apache.spark.sql.catalyst.trees.TreeNodeTag
import org.apache.spark.sql.delta.catalog.DeltaTableV2
import org.apache.spark.sql.delta.files.TahoeLogFileIndex
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation
import org.apache.spark.sql.execution.datasources.{HadoopFsRelation, LogicalRelation}
import org.apache.spark.sql.ivm.OnDriver

/** One occurrence of a catalog table in a view's plan (a self-join has two). */
case class SourceLeaf(table: TableIdentifier, provider: Option[String], output: Seq[Attribute],
    plan: LogicalPlan) {
  def name: String = table.unquotedString
}

object SourceLeaf {

  /** The catalog table a plan leaf scans, if it is one. */
  def unapply(plan: LogicalPlan): Option[SourceLeaf] =
    catalogTable(plan).map { t =>
      val id = t.identifier
      SourceLeaf(id.copy(catalog = Some(id.catalog.getOrElse("spark_catalog"))), t.provider, plan.output, plan)
    }

  def catalogTable(plan: LogicalPlan): Option[CatalogTable] = plan match {
    case r: LogicalRelation => r.catalogTable
    case r: DataSourceV2Relation => deltaTable(r).flatMap(_.catalogTable)
    case _ => None
  }

  /**
   * `plan` (a view's query as analyzed) with each read of a Delta version the query names
   * (VERSION AS OF, TIMESTAMP AS OF) no longer a catalog table's: its version is the query's, and
   * a refresh must neither pin it to the table's latest nor replace it with its own read of the
   * table (which time-travels too, so this is done to the query's plan only). The validator
   * refuses it by name ([[timeTravelled]]).
   */
  def withTimeTravelUnnamed(plan: LogicalPlan): LogicalPlan = plan.transformUp {
    case r: LogicalRelation if r.catalogTable.isDefined && isTimeTravel(r) =>
      named(r.copy(catalogTable = None), r.catalogTable.get)
    case r: DataSourceV2Relation if catalogTable(r).isDefined && isTimeTravel(r) =>
      val d = deltaTable(r).get
      named(r.copy(table = d.copy(catalogTable = None)), d.catalogTable.get)
  }

  private def named(unnamed: LogicalPlan, table: CatalogTable): LogicalPlan = {
    unnamed.setTagValue(TimeTravelled, table.identifier.unquotedString)
    unnamed
  }

  /** The table name of a leaf [[withTimeTravelUnnamed]] unnamed, else its path. */
  def timeTravelled(plan: LogicalPlan): String =
    plan.getTagValue(TimeTravelled).orElse(deltaPath(plan)).getOrElse(plan.nodeName)

  private val TimeTravelled = TreeNodeTag[String]("spark-ivm.timeTravelled")

  /** True if the leaf reads a Delta version named in the query (VERSION AS OF, TIMESTAMP AS OF). */
  def isTimeTravel(plan: LogicalPlan): Boolean = plan match {
    case r: LogicalRelation => deltaIndex(r).exists(_.isTimeTravelQuery)
    case r: DataSourceV2Relation => deltaTable(r).exists(_.timeTravelOpt.isDefined)
    case _ => false
  }

  /** The path of a Delta table the leaf reads by its path, not by a catalog name. */
  def deltaPath(plan: LogicalPlan): Option[String] = plan match {
    case r: LogicalRelation if r.catalogTable.isEmpty => deltaIndex(r).map(_.path.toString)
    case r: DataSourceV2Relation => deltaTable(r).filter(_.catalogTable.isEmpty).map(_.path.toString)
    case _ => None
  }

  private def deltaTable(r: DataSourceV2Relation): Option[DeltaTableV2] = r.table match {
    case d: DeltaTableV2 => Some(d)
    case _ => None
  }

  private def deltaIndex(r: LogicalRelation): Option[TahoeLogFileIndex] = r.relation match {
    case fs: HadoopFsRelation => fs.location match {
        case index: TahoeLogFileIndex => Some(index)
        case _ => None
      }
    case _ => None
  }

  /** Leaves whose rows never change: VALUES, SELECT without FROM, range(). */
  def isConstant(plan: LogicalPlan): Boolean = plan match {
    case OnDriver(_) | _: OneRowRelation | _: Range => true
    case _ => false
  }
}
