package io.sparkivm

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Path, Paths}

import org.scalatest.funsuite.AnyFunSuite

/**
 * The layers of the main code as its imports draw them: no package uses another that uses it
 * back, directly or through others, and `docs/architecture.md`'s layer table names, for each
 * package, exactly the packages it uses.
 */
class PackageGraphSuite extends AnyFunSuite {
  import PackageGraphSuite._

  private lazy val graph = PackageGraph.fromSources(MainSources.files)

  test("no package uses itself through others") {
    val cycles = graph.cycles
    assert(cycles.isEmpty,
      "cycles between packages:\n" + cycles.map { c =>
        c.mkString(" <-> ") + "\n" + c.flatMap(p =>
          graph.uses(p).collect {
            case (q, files) if c.contains(q) => s"  $p -> $q: ${files.toSeq.sorted.mkString(", ")}"
          }).mkString("\n")
      }.mkString("\n"))
  }

  test("the entry point is used by nothing, errors use nothing, the pipeline knows no strategy") {
    assert(graph.packages.contains(Root) && graph.packages.contains("errors"))
    assert(graph.users(Root).isEmpty, s"the entry point is used by ${graph.users(Root)}")
    assert(graph.uses("errors").isEmpty, s"errors use ${graph.uses("errors").keys}")
    assert(graph.uses("conf").keySet.subsetOf(Set("errors", "org.apache.spark.sql.ivm")),
      s"settings use ${graph.uses("conf").keys}")
    // Strategies plug into the pipeline (MaintenanceStrategy, StrategyProvider), not the other way.
    Seq("epsilon", "access").foreach { s =>
      assert(!graph.uses("execution").contains(s), s"execution uses the strategy package $s")
      assert(!graph.uses("planner").contains(s), s"planner uses the strategy package $s")
    }
  }

  test("docs/architecture.md's layer table says what each package uses") {
    val documented = LayerTable.read(Paths.get("docs", "architecture.md"))
    val missing = graph.packages -- documented.keySet
    assert(missing.isEmpty, s"packages with no row in docs/architecture.md's layer table: $missing")
    val unknown = documented.keySet -- graph.packages
    assert(unknown.isEmpty, s"rows of docs/architecture.md's layer table for no package: $unknown")
    val wrong = graph.packages.toSeq.sorted.flatMap { p =>
      val actual = graph.uses(p).keySet
      if (documented(p) == actual) None
      else Some(s"$p: the table says ${show(documented(p))}; the code uses ${show(actual)}")
    }
    assert(wrong.isEmpty, "docs/architecture.md's layer table is out of date:\n" + wrong.mkString("\n"))
  }

  test("the graph sees imports and qualified names, not comments") {
    val g = PackageGraph.fromSources(Seq(
        "a.scala" -> "package io.sparkivm.a\nimport io.sparkivm.b.{X, Y}\n// io.sparkivm.c.Z\nclass A",
        "b.scala" -> "package io.sparkivm.b\n/* io.sparkivm.a */ object X { io.sparkivm.c.Z.f() }",
        "c.scala" -> "package io.sparkivm.c\nobject Z { def f(): Unit = io.sparkivm.a.A }"))
    assert(g.uses("a").keySet == Set("b"))
    assert(g.uses("b").keySet == Set("c"))
    assert(g.cycles == Seq(Seq("a", "b", "c")))
  }

  private def show(s: Set[String]): String = if (s.isEmpty) "nothing" else s.toSeq.sorted.mkString(", ")
}

object PackageGraphSuite {

  /** The entry point's package, `io.sparkivm` itself. */
  val Root = "io.sparkivm"

  /** Packages by short name: relative to `io.sparkivm` (`execution`), else in full. */
  case class PackageGraph(packages: Set[String], uses: Map[String, Map[String, Set[String]]]) {
    def users(p: String): Set[String] = packages.filter(q => uses(q).contains(p))

    /** Strongly connected components of more than one package (Tarjan), each sorted. */
    def cycles: Seq[Seq[String]] = {
      var counter = 0
      val index = scala.collection.mutable.Map[String, Int]()
      val low = scala.collection.mutable.Map[String, Int]()
      val stack = scala.collection.mutable.Stack[String]()
      val out = Seq.newBuilder[Seq[String]]
      def visit(v: String): Unit = {
        index(v) = counter; low(v) = counter; counter += 1
        stack.push(v)
        uses(v).keys.toSeq.sorted.foreach { w =>
          if (!index.contains(w)) { visit(w); low(v) = low(v) min low(w) }
          else if (stack.contains(w)) low(v) = low(v) min index(w)
        }
        if (low(v) == index(v)) {
          var component = List.empty[String]
          var w = ""
          while (w != v) { w = stack.pop(); component ::= w }
          if (component.size > 1) out += component.sorted
        }
      }
      packages.toSeq.sorted.foreach(p => if (!index.contains(p)) visit(p))
      out.result()
    }
  }

  object PackageGraph {
    private val PackageClause = """(?m)^\s*package\s+([\w.]+)""".r
    private val Reference = """\b((?:io\.sparkivm|org\.apache\.spark\.sql\.(?:delta\.)?ivm)(?:\.[a-z]\w*)*)""".r

    def short(p: String): String = if (p.startsWith(Root + ".")) p.stripPrefix(Root + ".") else p

    def fromSources(sources: Seq[(String, String)]): PackageGraph = {
      val code = sources.map { case (name, text) =>
        val stripped = text.replaceAll("(?s)/\\*.*?\\*/", "").replaceAll("//[^\n]*", "")
        val pkg = PackageClause.findFirstMatchIn(stripped).map(_.group(1)).getOrElse("")
        (name, pkg, stripped)
      }
      val full = code.map(_._2).toSet
      val edges = for {
        (name, pkg, text) <- code
        ref <- Reference.findAllMatchIn(text).map(_.group(1))
        target <- full.filter(p => ref == p || ref.startsWith(p + ".")).maxByOption(_.length)
        if target != pkg
      } yield (short(pkg), short(target), name)
      val packages = full.map(short)
      PackageGraph(packages,
        packages.map { p =>
          p -> edges.filter(_._1 == p).groupBy(_._2).map { case (t, es) => t -> es.map(_._3).toSet }
        }.toMap)
    }
  }

  /**
   * docs/architecture.md's layer table: rows whose package column starts with a package's short
   * name in backticks and whose last column lists the packages it uses (`a`, `b`) or "nothing".
   */
  object LayerTable {
    private val Name = "`([^`]+)`".r

    def read(path: Path): Map[String, Set[String]] = {
      val lines = new String(Files.readAllBytes(path), UTF_8).split("\n").toSeq
      val header = lines.indexWhere(l => l.startsWith("| layer |") && l.contains("| uses |"))
      require(header >= 0, s"$path has no layer table (a header starting '| layer |' with a 'uses' column)")
      lines.drop(header + 2).takeWhile(_.startsWith("|")).map { row =>
        val cells = row.split("\\|").map(_.trim).filter(_.nonEmpty)
        val pkg = Name.findFirstMatchIn(cells(1)).map(_.group(1).stripSuffix("/")).getOrElse(
          throw new IllegalArgumentException(s"no package in the row: $row"))
        pkg -> Name.findAllMatchIn(cells.last).map(_.group(1)).toSet
      }.toMap
    }
  }
}
