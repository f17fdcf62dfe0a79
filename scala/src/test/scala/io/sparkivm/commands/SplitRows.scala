package io.sparkivm.commands

import org.apache.spark.sql.SparkSession

/** Runs a helper split with temporary views standing in for its helpers (the split's SQL, with
 * their names unqualified): the rows of the query, and of the maintained query over the helpers. */
object SplitRows {
  def of(spark: SparkSession, split: HelperViews.Split, query: String): (Seq[String], Seq[String]) = {
    def local(sql: String) = split.helpers.foldLeft(sql)((s, h) => s.replace(h.name.quotedString, s"`${h.name.table}`"))
    split.helpers.foreach(h => spark.sql(s"CREATE OR REPLACE TEMPORARY VIEW `${h.name.table}` AS ${local(h.query)}"))
    def rows(sql: String) = spark.sql(sql).collect().map(_.toString).sorted.toSeq
    (rows(query), rows(local(split.maintainedQuery)))
  }
}
