package io.sparkivm.parser

import org.scalatest.funsuite.AnyFunSuite

class ScriptStatementsSuite extends AnyFunSuite {

  test("statements that are not scripts, or scripts without spark-ivm's statements, are left") {
    Seq(
      "SELECT 1",
      "REFRESH MATERIALIZED VIEW v",
      "BEGIN SELECT 1; END",
      "BEGIN SELECT 'REFRESH MATERIALIZED VIEW v'; END",
      "BEGIN DECLARE materialized INT; END",
      "BEGIN SELECT `refresh` FROM t; END",
      "BEGIN SELECT 'unclosed; END").foreach { sql =>
      assert(ScriptStatements.rewritten(sql).isEmpty, sql)
    }
  }

  test("each of spark-ivm's statements becomes EXECUTE IMMEDIATE of its text, wherever it starts") {
    val sql =
      """lbl: BEGIN
        |  INSERT INTO t VALUES (1);
        |  REFRESH MATERIALIZED VIEW v;
        |  IF (SELECT count(*) FROM t) > 0 THEN
        |    CREATE MATERIALIZED VIEW w AS
        |      SELECT CASE WHEN a > 0 THEN 'it''s' ELSE "a\\b;" END AS c, (SELECT max(a) FROM t) AS m FROM t;
        |  ELSE DROP MATERIALIZED VIEW IF EXISTS w;
        |  END IF;
        |  WHILE false DO SHOW MATERIALIZED VIEWS; END WHILE;
        |END lbl""".stripMargin
    val rewritten = ScriptStatements.rewritten(sql).getOrElse(fail("not rewritten"))
    Seq("EXECUTE IMMEDIATE 'REFRESH MATERIALIZED VIEW v';",
      "ELSE EXECUTE IMMEDIATE 'DROP MATERIALIZED VIEW IF EXISTS w';",
      "DO EXECUTE IMMEDIATE 'SHOW MATERIALIZED VIEWS';", "THEN\n    EXECUTE IMMEDIATE 'CREATE MATERIALIZED VIEW w AS")
      .foreach(s => assert(rewritten.contains(s), rewritten))
    assert(rewritten.contains("INSERT INTO t VALUES (1);"))
    // Each EXECUTE IMMEDIATE's string is the statement's own text (the Python tests run scripts).
    val create =
      """CREATE MATERIALIZED VIEW w AS
                   |      SELECT CASE WHEN a > 0 THEN 'it''s' ELSE "a\\b;" END AS c, (SELECT max(a) FROM t) AS m FROM t"""
        .stripMargin
    val literal = rewritten.substring(rewritten.indexOf("EXECUTE IMMEDIATE 'CREATE") + "EXECUTE IMMEDIATE ".length)
    val (token, _) = Tokenizer.next(literal, 0)
    assert(token == StringLit(create, 0))
  }
}
