package io.sparkivm.catalog

import org.apache.spark.sql.catalyst.util.QuotingUtils.quoteIdentifier
import org.apache.spark.sql.types.DataType
import org.json4s._
import org.json4s.jackson.JsonMethods.{compact, parse, render}

/**
 * A column of CREATE MATERIALIZED VIEW's column list, as Spark's pipeline grammar writes one:
 * `name [type] [NOT NULL] [COMMENT 'text']`. A declared type is a contract: the query must give
 * exactly that type. NOT NULL is enforced by Delta on every write of the backing table.
 */
case class ViewColumn(name: String, dataType: Option[DataType] = None, notNull: Boolean = false,
    comment: Option[String] = None) {

  /** The column as a column list writes it, all it declares. */
  def sql: String =
    quoteIdentifier(name) + dataType.map(t => s" ${t.sql}").getOrElse("") + (if (notNull) " NOT NULL" else "") +
      commentSql

  /** ` COMMENT '...'`, or nothing. */
  def commentSql: String = comment.map(t => s" COMMENT ${ViewCatalog.sqlString(t)}").getOrElse("")
}

/**
 * How a view's backing table lies in storage, as the user declared it: Delta partitioning
 * (`PARTITIONED BY`) or liquid clustering (`CLUSTER BY`), by columns of the view.
 */
case class ViewStorage(partitionedBy: Seq[String] = Nil, clusteredBy: Seq[String] = Nil) {
  def isEmpty: Boolean = partitionedBy.isEmpty && clusteredBy.isEmpty
}

/** The JSON forms of [[ViewColumn]] lists and [[ViewStorage]] kept in table properties. */
object ViewColumns {
  val ColumnsProperty = "ivm.columns"
  val StorageProperty = "ivm.storage"

  /** The properties that record a column list (if one was given) and `storage` (if declared). */
  def properties(columns: Seq[ViewColumn], storage: ViewStorage): Map[String, String] =
    (if (columns.isEmpty) Map.empty[String, String]
     else Map(ColumnsProperty -> json(columns))) ++
      (if (storage.isEmpty) Map.empty[String, String] else Map(StorageProperty -> json(storage)))

  def columns(props: Map[String, String]): Seq[ViewColumn] =
    props.get(ColumnsProperty).toSeq.flatMap { json =>
      parse(json) match {
        case JArray(items) => items.collect { case o: JObject =>
            val fields = o.obj.toMap
            ViewColumn(
              fields.get("name").collect { case JString(s) => s }.getOrElse(""),
              fields.get("type").collect { case JString(s) => DataType.fromJson(s) },
              fields.get("notNull").contains(JBool(true)),
              fields.get("comment").collect { case JString(s) => s })
          }
        case _ => Nil
      }
    }

  def storage(props: Map[String, String]): ViewStorage =
    props.get(StorageProperty).map { json =>
      val fields = parse(json) match {
        case o: JObject => o.obj.toMap
        case _ => Map.empty[String, JValue]
      }
      def names(key: String) = fields.get(key).toSeq.flatMap {
        case JArray(items) => items.collect { case JString(s) => s }
        case _ => Nil
      }
      ViewStorage(names("partitionedBy"), names("clusteredBy"))
    }.getOrElse(ViewStorage())

  private def json(columns: Seq[ViewColumn]): String =
    compact(render(JArray(columns.map { c =>
      JObject(List("name" -> JString(c.name)) ++ c.dataType.map(t => "type" -> JString(t.json)) ++
        (if (c.notNull) List("notNull" -> JBool(true)) else Nil) ++ c.comment.map(s => "comment" -> JString(s)))
    }.toList)))

  private def json(storage: ViewStorage): String =
    compact(render(JObject(
          "partitionedBy" -> JArray(storage.partitionedBy.map(JString(_)).toList),
          "clusteredBy" -> JArray(storage.clusteredBy.map(JString(_)).toList))))
}
