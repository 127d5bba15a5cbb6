package cdc.iceberg

import java.io.{BufferedOutputStream, IOException, OutputStream, UncheckedIOException}
import java.nio.file.{FileAlreadyExistsException, Files, NoSuchFileException, Path, Paths, StandardOpenOption}
import java.util.{Collections, Map => JMap}

import scala.jdk.CollectionConverters._
import scala.util.Using

import org.apache.iceberg.exceptions.AlreadyExistsException
import org.apache.iceberg.io.{BulkDeletionFailureException, DelegateFileIO, FileInfo, InputFile, OutputFile,
  PositionOutputStream, SeekableInputStream}

/** Iceberg's files on this machine's disk (`file:` locations and plain paths), through Java's file API.
 *
 *  Why: Iceberg sends a scan's or a write's table to its tasks with the table's FileIO inside, and Hadoop's
 *  FileIO carries a copy of the whole Hadoop configuration (32 KiB serialised, once per scan); a local file needs
 *  no configuration, so this one carries nothing. It writes no checksum file beside each file, as Hadoop's local
 *  file system does; it removes one a file written by Hadoop had when it removes or replaces the file, and never
 *  lists one. A location keeps its text: a file written as `file:/a/b` is recorded as `file:/a/b`. */
final class LocalFileIO extends DelegateFileIO {
  private var props: JMap[String, String] = Collections.emptyMap()

  override def initialize(properties: JMap[String, String]): Unit = props = Map.from(properties.asScala).asJava

  override def properties(): JMap[String, String] = props

  override def newInputFile(location: String): InputFile = new LocalFileIO.Input(location)

  override def newOutputFile(location: String): OutputFile = new LocalFileIO.Output(location)

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
  private val BufferSize = 64 * 1024

  /** The file a location names: `file:/a`, `file:///a` and `/a` are `/a`, as Hadoop reads them (no decoding). */
  def path(location: String): Path =
    if (location.startsWith("file://")) Paths.get(location.substring("file://".length))
    else if (location.startsWith("file:")) Paths.get(location.substring("file:".length))
    else Paths.get(location)

  private def checksum(path: Path): Path = path.resolveSibling(s".${path.getFileName}.crc")

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

  private final class Output(location: String) extends OutputFile {
    private val file = path(location)

    override def create(): PositionOutputStream =
      try open(StandardOpenOption.CREATE_NEW) catch {
        case _: FileAlreadyExistsException => throw new AlreadyExistsException("File already exists: %s", location)
      }

    override def createOrOverwrite(): PositionOutputStream = {
      Files.deleteIfExists(checksum(file))  // Hadoop would check the new bytes against the old file's checksums
      open(StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING)
    }

    override def location(): String = location

    override def toInputFile: InputFile = new Input(location)

    private def open(options: StandardOpenOption*): PositionOutputStream = {
      Option(file.getParent).foreach(Files.createDirectories(_))
      new Counted(Files.newOutputStream(file, (StandardOpenOption.WRITE +: options): _*))
    }
  }

  /** A buffered stream that knows how many bytes it took: Parquet's writer asks after every page. */
  private final class Counted(out: OutputStream) extends PositionOutputStream {
    private val buffered = new BufferedOutputStream(out, BufferSize)
    private var position = 0L

    override def getPos: Long = position

    override def write(b: Int): Unit = { buffered.write(b); position += 1 }

    override def write(b: Array[Byte], off: Int, len: Int): Unit = { buffered.write(b, off, len); position += len }

    override def flush(): Unit = buffered.flush()

    override def close(): Unit = buffered.close()
  }
}
