"""Small text files through Hadoop's file system (a local path, `s3a://`, `hdfs://`), read and written by the
driver without a Spark job: a checkpoint's notes and offset log take milliseconds this way, where a DataFrame
read or write of one line took over a second."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _file_system(spark: SparkSession, location: str) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(location)  # type: ignore[union-attr]
    return path, path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[union-attr]


def read_text(spark: SparkSession, location: str) -> str | None:
    """The file's text, or None when there is none. A folder (what Spark's text writer makes) reads as its
    part files, in order."""
    path, fs = _file_system(spark, location)
    if not fs.exists(path):
        return None
    if fs.getFileStatus(path).isDirectory():
        parts = sorted(str(s.getPath()) for s in fs.listStatus(path) if s.getPath().getName().startswith("part-"))
        return "".join(read_text(spark, part) or "" for part in parts)
    stream = fs.open(path)
    try:
        return spark.sparkContext._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")  # type: ignore[union-attr]
    finally:
        stream.close()


def write_text(spark: SparkSession, location: str, text: str) -> None:
    """Create (or replace) the file with `text`."""
    path, fs = _file_system(spark, location)
    stream = fs.create(path, True)
    try:
        stream.write(bytearray(text.encode()))
    finally:
        stream.close()
