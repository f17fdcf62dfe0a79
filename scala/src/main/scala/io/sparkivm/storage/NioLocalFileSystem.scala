package io.sparkivm.storage

import java.net.URI
import java.nio.file.attribute.{PosixFilePermission, PosixFilePermissions}
import java.nio.file.{FileSystems, Files}

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.local.LocalConfigKeys
import org.apache.hadoop.fs.permission.FsPermission
import org.apache.hadoop.fs.{
  ChecksumFs, DelegateToFileSystem, FileStatus, FsServerDefaults, LocalFileSystem, Path, RawLocalFileSystem
}

/**
 * Hadoop's local file system, with its two per-file shell commands done by `java.nio`.
 *
 * Without Hadoop's native library (which no Maven artifact ships), `RawLocalFileSystem` starts
 * a process for each `chmod` it applies to a file it creates through `FileContext` and for
 * each `readlink` of a path whose link status it is asked for. Every Delta commit on a local
 * path goes through both (`HDFSLogStore` writes a temporary file and renames it over
 * `FileContext`): about a dozen processes, some 40 ms, per commit, and a refresh commits
 * several times (the backing table, state tables). `java.nio` does the same in the JVM.
 * Everything else is Hadoop's own code. `spark_ivm.session_defaults` installs [[NioLocalFs]] for
 * `file:` paths on local masters (`fs.AbstractFileSystem.file.impl`). [[NioLocalFileSystem]] is
 * the same for `fs.file.impl`, which `spark-submit` resolves before it adds the spark-ivm jar to
 * its class path: only for a JVM started with the jar on its own class path.
 */
class NioRawLocalFileSystem extends RawLocalFileSystem {

  /** As Hadoop's `chmod` (it follows links, as this does), without the process. A sticky or
   * set-id bit, or a file system without POSIX permissions, goes to Hadoop's own path. */
  override def setPermission(p: Path, permission: FsPermission): Unit =
    NioRawLocalFileSystem.posixPermissions(permission) match {
      case Some(bits) if NioRawLocalFileSystem.Posix => Files.setPosixFilePermissions(pathToFile(p).toPath, bits)
      case _ => super.setPermission(p, permission)
    }

  /** A path that is not a symbolic link has its own status as its link status; Hadoop asks
   * `readlink` (a process) to find that out. Links go to Hadoop's own path. */
  override def getFileLinkStatus(f: Path): FileStatus = {
    if (Files.isSymbolicLink(pathToFile(f).toPath)) super.getFileLinkStatus(f)
    else getFileStatus(f)
  }
}

object NioRawLocalFileSystem {

  /** Whether the JVM's file system has POSIX permissions (Linux and macOS do, Windows not). */
  private val Posix = FileSystems.getDefault.supportedFileAttributeViews.contains("posix")

  /** The nine rwx bits of `permission`, or None if it has a bit `java.nio` cannot set (sticky,
   * set-id). */
  def posixPermissions(permission: FsPermission): Option[java.util.Set[PosixFilePermission]] =
    if ((permission.toShort & ~0x1ff) != 0) None
    else Some(PosixFilePermissions.fromString(
        permission.getUserAction.SYMBOL + permission.getGroupAction.SYMBOL + permission.getOtherAction.SYMBOL))
}

/** `fs.file.impl`: Hadoop's checksummed local file system over [[NioRawLocalFileSystem]]. */
class NioLocalFileSystem extends LocalFileSystem(new NioRawLocalFileSystem)

/** `fs.AbstractFileSystem.file.impl` (what `FileContext`, and so Delta's log store, uses):
 * Hadoop's `LocalFs` over [[NioRawLocalFileSystem]]. */
class NioLocalFs(uri: URI, conf: Configuration) extends ChecksumFs(new NioRawLocalFs(uri, conf))

/** Hadoop's `RawLocalFs` over [[NioRawLocalFileSystem]]. */
class NioRawLocalFs(uri: URI, conf: Configuration)
    extends DelegateToFileSystem(uri, new NioRawLocalFileSystem, conf, "file", false) {
  override def getUriDefaultPort: Int = -1
  override def getServerDefaults(f: Path): FsServerDefaults = LocalConfigKeys.getServerDefaults()
  @deprecated("deprecated in Hadoop's AbstractFileSystem", "") override def getServerDefaults: FsServerDefaults =
    LocalConfigKeys.getServerDefaults()
  override def isValidName(src: String): Boolean = true
}
