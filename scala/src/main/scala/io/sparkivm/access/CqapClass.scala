package io.sparkivm.access

/** Where a CQAP falls in Zhang 2022's classes, per component of its fracture. */
sealed abstract class CqapClass(val name: String, val rank: Int)
object CqapClass {

  /** Def. 3.7: constant update time and delay after linear preprocessing (Thm. 3.11). */
  case object Cqap0 extends CqapClass("CQAP0", 0)

  /** Def. 3.8: delta = 1; at eps = 1/2, update and delay O(N^1/2), weakly Pareto-optimal (Cor. 5.33). */
  case object Cqap1 extends CqapClass("CQAP1", 1)

  /** A hierarchical fracture outside CQAP0 and CQAP1: chapter 5's trade-off with its own delta. */
  case object Hierarchical extends CqapClass("hierarchical", 2)

  /** A triangle component (chapter 4's triangle CQAPs, maintained with IVM^eps). */
  case object Triangle extends CqapClass("triangle", 3)

  /** Any other non-hierarchical component: the general view trees of chapter 4 (Thm. 3.4). */
  case object General extends CqapClass("not hierarchical", 4)
}

/** One component of the fracture, classified. */
case class ComponentAnalysis(query: Cqap, cls: CqapClass, widths: Option[(Int, Int)],
    canonicalOrder: Seq[VoTree], accessTopOrder: Seq[VoTree]) {
  def hierarchical: Boolean = query.hierarchical
}

/** A CQAP's fracture, each component's class, widths and orders, and the class of the whole. */
case class CqapAnalysis(query: Cqap, components: Seq[ComponentAnalysis]) {

  /** The components are evaluated independently: the query is as hard as its hardest one. */
  def cls: CqapClass = components.map(_.cls).maxBy(_.rank)

  /** (w, delta) of the query: the largest over components, if all are hierarchical. */
  def widths: Option[(Int, Int)] =
    if (components.exists(_.widths.isEmpty)) None
    else Some((components.map(_.widths.get._1).max, components.map(_.widths.get._2).max))

  /** What EXPLAIN prints. */
  def describe: Seq[String] = {
    val header = Seq(s"query: $query", s"class: ${cls.name}") ++ widths.map { case (w, d) =>
      s"widths: w = $w, delta = $d (view trees of an access-top order: O(N^$w) preprocessing, O(N^$d) update, " +
        "O(1) delay; Zhang 2022, Thm. 3.4)"
    } ++ (cls match {
      case CqapClass.Cqap0 => Seq("guarantee: O(N) preprocessing, O(1) update time and enumeration delay " +
          "(Zhang 2022, Thm. 3.11)")
      case CqapClass.Cqap1 | CqapClass.Hierarchical => Seq(
          "guarantee: with eps in [0, 1], O(N^(1+(w-1)eps)) preprocessing, O(N^(delta eps)) amortized update, " +
            "O(N^(1-eps)) delay (Zhang 2022, Thm. 3.5); outside CQAP0 no algorithm has both update and delay " +
            "below N^(1/2) (Thm. 3.11, under the OMv conjecture)")
      case _ => Seq("guarantee: none of the hierarchical bounds (a cyclic component); O(N^w) preprocessing, " +
          "O(N^delta) update, O(1) delay with the view trees of Zhang 2022 chapter 4")
    })
    val heavyLight = cls match {
      case CqapClass.Cqap1 | CqapClass.Hierarchical =>
        ("heavy/light view trees (Zhang 2022, section 5.3: Omega over each component's canonical order; a lookup " +
          "merges their answers; eps (ivm.epsilon) sets the threshold M^eps between the parts):") +:
          HeavyLightTrees.describe(query).map("  " + _)
      case _ => Nil
    }
    header ++ heavyLight ++ components.zipWithIndex.flatMap { case (c, i) =>
      val flags = Seq(
        s"hierarchical ${yes(c.query.hierarchical)}",
        s"free-dominant ${yes(c.query.freeDominant)}${if (c.query.almostFreeDominant) " (almost)" else ""}",
        s"input-dominant ${yes(c.query.inputDominant)}${if (c.query.almostInputDominant) " (almost)" else ""}")
      Seq(s"component ${i + 1}: ${c.query}", s"  ${c.cls.name}: ${flags.mkString(", ")}") ++
        c.widths.map { case (w, d) => s"  w = $w, delta = $d" } ++
        (if (c.accessTopOrder.isEmpty) Nil
         else ("  access-top variable order:" +: VariableOrder.render(c.accessTopOrder, "    ")) ++
           ("  view tree:" +: VariableOrder.viewTree(c.accessTopOrder).map(v => "    " + "  " * v.depth + v.name)))
    }
  }

  private def yes(b: Boolean) = if (b) "yes" else "no"
}

object CqapAnalysis {
  def of(q: Cqap): CqapAnalysis = CqapAnalysis(q, q.fracture.map(component))

  private def component(c: Cqap): ComponentAnalysis =
    if (c.hierarchical) {
      val cls =
        if (c.freeDominant && c.inputDominant) CqapClass.Cqap0
        else if ((c.freeDominant || c.almostFreeDominant) && (c.inputDominant || c.almostInputDominant)) CqapClass.Cqap1
        else CqapClass.Hierarchical
      val canonical = VariableOrder.canonical(c)
      ComponentAnalysis(c, cls, Some(VariableOrder.widths(c)), canonical,
        canonical.flatMap(VariableOrder.accessTop(_, c)))
    } else {
      // A chain over the variables: access-top for any query (the general view trees of chapter 4).
      ComponentAnalysis(c, if (isTriangle(c)) CqapClass.Triangle else CqapClass.General, None, Nil,
        VariableOrder.chain(c))
    }

  /** Three binary atoms over three variables, pairwise sharing one: R(A,B), S(B,C), T(C,A). */
  private def isTriangle(c: Cqap): Boolean =
    c.atoms.size == 3 && c.vars.size == 3 && c.atoms.forall(_.vars.size == 2) && c.atoms.map(_.vars).distinct.size == 3
}
