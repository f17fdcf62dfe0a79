package io.sparkivm.state

/** What an arrangement holds; shown with it, and the first part of its [[StateId]]. */
sealed abstract class StateKind(val name: String, val description: String) {
  override def toString: String = name
}

object StateKind {

  /** A small table's rows at one version, on the driver. */
  case object TableRows extends StateKind("table rows", "a table's rows at one version")

  /** A table's rows that a view reads by key, partitioned by that key on the executors. */
  case object KeyedRows extends StateKind("keyed rows", "the columns a view reads of a table, by key")

  /** A view's backing rows (keys, counts, aggregate states and places), by the view's first key. */
  case object ViewRows extends StateKind("view rows", "a view's keys and aggregate states, by key")

  /** A table counted per key (Wang & Yi 2020's reference counts; semi and anti joins' matches). */
  case object KeyCounts extends StateKind("key counts", "a table's rows counted per key")

  /** A small result computed at fixed table versions (a global aggregate a refresh reads at Pre). */
  case object Results extends StateKind("results", "a small result at fixed table versions")

  /** A Delta table version's file list (with statistics), for planning reads without a job. */
  case object FileLists extends StateKind("file lists", "a table version's files and statistics")

  /** The view trees lookups by access pattern read (Zhang 2022). */
  case object LookupTrees extends StateKind("lookup trees", "the trees lookups by access pattern read")

  /** IVM^eps's relation occurrences and auxiliary views (Kara et al. 2020, section 4). */
  case object EpsilonState extends StateKind("eps state", "IVM^eps occurrences and auxiliary views")

  /** The heavy keys of an IVM^eps state table at one version. */
  case object HeavyKeys extends StateKind("heavy keys", "the heavy keys of an IVM^eps partition")

  val all: Seq[StateKind] =
    Seq(TableRows, KeyedRows, ViewRows, KeyCounts, Results, FileLists, LookupTrees, EpsilonState, HeavyKeys)
}

/** The name of one arrangement: at most one is held per id, at one stamp. */
final case class StateId(kind: StateKind, name: String)
