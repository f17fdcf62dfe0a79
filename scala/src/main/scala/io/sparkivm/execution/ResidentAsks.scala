package io.sparkivm.execution

import io.sparkivm.epsilon.ResidentState

/**
 * Which [[ResidentState]] entries of one kind refreshes asked for, least recently asked first:
 * an entry is made the second time a refresh in the application asks for it (an application
 * that refreshes once, as a scheduled job does, never pays for making it), and past
 * `maxEntries` the least recently asked is dropped.
 */
final class ResidentAsks(maxEntries: Int) {
  private val recent = new java.util.LinkedHashMap[String, String](16, 0.75f, true)

  /**
   * Marks `name` as asked for now by `refresh` (a refresh may ask more than once), dropping the
   * least recently asked entry past `maxEntries`; true if an earlier refresh asked for it and
   * it was not dropped since.
   */
  def touch(name: String, refresh: String): Boolean = recent.synchronized {
    val before = Option(recent.put(name, refresh)).exists(_ != refresh)
    if (recent.size > maxEntries) {
      val eldest = recent.keySet.iterator.next()
      recent.remove(eldest)
      ResidentState.remove(eldest)
    }
    before
  }
}
