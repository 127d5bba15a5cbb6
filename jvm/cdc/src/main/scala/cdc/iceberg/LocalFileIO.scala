package cdc.iceberg

import java.io.{IOException, OutputStream, UncheckedIOException}
import java.net.URI
import java.nio.file.{Files, NoSuchFileException, Path, Paths}
import java.nio.file.attribute.PosixFilePermissions
import java.util.{Collections, Map => JMap}

import scala.jdk.CollectionConverters._
import scala.util.Using

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{RawLocalFileSystem, Path => HadoopPath}
import org.apache.hadoop.fs.permission.FsPermission
import org.apache.iceberg.hadoop.HadoopOutputFile
import org.apache.iceberg.io.{BulkDeletionFailureException, DelegateFileIO, FileInfo, InputFile, OutputFile,
  SeekableInputStream}

/** Iceberg's files on this machine's disk (`file:` locations and plain paths), through Java's file API.
 *
 *  Why: Iceberg sends a scan's or a write's table to its tasks with the table's FileIO inside, and Hadoop's
 *  FileIO carries a copy of the whole Hadoop configuration (32 KiB serialised, once per scan); a local file needs
 *  no configuration, so this one carries nothing. It writes no checksum file beside each file, as Hadoop's local
 *  file system does; it removes one a file written by Hadoop had when it removes or replaces the file, and never
 *  lists one.
 *
 *  Files are written through Hadoop's raw local file system ([[LocalDisk]]) with a configuration of no default
 *  resources, held once per JVM: Iceberg's Parquet writer copies the configuration of a Hadoop output file, and
 *  builds Hadoop's defaults for any other (its `*-default.xml` files parsed, ~16 ms of CPU for every data file).
 *  A written file's location is therefore Hadoop's form of it (`file:///a/b` is recorded as `file:/a/b`), as
 *  with Hadoop's FileIO; a read takes any form. */
final class LocalFileIO extends DelegateFileIO {
  private var props: JMap[String, String] = Collections.emptyMap()

  override def initialize(properties: JMap[String, String]): Unit = props = Map.from(properties.asScala).asJava

  override def properties(): JMap[String, String] = props

  override def newInputFile(location: String): InputFile = new LocalFileIO.Input(location)

  override def newOutputFile(location: String): OutputFile =
    HadoopOutputFile.fromPath(new HadoopPath(location), LocalFileIO.disk, LocalFileIO.disk.getConf)

  override def deleteFile(location: String): Unit = {
    val path = LocalFileIO.path(location)
    Files.deleteIfExists(path)
    Files.deleteIfExists(LocalFileIO.checksum(path))
  }

  override def deleteFiles(locations: java.lang.Iterable[String]): Unit = {
    val failed = locations.asScala.count { location =>
      try { deleteFile(location); false } catch { case _: IOException | _: UncheckedIOException => true }
    }
    if (failed > 0) throw new BulkDeletionFailureException(failed)
  }

  /** Every file under `prefix` (a directory), as Hadoop's `listFiles(prefix, recursive)` lists them. */
  override def listPrefix(prefix: String): java.lang.Iterable[FileInfo] = {
    val root = LocalFileIO.path(prefix)
    if (!Files.isDirectory(root)) return Collections.emptyList()
    val scheme = if (prefix.startsWith("file:")) "file:" else ""
    Using.resource(Files.walk(root)) { paths =>
      paths.iterator.asScala.filter(p => Files.isRegularFile(p) && !LocalFileIO.isChecksum(p)).map { p =>
        val file = p.toFile
        new FileInfo(scheme + file.getAbsolutePath, file.length, file.lastModified)
      }.toList.asJava
    }
  }

  override def deletePrefix(prefix: String): Unit = {
    val root = LocalFileIO.path(prefix)
    if (Files.exists(root)) {
      Using.resource(Files.walk(root)) { paths =>
        paths.iterator.asScala.toList.reverse.foreach(p => Files.deleteIfExists(p))  // children before parents
      }
    }
  }
}

object LocalFileIO {
  /** The file a location names: `file:/a`, `file:///a` and `/a` are `/a`, as Hadoop reads them (no decoding). */
  def path(location: String): Path =
    if (location.startsWith("file://")) Paths.get(location.substring("file://".length))
    else if (location.startsWith("file:")) Paths.get(location.substring("file:".length))
    else Paths.get(location)

  private[iceberg] def checksum(path: Path): Path = path.resolveSibling(s".${path.getFileName}.crc")

  private def isChecksum(path: Path): Boolean = {
    val name = path.getFileName.toString
    name.startsWith(".") && name.endsWith(".crc")
  }

  private final class Input(location: String) extends InputFile {
    private val file = path(location)

    override def getLength: Long =
      try Files.size(file) catch { case e: NoSuchFileException => throw notFound(e) }

    override def newStream(): SeekableInputStream = org.apache.iceberg.Files.localInput(file.toFile).newStream()

    override def location(): String = location

    override def exists(): Boolean = Files.exists(file)
  }

  private def notFound(e: NoSuchFileException) =
    new org.apache.iceberg.exceptions.NotFoundException(e, "File does not exist: %s", e.getFile)

  /** A configuration of no default resources: `fs.file.impl` is [[LocalDisk]], made for each use (Parquet's writer
   *  asks for the file system of its file with a copy of this, and the cache would answer with Hadoop's own). */
  private lazy val bare: Configuration = {
    val conf = new Configuration(false)
    conf.set("fs.file.impl", classOf[LocalDisk].getName)
    conf.setBoolean("fs.file.impl.disable.cache", true)
    conf
  }

  private lazy val disk: LocalDisk = {
    val fs = new LocalDisk
    fs.initialize(URI.create("file:///"), bare)
    fs
  }
}

/** Hadoop's raw local file system (no checksum files) that removes the checksum file Hadoop's checksummed one
 *  left beside a file it writes anew (Hadoop would check the new bytes against the old file's checksums), and sets
 *  a new file's or folder's permissions through Java's file API: Hadoop's own runs a `chmod` process for each
 *  without its native library, which Spark's distribution does not carry. jvm/localfs's file system does the same
 *  for Hadoop's own writes; its jar is on the driver's class path only when the pipeline starts a local driver, so
 *  this one does not extend it. */
final class LocalDisk extends RawLocalFileSystem {
  override protected def createOutputStreamWithMode(f: HadoopPath, append: Boolean,
                                                    permission: FsPermission): OutputStream = {
    if (!append) Files.deleteIfExists(LocalFileIO.checksum(pathToFile(f).toPath))
    super.createOutputStreamWithMode(f, append, permission)
  }

  override def setPermission(p: HadoopPath, permission: FsPermission): Unit = {
    val actions = Seq(permission.getUserAction, permission.getGroupAction, permission.getOtherAction)
    Files.setPosixFilePermissions(pathToFile(p).toPath, PosixFilePermissions.fromString(actions.map(_.SYMBOL).mkString))
  }
}
