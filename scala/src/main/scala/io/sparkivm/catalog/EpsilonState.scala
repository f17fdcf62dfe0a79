package io.sparkivm.catalog

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.TableIdentifier
import org.json4s._

/**
 * The IVM^eps state of a triangle view as of one refresh (Kara et al. 2020, section 3,
 * Definition 13: Z = (eps, N, P, V)). The scalars travel in the refresh record, so they commit
 * with the view's rows; the partitions and auxiliary views are Delta tables (see [[tables]])
 * read at the versions recorded here. A refresh killed after writing them but before its view
 * commit leaves newer versions that the next refresh restores away.
 *
 * @param eps        the eps the state was built with
 * @param n          the threshold base N, with floor(N/4) <= size < N
 * @param size       |D|: rows of the three relation occurrences (after their filters)
 * @param heavy      heavy keys per occurrence (R, S, T)
 * @param auxRows    rows stored per auxiliary view (V_RS, V_ST, V_TR), appended deltas included
 * @param auxCompact rows of each auxiliary view when it was last rewritten (built or compacted)
 * @param versions   Delta versions of the state tables, in the order of [[tables]]
 */
case class EpsilonState(eps: Double, n: Long, size: Long, heavy: Seq[Long], auxRows: Seq[Long],
    auxCompact: Seq[Long], versions: Seq[Long]) {

  /** The heavy/light threshold N^eps. */
  def threshold: Double = EpsilonState.threshold(n, eps)

  /** At eps = 0 every key is heavy (AffectedPart sends every update to the heavy part). */
  def allHeavy: Boolean = eps == 0.0

  def toJson: JValue = JObject(
    "eps" -> JDouble(eps), "n" -> JLong(n), "size" -> JLong(size),
    "heavy" -> JArray(heavy.map(JLong(_)).toList), "aux" -> JArray(auxRows.map(JLong(_)).toList),
    "compact" -> JArray(auxCompact.map(JLong(_)).toList),
    "versions" -> JArray(versions.map(JLong(_)).toList))
}

object EpsilonState {

  /** The table property holding a view's eps. */
  val Property = "ivm.epsilon"

  /** The paper's Pareto-optimal point for the triangle queries (Corollary 6). */
  val Default = 0.5
  val Views: Seq[String] = Seq("V_RS", "V_ST", "V_TR")

  /** A valid eps: a number in [0, 1]. */
  def parse(value: String): Option[Double] =
    scala.util.Try(value.trim.toDouble).toOption.filter(e => e >= 0.0 && e <= 1.0)

  def threshold(n: Long, eps: Double): Double = math.pow(n.toDouble, eps)

  /** The state tables of a view: heavy keys of R, S, T, then V_RS, V_ST, V_TR. */
  def tables(backing: TableIdentifier): Seq[TableIdentifier] =
    (0 until 3).map(i => backing.copy(table = s"${backing.table}__heavy$i")) ++
      (0 until 3).map(i => backing.copy(table = s"${backing.table}__aux$i"))

  def fromJson(v: JValue): Option[EpsilonState] = v match {
    case o: JObject =>
      def num(j: JValue): Double = j match {
        case JDouble(d) => d
        case JInt(i) => i.toDouble
        case JLong(l) => l.toDouble
        case JDecimal(d) => d.toDouble
        case other => throw IvmErrors.internal(s"IVM^eps state holds $other where a number belongs")
      }
      def longs(key: String): Seq[Long] = (o \ key) match {
        case JArray(xs) => xs.map(x => num(x).toLong)
        case _ => Nil
      }
      Some(EpsilonState(num(o \ "eps"), num(o \ "n").toLong, num(o \ "size").toLong, longs("heavy"),
          longs("aux"), longs("compact"), longs("versions")))
    case _ => None
  }
}
