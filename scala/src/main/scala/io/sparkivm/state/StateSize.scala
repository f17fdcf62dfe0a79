package io.sparkivm.state

import org.apache.spark.util.SizeEstimator

/**
 * Bytes of state held on the driver, estimated by Spark's own `SizeEstimator` on a sample: a
 * full walk of every row of a table held whole would cost a refresh more than it saves.
 */
object StateSize {
  private val Sample = 32

  /** A reference and its slot in the collection that holds it. */
  private val SlotBytes = 16L

  /**
   * Rows kept on executors take about this many times their bytes in a table's files
   * (decompressed and decoded, as rows and hash maps): their size before they are read.
   */
  val ExecutorBytesPerFileByte = 4L

  /** The bytes of `items` and their collection: a sample's average size times their number. */
  def of(items: Iterable[_]): Long = {
    val n = items.size
    if (n == 0) 0L
    else {
      val step = math.max(1, n / Sample)
      val sample = items.iterator.zipWithIndex.collect { case (x, i) if i % step == 0 => x }.take(Sample).toSeq
      val each = sample.map(x => if (x == null) 0L else SizeEstimator.estimate(x.asInstanceOf[AnyRef])).sum /
        sample.size
      n * (each + SlotBytes)
    }
  }
}
