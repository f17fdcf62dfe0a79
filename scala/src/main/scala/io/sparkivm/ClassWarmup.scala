package io.sparkivm

import java.io.{BufferedReader, InputStreamReader}
import java.nio.charset.StandardCharsets
import java.util.concurrent.atomic.AtomicBoolean

import scala.util.control.NonFatal

import org.apache.spark.internal.Logging

/**
 * Loads the classes a refresh uses on a background thread, once per JVM, from the list in
 * `io/sparkivm/warmup-classes.txt` (made by `benchmarks/warmup_classes.py` from a refresh in a
 * new JVM). A scheduled job refreshes once per application, and its refresh otherwise loads
 * about 4,000 classes one by one as it first needs them: 29% of a cold refresh's samples in a
 * wall-clock profile. Loading them while the application starts (its session, its metastore client)
 * uses a core that is idle then.
 *
 * Classes are loaded, not initialized (`Class.forName(name, false, loader)`): no static
 * initializer runs on this thread, so it cannot deadlock with the application's threads or run
 * code before the application is ready for it. A name that no longer exists is skipped.
 */
object ClassWarmup extends Logging {
  private val Resource = "io/sparkivm/warmup-classes.txt"
  private val started = new AtomicBoolean(false)

  /** Starts the warm-up unless it has started in this JVM; returns its thread if it started it. */
  def start(loader: ClassLoader): Option[Thread] =
    if (!started.compareAndSet(false, true)) None
    else {
      val thread = new Thread(() => run(loader), "spark-ivm-warmup")
      thread.setDaemon(true)
      thread.setPriority(Thread.MIN_PRIORITY)
      thread.start()
      Some(thread)
    }

  private def run(loader: ClassLoader): Unit =
    try load(loader, listed(loader))
    catch { case NonFatal(e) => logDebug("spark-ivm: class warm-up stopped", e) }

  /** The class names of the warm-up list `loader` sees (none if it has no list). */
  def listed(loader: ClassLoader): Seq[String] =
    Option(loader.getResourceAsStream(Resource)).map { stream =>
      val lines = new BufferedReader(new InputStreamReader(stream, StandardCharsets.UTF_8))
      try Iterator.continually(lines.readLine()).takeWhile(_ != null).filter(l => l.nonEmpty && !l.startsWith("#"))
          .toVector
      finally lines.close()
    }.getOrElse(Nil)

  /** Loads (does not initialize) each named class that exists; returns how many did. */
  def load(loader: ClassLoader, names: Seq[String]): Int = names.count { name =>
    try {
      Class.forName(name, false, loader)
      true
    } catch { case _: ClassNotFoundException | _: LinkageError => false }
  }
}
