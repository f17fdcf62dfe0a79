package io.sparkivm.planner

import java.util.Locale

import org.apache.spark.sql.catalyst.expressions.{Attribute, EqualTo, Expression}

/** A declared foreign key, as the planner sees it: columns of a table to a parent's primary key. */
case class ForeignKeyRef(name: String, columns: Seq[String], parent: String, parentColumns: Seq[String],
    rely: Boolean = false)

/** The keys declared on a table. */
case class TableKeys(primaryKey: Option[Seq[String]], foreignKeys: Seq[ForeignKeyRef])

object TableKeys {
  val Empty: TableKeys = TableKeys(None, Nil)
}

/**
 * An FK edge of a join block (Svingos et al. 2023, section 1.3): the view joins every column of foreign
 * key `fk` of unit `from` (fact side) with the matching primary-key column of unit `to`
 * (dimension side). `pairs` are the (from, to) attributes equated by the view.
 */
case class FkEdge(from: Int, to: Int, fk: String, pairs: Seq[(Attribute, Attribute)], rely: Boolean = false)

/** A rooted component (Definition 5.4): `order` starts at the root, each node after it has `parent`. */
case class Component(root: Int, order: Seq[Int], parentEdge: Map[Int, FkEdge]) {
  def nodes: Set[Int] = order.toSet
}

/** The FK graph of a join block and Algorithm 1 of Svingos et al. 2023 (section 3.5). */
case class FkGraph(nodes: Int, edges: Seq[FkEdge]) {

  def without(drop: FkEdge => Boolean): FkGraph = copy(edges = edges.filterNot(drop))

  /**
   * Algorithm 1: repeatedly take the largest rooted component (every node tried as root, the
   * component being what it reaches over edges between remaining nodes), until no node is
   * left. Each component lists its nodes in BFS order from the root, each with the edge it is
   * reached by, so that joining in this order joins along a PK-FK edge every time (Wang & Yi,
   * Theorem 11: no many-to-many intermediate). Ties go to the lower node (the first table).
   */
  def components: Seq[Component] = {
    var remaining = (0 until nodes).toSet
    val out = Seq.newBuilder[Component]
    while (remaining.nonEmpty) {
      // maxBy keeps the first maximum, and candidates are in node order.
      val best = remaining.toSeq.sorted.map(r => bfs(r, remaining)).maxBy(_.order.size)
      out += best
      remaining --= best.order
    }
    out.result()
  }

  private def bfs(root: Int, allowed: Set[Int]): Component = {
    val order = scala.collection.mutable.ArrayBuffer(root)
    var parents = Map.empty[Int, FkEdge]
    var i = 0
    while (i < order.size) {
      val x = order(i)
      edges.filter(e => e.from == x && allowed.contains(e.to) && !order.contains(e.to)).foreach { e =>
        if (!order.contains(e.to)) { order += e.to; parents += e.to -> e }
      }
      i += 1
    }
    Component(root, order.toSeq, parents)
  }
}

object FkGraph {

  /**
   * The edges of a block: unit x has a foreign key to the table unit y reads, y's table has that
   * primary key, and the block's conjuncts equate every FK column of x with its PK column of y
   * (plain `=`; composite keys need every pair). A join on other columns is no edge.
   */
  def of(block: JoinBlock, keys: SourceLeaf => TableKeys): FkGraph = {
    val leaves = block.units.indices.map(block.leafOf)
    val equalities: Seq[(Attribute, Attribute)] = block.conditions.collect {
      case EqualTo(a: Attribute, b: Attribute) => Seq(a -> b, b -> a)
    }.flatten
    def lower(s: String) = s.toLowerCase(Locale.ROOT)
    val edges = for {
      x <- block.units.indices
      (xLeaf, xCols) <- leaves(x).toSeq
      fk <- keys(xLeaf).foreignKeys
      y <- block.units.indices if y != x
      (yLeaf, yCols) <- leaves(y).toSeq
      if lower(yLeaf.name) == lower(fk.parent)
      pk <- keys(yLeaf).primaryKey.toSeq
      if pk.map(lower).toSet == fk.parentColumns.map(lower).toSet
      pairs = fk.columns.zip(fk.parentColumns).map { case (fc, pc) =>
        equalities.collectFirst {
          case (a, b)
              if xCols.get(a.exprId).exists(n => lower(n) == lower(fc)) &&
                yCols.get(b.exprId).exists(n => lower(n) == lower(pc)) => a -> b
        }
      }
      if pairs.forall(_.isDefined)
    } yield FkEdge(x, y, fk.name, pairs.flatten, fk.rely)
    FkGraph(block.units.size, edges.distinct)
  }

  /** The conjuncts of an edge, as the view wrote them. */
  def edgeConditions(e: FkEdge): Seq[Expression] = e.pairs.map { case (a, b) => EqualTo(a, b) }
}
