package cdc.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Set;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system ({@code file:}), checksummed as Hadoop's is, with a new file's permissions set through
 * Java's file API.
 *
 * <p>Why: without Hadoop's native library, which Spark's distribution does not carry, Hadoop's local file system
 * sets every file it creates to its permissions by running a {@code chmod} process. A Kafka batch of 50 quiet
 * tables on a local warehouse started 404 of them (a data file, a manifest, a manifest list and a metadata file a
 * table, each with its checksum file), and the tables' commits, 4 at a time, took 1.8-2.1 s against 0.5-0.7 s
 * without them (docs/benchmarks.md).
 */
public class LocalFileSystem extends org.apache.hadoop.fs.LocalFileSystem {
  public LocalFileSystem() {
    super(new Raw());
  }

  /** The raw local file system, {@code setPermission} through {@code java.nio}: no process a file. */
  public static class Raw extends RawLocalFileSystem {
    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission));
    }
  }

  /** The POSIX form of a Hadoop permission ({@code rwxr-xr-x}). jvm/cdc's {@code LocalDisk} writes it the same way
   *  rather than call this: this jar is on the driver's class path only when the pipeline starts a local driver,
   *  and {@code LocalDisk} serves Iceberg under spark-submit too. */
  static Set<PosixFilePermission> posix(FsPermission permission) {
    return PosixFilePermissions.fromString(permission.getUserAction().SYMBOL + permission.getGroupAction().SYMBOL
        + permission.getOtherAction().SYMBOL);
  }
}
