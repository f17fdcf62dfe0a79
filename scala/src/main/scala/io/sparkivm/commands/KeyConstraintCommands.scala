package io.sparkivm.commands

import java.util.Locale

import scala.util.control.NonFatal

import io.sparkivm.catalog.{ForeignKey, KeyConstraint, KeyConstraints, PrimaryKey, ViewCatalog}
import io.sparkivm.errors.{IvmErrors, IvmException}
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.analysis.{UnresolvedIdentifier, UnresolvedTable}
import org.apache.spark.sql.catalyst.expressions.{ForeignKeyConstraint, PrimaryKeyConstraint, TableConstraint}
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.execution.command.LeafRunnableCommand
import org.apache.spark.sql.ivm.{SessionInternals, SparkInternals}
import org.apache.spark.sql.{Row, SparkSession}

/**
 * PRIMARY KEY and FOREIGN KEY constraints in Spark's own syntax. Spark 4.1+ parses them
 * (ALTER TABLE ... ADD CONSTRAINT, column and table constraints in CREATE TABLE) but Delta's
 * catalog refuses them; these commands take the parsed plans over and keep the constraints
 * with the table (see [[KeyConstraints]]). CHECK constraints stay with Delta.
 */
object KeyConstraintCommands {

  /** spark-ivm's command for a plan Spark parsed, if the plan declares or drops a key. */
  def intercept(plan: LogicalPlan): Option[LogicalPlan] = plan match {
    case AddConstraint(UnresolvedTable(parts, _, _), c) if isKey(c) => Some(AddKeyConstraintCommand(parts, c))
    case DropConstraint(UnresolvedTable(parts, _, _), name, ifExists, _) =>
      Some(DropKeyConstraintCommand(parts, name, ifExists, plan))
    case AlterTableDropConstraint(UnresolvedTable(parts, _, _), name, ifExists) =>
      Some(DropKeyConstraintCommand(parts, name, ifExists, plan))
    case c @ CreateTable(UnresolvedIdentifier(parts, _), _, _, spec: UnresolvedTableSpec, _)
        if spec.constraints.exists(isKey) =>
      Some(CreateTableWithKeysCommand(parts, c.copy(tableSpec = withoutKeys(spec)), keys(spec)))
    case c @ CreateTableAsSelect(UnresolvedIdentifier(parts, _), _, _, spec: UnresolvedTableSpec, _, _, _)
        if spec.constraints.exists(isKey) =>
      Some(CreateTableWithKeysCommand(parts, c.copy(tableSpec = withoutKeys(spec)), keys(spec)))
    case _ => None
  }

  private def isKey(c: TableConstraint): Boolean = c match {
    case _: PrimaryKeyConstraint | _: ForeignKeyConstraint => true
    case _ => false
  }
  private def keys(spec: UnresolvedTableSpec) = spec.constraints.filter(isKey)
  private def withoutKeys(spec: UnresolvedTableSpec) = spec.copy(constraints = spec.constraints.filterNot(isKey))

  /** The session-catalog table a name refers to; it must exist and be a Delta table. */
  private[commands] def tableOf(spark: SparkSession, parts: Seq[String]): TableIdentifier = {
    val id =
      try ViewCatalog.qualify(spark, parts)
      catch {
        case _: IvmException => throw IvmErrors.constraintInvalid(
            s"${parts.mkString(".")}: spark-ivm keeps key constraints for Delta tables of the session catalog.")
      }
    val catalog = SessionInternals.catalog(spark)
    if (!catalog.tableExists(id)) {
      throw IvmErrors.constraintInvalid(s"Table ${id.quotedString} does not exist.")
    }
    val provider = catalog.getTableMetadata(id).provider
    if (!provider.exists(_.equalsIgnoreCase("delta"))) {
      throw IvmErrors.constraintInvalid(s"Table ${id.quotedString} is not a Delta " +
        "table; spark-ivm keeps key constraints for Delta tables.")
    }
    id
  }

  /** The constraint as spark-ivm stores it; unnamed ones get a name from the table and columns. */
  private[commands] def keyConstraint(spark: SparkSession, id: TableIdentifier, c: TableConstraint): KeyConstraint = {
    def named(generated: => String) = Option(c.userProvidedName).getOrElse(generated)
      .toLowerCase(Locale.ROOT)
    c match {
      case pk: PrimaryKeyConstraint => PrimaryKey(named(s"${id.table}_pk"), id, pk.columns)
      case fk: ForeignKeyConstraint =>
        ForeignKey(named(s"${id.table}_${fk.childColumns.mkString("_")}_fk"), id, fk.childColumns,
          tableOf(spark, fk.parentTableId), fk.parentColumns,
          rely = fk.userProvidedCharacteristic.rely.contains(true))
      case other => throw IvmErrors.internal(s"not a key constraint: $other")
    }
  }
}

import KeyConstraintCommands._

case class AddKeyConstraintCommand(tableName: Seq[String], constraint: TableConstraint) extends LeafRunnableCommand {
  override def run(spark: SparkSession): Seq[Row] = {
    val id = tableOf(spark, tableName)
    KeyConstraints.add(spark, keyConstraint(spark, id, constraint))
    Nil
  }
}

/** Drops a spark-ivm key constraint, or hands the statement to Delta (CHECK constraints). */
case class DropKeyConstraintCommand(tableName: Seq[String], name: String, ifExists: Boolean,
    original: LogicalPlan)
    extends LeafRunnableCommand {
  override def run(spark: SparkSession): Seq[Row] = {
    val id = tableOf(spark, tableName)
    if (!KeyConstraints.drop(spark, id, name)) SparkInternals.dataFrame(spark, original).collect()
    Nil
  }
}

/** CREATE TABLE with PRIMARY KEY / FOREIGN KEY: creates the table, then declares the keys. */
case class CreateTableWithKeysCommand(tableName: Seq[String], create: LogicalPlan,
    keys: Seq[TableConstraint])
    extends LeafRunnableCommand {
  override def run(spark: SparkSession): Seq[Row] = {
    val existed = scala.util.Try(ViewCatalog.qualify(spark, tableName))
      .toOption.exists(SessionInternals.catalog(spark).tableExists)
    SparkInternals.dataFrame(spark, create).collect()
    // CREATE TABLE IF NOT EXISTS on an existing table changes nothing, its keys included.
    if (existed) return Nil
    val id = tableOf(spark, tableName)
    try {
      // Primary keys first: a foreign key of the table may reference the table itself.
      val resolved = keys.map(keyConstraint(spark, id, _)).sortBy { case _: PrimaryKey => 0; case _ => 1 }
      resolved.foreach(KeyConstraints.add(spark, _))
    } catch {
      case NonFatal(e) =>
        // A table whose constraints do not hold is not created: CREATE has no effect.
        spark.sql(s"DROP TABLE IF EXISTS ${id.quotedString}")
        throw e
    }
    Nil
  }
}
