"""`SessionPool`: work on several tables at once, each in a thread and a Spark session of its own."""

from __future__ import annotations

import os
import threading

import pytest

from pipeline.runtime.sessions import SessionPool

pytestmark = pytest.mark.integration

KEY = "pipeline.test.item"


def test_items_at_once_never_see_each_others_settings(spark) -> None:
    pool = SessionPool(spark)
    both_in_flight = threading.Barrier(2, timeout=120)

    def work(item: str) -> tuple[str, bool]:
        session = pool.current
        session.conf.set(KEY, item)
        both_in_flight.wait()  # each item has set its value before either reads it back
        return session.conf.get(KEY), session is not spark

    assert pool.map(work, ["a", "b"], workers=2, name="test") == [("a", True), ("b", True)]
    assert spark.conf.get(KEY, None) is None
    assert pool.current is spark  # outside the workers: the root


def test_a_failing_item_stops_none_of_the_others_and_is_raised(spark) -> None:
    pool, done = SessionPool(spark), []

    def work(item: str) -> str:
        if item == "bad":
            raise ValueError(f"{item} failed")
        done.append(item)
        return item

    with pytest.raises(ValueError, match="bad failed"):
        pool.map(work, ["bad", "a", "c", "d"], workers=2, name="test")
    assert sorted(done) == ["a", "c", "d"]
    assert pool.map(work, ["e"], workers=2, name="test") == ["e"]  # one item: in the calling thread


def test_local_files_get_their_permissions_from_the_pipelines_file_system(spark, tmp_path) -> None:
    """jvm/localfs: the session's `file:` file system is the pipeline's, which sets a file's permissions through
    Java's file API where Hadoop's runs a `chmod` process; a new file gets Hadoop's default, 666 less its umask 022."""
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{tmp_path.as_uri()}/file")
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    assert fs.getClass().getName() == "cdc.hadoop.LocalFileSystem"
    fs.create(path).close()
    assert os.stat(tmp_path / "file").st_mode & 0o777 == 0o644
    fs.setPermission(path, jvm.org.apache.hadoop.fs.permission.FsPermission.valueOf("-rw-r-----"))
    assert os.stat(tmp_path / "file").st_mode & 0o777 == 0o640
    fs.setPermission(path, jvm.org.apache.hadoop.fs.permission.FsPermission.valueOf("-rwx--x-w-"))
    assert os.stat(tmp_path / "file").st_mode & 0o777 == 0o712


def test_column_calls_record_no_python_call_site(spark) -> None:
    """PySpark records each Column call's Python call site in the JVM only with DataFrame debugging on, at five
    py4j round trips a call: off in the pipeline's sessions, the root's and a pool's alike."""
    from pyspark.errors.utils import is_debugging_enabled

    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    assert not is_debugging_enabled()
    assert SessionPool(spark).map(lambda _: is_debugging_enabled(), ["a"], workers=1, name="test") == [False]
