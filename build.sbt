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

// Libraries the extension needs at run time besides Spark and Delta are bundled into its jar,
// renamed under io.sparkivm.shaded (Spark's own way with its dependencies), so that the jar alone
// with Delta is a working extension: `--jars spark-ivm.jar --packages delta-spark` included.
// Their SLF4J is Spark's own, so it stays out.
lazy val bundled = Seq("com.cronutils" % "cron-utils" % "9.2.1" exclude ("org.slf4j", "slf4j-api"))
// Maven coordinates the jar needs besides Spark and Delta (none while everything is bundled) and
// exclusions from what Delta's package brings (SLF4J: Spark's own), listed in the jar's
// `spark-ivm-packages.txt` for `configure_spark_with_ivm`.
lazy val runtimePackages = Seq.empty[String]
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
    ) ++ bundled,
    assembly / assemblyJarName := s"spark-ivm_2.13-${version.value}.jar",
    assembly / assemblyOption ~= (_.withIncludeScala(false)),
    assembly / assemblyShadeRules := Seq(
      ShadeRule.rename("com.cronutils.**" -> "io.sparkivm.shaded.cronutils.@1").inAll),
    assembly / assemblyMergeStrategy := {
      case PathList("META-INF", "services", _*) => MergeStrategy.concat
      case PathList("META-INF", _*) => MergeStrategy.discard
      case PathList("module-info.class") => MergeStrategy.discard
      case other => (assembly / assemblyMergeStrategy).value(other)
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
