// Formats the Scala sources by .scalafmt.conf (`make fmt`; `make lint` checks them).
addSbtPlugin("org.scalameta" % "sbt-scalafmt" % "2.5.5")
addSbtPlugin("com.eed3si9n" % "sbt-assembly" % "2.3.1")
