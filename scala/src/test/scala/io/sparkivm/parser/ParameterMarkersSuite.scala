package io.sparkivm.parser

import org.apache.spark.sql.catalyst.expressions.Literal
import org.apache.spark.sql.catalyst.parser.{
  CatalystSqlParser, NamedParameterContext, ParseException, PositionalParameterContext
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

  test("Spark's refusal of an unbound marker in CREATE VIEW is recognised") {
    val e = intercept[ParseException](new SparkSqlParser().parsePlan("CREATE VIEW v AS SELECT :p"))
    assert(ParameterMarkers.refused(e), e.getMessage)
    val other = intercept[ParseException](CatalystSqlParser.parsePlan("SELEC 1"))
    assert(!ParameterMarkers.refused(other))
  }
}
