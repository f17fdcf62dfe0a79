package io.sparkivm.catalog

import java.util.Locale

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.functions.{col, count, lit}
import org.apache.spark.sql.{DataFrame, SparkSession}

/** A PRIMARY KEY or FOREIGN KEY declared on a Delta table (informational, checked by spark-ivm). */
sealed trait KeyConstraint {
  def name: String
  def table: TableIdentifier
  def columns: Seq[String]

  /** The text stored in the table property, as SQL: `PRIMARY KEY (`a`)` etc. */
  def text: String
}

case class PrimaryKey(name: String, table: TableIdentifier, columns: Seq[String]) extends KeyConstraint {
  def text: String = s"PRIMARY KEY ${KeyConstraints.columnList(columns)}"
}

/**
 * A foreign key. `rely` (Spark's `RELY` characteristic) says the writers of both tables keep
 * every reference valid, as the optimizers that honour RELY assume: a refresh then trusts it
 * instead of re-checking the referencing table (see FkDeltaPlanner). It is checked when declared.
 */
case class ForeignKey(name: String, table: TableIdentifier, columns: Seq[String],
    parent: TableIdentifier, parentColumns: Seq[String], rely: Boolean = false)
    extends KeyConstraint {
  def text: String = s"FOREIGN KEY ${KeyConstraints.columnList(columns)} REFERENCES " +
    s"${parent.quotedString} ${KeyConstraints.columnList(parentColumns)}" + (if (rely) " RELY" else "")
}

/**
 * PK/FK constraints of Delta tables. Delta's catalog does not store them (Spark 4.1+ parses them
 * but Delta refuses them), so spark-ivm keeps each one with the table, as the table property
 * `ivm.constraint.<name>` whose value is the constraint's SQL; SHOW TBLPROPERTIES and DESCRIBE
 * TABLE EXTENDED show them. They are informational, as in other lakehouse catalogs: Delta does
 * not enforce them on writes. spark-ivm checks them when they are declared, and every refresh
 * that relies on one re-checks, from the changes, the rows it relies on (see FkChecks).
 */
object KeyConstraints {
  val Prefix = "ivm.constraint."

  /** The constraints declared on a table, read from its latest Delta metadata. */
  def of(spark: SparkSession, table: TableIdentifier): Seq[KeyConstraint] = {
    val conf = DeltaTables.log(spark, table).update().metadata.configuration
    conf.toSeq.collect { case (k, v) if k.startsWith(Prefix) => parse(k.stripPrefix(Prefix), table, v) }
      .sortBy(_.name)
  }

  def primaryKey(spark: SparkSession, table: TableIdentifier): Option[PrimaryKey] =
    of(spark, table).collectFirst { case p: PrimaryKey => p }

  /** Declares a constraint after checking that the table's current rows satisfy it. */
  def add(spark: SparkSession, c: KeyConstraint): Unit = {
    val existing = of(spark, c.table)
    if (existing.exists(_.name.equalsIgnoreCase(c.name))) {
      throw IvmErrors.constraintExists(c.table.quotedString, s"a constraint named ${c.name}")
    }
    val schema = spark.table(c.table.quotedString).schema.fieldNames
    def checkColumns(t: TableIdentifier, cols: Seq[String], names: Seq[String]): Unit =
      cols.filterNot(x => names.exists(_.equalsIgnoreCase(x))).foreach { missing =>
        throw invalid(s"Table ${t.quotedString} has no column $missing.")
      }
    checkColumns(c.table, c.columns, schema.toIndexedSeq)
    if (c.columns.map(_.toLowerCase(Locale.ROOT)).distinct.size != c.columns.size) {
      throw invalid(s"Constraint ${c.name} names a column twice.")
    }
    c match {
      case pk: PrimaryKey =>
        existing.collectFirst { case p: PrimaryKey => p }.foreach { p =>
          throw IvmErrors.constraintExists(c.table.quotedString,
            s"primary key ${p.name} ${columnList(p.columns)}; drop it first")
        }
        checkPrimaryKey(spark, pk)
      case fk: ForeignKey =>
        val parentPk = primaryKey(spark, fk.parent).getOrElse(throw invalid(
            s"Foreign key ${fk.name} references ${fk.parent.quotedString}, which has no primary key. " +
              s"Declare it first: ALTER TABLE ${fk.parent.quotedString} ADD CONSTRAINT <name> " +
              s"PRIMARY KEY ${columnList(fk.parentColumns)}."))
        if (fk.columns.size != fk.parentColumns.size) {
          throw invalid(s"Foreign key ${fk.name} has ${fk.columns.size} " +
            s"columns but references ${fk.parentColumns.size}.")
        }
        val lower = (s: Seq[String]) => s.map(_.toLowerCase(Locale.ROOT)).toSet
        if (lower(parentPk.columns) != lower(fk.parentColumns)) {
          throw invalid(s"Foreign key ${fk.name} must reference the " +
            s"primary key of ${fk.parent.quotedString}, ${columnList(parentPk.columns)}, not " +
            s"${columnList(fk.parentColumns)}.")
        }
        checkForeignKey(spark, fk)
    }
    spark.sql(s"ALTER TABLE ${c.table.quotedString} SET TBLPROPERTIES " +
      s"(${sqlString(Prefix + c.name.toLowerCase(Locale.ROOT))} = ${sqlString(c.text)})")
  }

