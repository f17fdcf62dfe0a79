package io.sparkivm.storage

import java.nio.file.attribute.PosixFilePermissions
import java.nio.file.{Files, Paths}
import java.util.EnumSet

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.permission.FsPermission
import org.apache.hadoop.fs.{CreateFlag, FileAlreadyExistsException, FileContext, Options, Path}
import org.scalatest.funsuite.AnyFunSuite

/** The local file system without shell processes behaves as Hadoop's own: permissions, link
 * status and the create-then-rename that Delta's log store commits with. */
class NioLocalFileSystemSuite extends AnyFunSuite {
  private def fileContext(): FileContext = {
    val conf = new Configuration()
    conf.set("fs.AbstractFileSystem.file.impl", classOf[NioLocalFs].getName)
    FileContext.getLocalFSFileContext(conf)
  }

  private def permissions(p: java.nio.file.Path): String =
    PosixFilePermissions.toString(Files.getPosixFilePermissions(p))

  test("the nine permission bits, and no set for bits java.nio cannot set") {
    Seq("rwxr-x---", "rw-r--r--", "---------", "rwxrwxrwx", "-w---x--x").foreach { s =>
      val bits = NioRawLocalFileSystem.posixPermissions(FsPermission.valueOf("-" + s))
      assert(PosixFilePermissions.toString(bits.get) == s)
    }
    assert(NioRawLocalFileSystem.posixPermissions(new FsPermission(Integer.parseInt("1777", 8).toShort)).isEmpty)
  }

  test("Delta's commit: create a temporary file, rename it where no file is, refused where one is") {
    val fc = fileContext()
    assert(fc.getDefaultFileSystem.isInstanceOf[NioLocalFs])
    val dir = Files.createTempDirectory("nio-local-fs")
    val tmp = new Path(dir.toUri.toString, ".00001.json.tmp")
    val out = fc.create(tmp, EnumSet.of(CreateFlag.CREATE),
      Options.CreateOpts.perms(
        new FsPermission(Integer.parseInt("640", 8).toShort)))
    out.write("{}".getBytes("UTF-8"))
    out.close()
    assert(permissions(Paths.get(tmp.toUri)) == "rw-r-----")
    val committed = new Path(dir.toUri.toString, "00001.json")
    fc.rename(tmp, committed, Options.Rename.NONE)
    assert(new String(Files.readAllBytes(Paths.get(committed.toUri)), "UTF-8") == "{}")
    assert(!fc.util.exists(tmp))

    // a second writer of the same version loses, as with Hadoop's own local file system
    val other = new Path(dir.toUri.toString, ".00001.json.other")
    fc.create(other, EnumSet.of(CreateFlag.CREATE)).close()
    intercept[FileAlreadyExistsException](fc.rename(other, committed, Options.Rename.NONE))

    fc.setPermission(committed, new FsPermission(Integer.parseInt("600", 8).toShort))
    assert(permissions(Paths.get(committed.toUri)) == "rw-------")
  }

  test("the FileSystem API: files created with permissions, link status") {
    val fs = new NioLocalFileSystem
    fs.initialize(java.net.URI.create("file:///"), new Configuration())
    val dir = Files.createTempDirectory("nio-local-fs")
    val p = new Path(dir.toUri.toString, "part-0.parquet")
    fs.create(p, new FsPermission(Integer.parseInt("640", 8).toShort), true, 4096, 1.toShort, 1L << 20, null).close()
    assert(permissions(Paths.get(p.toUri)) == "rw-r-----")
    assert(!fs.getFileLinkStatus(p).isSymlink && fs.exists(p))
    fs.close()
  }

  test("link status as Hadoop's own local file system gives it: files, links, missing paths") {
    val ours = fileContext()
    val hadoops = FileContext.getLocalFSFileContext(new Configuration())
    assert(!hadoops.getDefaultFileSystem.isInstanceOf[NioLocalFs])
    val dir = Files.createTempDirectory("nio-local-fs")
    val file = Files.write(dir.resolve("f"), Array[Byte](1, 2, 3))
    val link = Files.createSymbolicLink(dir.resolve("l"), file)
    for (p <- Seq(file, link, dir).map(p => new Path(p.toUri))) {
      val (a, b) = (ours.getFileLinkStatus(p), hadoops.getFileLinkStatus(p))
      assert((a.isSymlink, a.isDirectory, a.getLen, a.getPath) == (b.isSymlink, b.isDirectory, b.getLen, b.getPath), p)
    }
    val none = new Path(dir.resolve("none").toUri)
    intercept[java.io.FileNotFoundException](ours.getFileLinkStatus(none))
    intercept[java.io.FileNotFoundException](hadoops.getFileLinkStatus(none))
  }
}
