package io.sparkivm.parser

import org.apache.spark.sql.catalyst.expressions.Literal
import org.apache.spark.sql.catalyst.parser.{
  CatalystSqlParser, HybridParameterContext, NamedParameterContext, ParseException, PositionalParameterContext
}
import org.apache.spark.sql.execution.SparkSqlParser
import org.scalatest.funsuite.AnyFunSuite

class ParameterMarkersSuite extends AnyFunSuite {

  test("markers left unbound are found in expressions, subqueries and CTE definitions") {
    Seq(
      "SELECT :p",
      "SELECT a FROM t WHERE a > ?",
      "SELECT a FROM t WHERE a IN (SELECT b FROM u WHERE b = :p)",
      "WITH c AS (SELECT :p AS v) SELECT v FROM c",
      "INSERT INTO t SELECT :p",
      "SELECT a FROM t LIMIT :n").foreach { sql =>
      assert(ParameterMarkers.unbound(CatalystSqlParser.parsePlan(sql)), sql)
    }
    Seq("SELECT 1", "SELECT ':p', '?' FROM t WHERE a = 1", "SELECT a FROM t -- :p").foreach { sql =>
      assert(!ParameterMarkers.unbound(CatalystSqlParser.parsePlan(sql)), sql)
    }
  }

  test("values are substituted as Spark substitutes them, strings quoted") {
    val named = NamedParameterContext(Map("p" -> Literal(3), "s" -> Literal("it's")))
    val text = ParameterMarkers.substituted("SELECT a FROM t WHERE a > :p AND b = :s AND c = ':p'", named)
    assert(!ParameterMarkers.unbound(CatalystSqlParser.parsePlan(text)), text)
    assert(text.contains("> 3") && text.contains("':p'"), text)
    assert(ParameterMarkers.substituted("SELECT ?", PositionalParameterContext(Seq(Literal(7)))) == "SELECT 7")
    assert(ParameterMarkers.hasValues(named) && !ParameterMarkers.hasValues(NamedParameterContext(Map.empty)))
  }

  test("the head of spark-ivm's statement ends after its first AS outside parentheses") {
    val create = "CREATE MATERIALIZED VIEW IDENTIFIER(:v) (a COMMENT 'as', b) COMMENT 'AS' AS SELECT 1 AS a, 2 AS b"
    assert(create.substring(ParameterMarkers.headEnd(create)) == " SELECT 1 AS a, 2 AS b")
    assert(ParameterMarkers.headEnd("REFRESH MATERIALIZED VIEW v") == "REFRESH MATERIALIZED VIEW v".length)
  }

  test("markers of the head are replaced by their values' SQL; positional ones are used up") {
    val named = NamedParameterContext(Map("v" -> Literal("db.mv"), "x" -> Literal(1)))
    val (head, rest) = ParameterMarkers.substitutedHead("REFRESH MATERIALIZED VIEW IDENTIFIER(:v) -- :x", named)
    assert(head == "REFRESH MATERIALIZED VIEW IDENTIFIER('db.mv') -- :x" && rest == named)
    val positional = PositionalParameterContext(Seq(Literal("mv"), Literal(2)))
    val (create, left) = ParameterMarkers.substitutedHead("CREATE MATERIALIZED VIEW IDENTIFIER(?) AS", positional)
    assert(create == "CREATE MATERIALIZED VIEW IDENTIFIER('mv') AS")
    assert(left == PositionalParameterContext(Seq(Literal(2))))
    // EXECUTE IMMEDIATE's values, named or positional.
    val hybrid = HybridParameterContext(Seq(Literal("mv"), Literal(3)), Seq("v", "x"))
    assert(ParameterMarkers.substitutedHead("REFRESH MATERIALIZED VIEW IDENTIFIER(:v)", hybrid)._1 ==
      "REFRESH MATERIALIZED VIEW IDENTIFIER('mv')")
    val byPosition = HybridParameterContext(Seq(Literal("mv")), Seq(""))
    assert(ParameterMarkers.substitutedHead("DROP MATERIALIZED VIEW IDENTIFIER(?)", byPosition)._1 ==
      "DROP MATERIALIZED VIEW IDENTIFIER('mv')")
    // A colon that is not a marker (`: v`, in a string) stays.
    val text = "ALTER MATERIALIZED VIEW v SET TBLPROPERTIES ('k' = ':v')"
    assert(ParameterMarkers.substitutedHead(text, named)._1 == text)
  }

  test("Spark's refusal of an unbound marker in CREATE VIEW is recognised") {
    val e = intercept[ParseException](new SparkSqlParser().parsePlan("CREATE VIEW v AS SELECT :p"))
    assert(ParameterMarkers.refused(e), e.getMessage)
    val other = intercept[ParseException](CatalystSqlParser.parsePlan("SELEC 1"))
    assert(!ParameterMarkers.refused(other))
  }
}