  /** Drops a constraint declared with spark-ivm; false if the table has none of that name. */
  def drop(spark: SparkSession, table: TableIdentifier, name: String): Boolean = {
    if (!of(spark, table).exists(_.name.equalsIgnoreCase(name))) false
    else {
      spark.sql(s"ALTER TABLE ${table.quotedString} UNSET TBLPROPERTIES " +
        s"(${sqlString(Prefix + name.toLowerCase(Locale.ROOT))})")
      true
    }
  }

  private val Examples = 5

  private def checkPrimaryKey(spark: SparkSession, pk: PrimaryKey): Unit = {
    val t = spark.table(pk.table.quotedString)
    val keys = pk.columns.map(quoted)
    val nulls = t.where(keys.map(_.isNull).reduce(_ || _)).select(keys: _*)
    report(pk, nulls, "rows have a NULL key")
    val dups = t.groupBy(keys: _*).agg(count(lit(1)).as("__ivm_n")).where(col("__ivm_n") > 1)
    report(pk, dups, "keys appear more than once")
  }

  private def checkForeignKey(spark: SparkSession, fk: ForeignKey): Unit = {
    val child = spark.table(fk.table.quotedString).select(fk.columns.map(quoted): _*)
      .toDF(fk.columns.indices.map(i => s"__ivm_f$i"): _*)
    val parent = spark.table(fk.parent.quotedString).select(fk.parentColumns.map(quoted): _*)
      .toDF(fk.columns.indices.map(i => s"__ivm_p$i"): _*)
    val on = fk.columns.indices.map(i => col(s"__ivm_f$i") === col(s"__ivm_p$i")).reduce(_ && _)
    // MATCH SIMPLE, as in SQL: a key with a NULL column references nothing and is not checked.
    val nonNull = fk.columns.indices.map(i => col(s"__ivm_f$i").isNotNull).reduce(_ && _)
    val orphans = child.where(nonNull).join(parent, on, "left_anti").distinct()
      .toDF(fk.columns: _*)
    report(fk, orphans, s"keys have no row in ${fk.parent.quotedString}")
  }

  /** Fails with a count and a few examples if `bad` has rows. */
  private def report(c: KeyConstraint, bad: DataFrame, what: String): Unit = {
    val examples = bad.limit(Examples).collect()
    if (examples.nonEmpty) {
      val n = bad.count()
      val shown = examples.map(r => r.toSeq.map(String.valueOf).mkString("(", ", ", ")")).mkString(", ")
      throw IvmErrors.constraintViolated(s"${c.name} (${c.text})", c.table.quotedString,
        s"$n $what, for example $shown")
    }
  }

  private[catalog] def columnList(cols: Seq[String]): String =
    cols.map(quote).mkString("(", ", ", ")")

  private def quote(name: String): String = "`" + name.replace("`", "``") + "`"
  private def quoted(name: String) = col(quote(name))
  private def sqlString(s: String): String = "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"

  private val Ident = "`((?:[^`]|``)*)`".r

  private def idents(s: String): Seq[String] = Ident.findAllMatchIn(s).map(_.group(1).replace("``", "`")).toSeq

  /** Reads back a stored constraint (see `text`). */
  def parse(name: String, table: TableIdentifier, text: String): KeyConstraint = {
    val open = text.indexOf('(')
    val close = text.indexOf(')')
    if (open < 0 || close < open) throw invalid(
      s"Table property $Prefix$name of ${table.quotedString} is not a constraint: $text")
    val cols = idents(text.substring(open, close + 1))
    if (text.startsWith("PRIMARY KEY")) PrimaryKey(name, table, cols)
    else {
      val rest = text.substring(close + 1)
      val ref = rest.indexOf('(')
      val parts = idents(rest.substring(0, ref))
      val parent = parts match {
        case Seq(c, d, t) => TableIdentifier(t, Some(d), Some(c))
        case Seq(d, t) => TableIdentifier(t, Some(d))
        case Seq(t) => TableIdentifier(t)
        case _ => throw invalid(s"Bad parent table in $text")
      }
      ForeignKey(name, table, cols, parent, idents(rest.substring(ref)), rely = text.trim.endsWith(" RELY"))
    }
  }

  private def invalid(reason: String) = IvmErrors.constraintInvalid(reason)
}
