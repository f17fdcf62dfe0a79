// spark-ivm: the Catalyst extension. Spark and Delta are `provided`: at run time they come
// from the pyspark wheel and from the Delta package that `configure_spark_with_ivm` adds.
// Their versions are pinned once, in pyproject.toml, and read from there.
import scala.io.Source

lazy val pins: Map[String, String] = {
  val pin = """"([a-z-]+)==([0-9.]+)"""".r
  val src = Source.fromFile("pyproject.toml")
  try pin.findAllMatchIn(src.mkString).map(m => m.group(1) -> m.group(2)).toMap
  finally src.close()
}
lazy val sparkVersion = pins("pyspark")
lazy val deltaVersion = pins("delta-spark")
lazy val sparkMajorMinor = sparkVersion.split('.').take(2).mkString(".")

// Libraries the extension needs at run time besides Spark and Delta, as Maven coordinates. The
// jar lists them in `spark-ivm-packages.txt`, from which `configure_spark_with_ivm` adds them to
// `spark.jars.packages` (their SLF4J is Spark's own, so it is excluded).
lazy val runtimePackages = Seq("com.cronutils:cron-utils:9.2.1")
lazy val runtimeExcludes = Seq("org.slf4j:slf4j-api")

ThisBuild / organization := "io.sparkivm"
ThisBuild / scalaVersion := "2.13.18"
ThisBuild / version := "0.1.0"

lazy val root = (project in file("."))
  .settings(
    name := "spark-ivm",
    Compile / scalaSource := baseDirectory.value / "scala" / "src" / "main",
    Test / scalaSource := baseDirectory.value / "scala" / "src" / "test",
    Test / resourceDirectory := baseDirectory.value / "scala" / "src" / "test" / "resources",
    Compile / resourceDirectory := baseDirectory.value / "scala" / "resources",
    libraryDependencies ++= Seq(
      "org.apache.spark" %% "spark-sql" % sparkVersion % Provided,
      "io.delta" % s"delta-spark_${sparkMajorMinor}_2.13" % deltaVersion % Provided,
      "org.scalatest" %% "scalatest" % "3.2.19" % Test
    ) ++ runtimePackages.map { coords =>
      val Array(group, artifact, rev) = coords.split(':')
      runtimeExcludes.foldLeft(group % artifact % rev) { (m, ex) =>
        val Array(g, a) = ex.split(':'); m.exclude(g, a)
      }
    },
    Compile / resourceGenerators += Def.task {
      val file = (Compile / resourceManaged).value / "spark-ivm-packages.txt"
      IO.write(file,
        (runtimePackages.map("package " + _) ++ runtimeExcludes.map("exclude " + _))
          .mkString("", "\n", "\n"))
      Seq(file)
    }.taskValue,
    scalacOptions ++= Seq("-deprecation", "-feature", "-unchecked", "-release", "17"),
    Test / fork := true,
    Test / javaOptions ++= Seq(
      "-Xmx2g",
      "--add-opens=java.base/java.lang=ALL-UNNAMED",
      "--add-opens=java.base/java.nio=ALL-UNNAMED",
      "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
      "--add-opens=java.base/java.util=ALL-UNNAMED",
      "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
      "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED",
      "-Dspark.ivm.testing=true",
      // C2 only for methods several times hotter than by default: the suites run much of Spark briefly,
      // beside the Python suite (tests/ivm_testing.py measures the same setting there).
      "-XX:Tier4InvocationThreshold=40000", "-XX:Tier4MinInvocationThreshold=6000",
      "-XX:Tier4CompileThreshold=45000", "-XX:Tier4BackEdgeThreshold=120000"
    ),
    Test / parallelExecution := false,
    // Each test's duration in the log: the suite shares the machine's cores with the Python one.
    Test / testOptions += Tests.Argument(TestFrameworks.ScalaTest, "-oD")
  )
