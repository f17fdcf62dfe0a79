// Formats the Scala sources by .scalafmt.conf (`make fmt`; `make lint` checks them).
addSbtPlugin("org.scalameta" % "sbt-scalafmt" % "2.5.5")
