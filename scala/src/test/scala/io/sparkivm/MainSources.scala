package io.sparkivm

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Paths}

import scala.jdk.CollectionConverters._

/** The main code's Scala files, for the suites that check the code as text (layers, errors). */
object MainSources {

  /** (path from the repository root, text) of every Scala file under scala/src/main/scala. */
  lazy val files: Seq[(String, String)] = {
    val walk = Files.walk(Paths.get("scala", "src", "main", "scala"))
    try walk.iterator.asScala.filter(_.toString.endsWith(".scala")).toSeq.sortBy(_.toString)
        .map(f => f.toString -> new String(Files.readAllBytes(f), UTF_8))
    finally walk.close()
  }
}
