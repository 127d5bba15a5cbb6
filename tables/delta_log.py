"""A Delta table's version and its commits' info, read from the log itself.

`DeltaTable.history()` builds a DataFrame of commit infos, which costs Spark jobs: about a second for
`history(1)` here, and a job over every commit file for `history()`. The stages ask for a table's version and
its last commit's metadata per table and batch, so that was seconds of fixed cost per Delta table. The log
answers directly: the version is the snapshot's (`DeltaLog.update`), and a commit's info is the `commitInfo`
line of that commit's JSON file in `_delta_log`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _log(spark: SparkSession, path: str) -> Any:
    jvm = spark._jvm  # type: ignore[attr-defined]
    return jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)  # type: ignore[attr-defined]


def version(spark: SparkSession, path: str) -> int | None:
    """The table's latest version; None when `path` holds no Delta table."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    none = jvm.scala.Option.empty()
    latest = int(_log(spark, path).update(False, none, none).version())
    return latest if latest >= 0 else None


def commit_info(spark: SparkSession, path: str, commit: int) -> dict[str, Any] | None:
    """The `commitInfo` action of version `commit` (operation, operationMetrics, userMetadata …), empty when the
    commit has none; None when the log no longer holds that commit's file (log retention removes old ones)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    log = _log(spark, path)
    file = jvm.org.apache.hadoop.fs.Path(log.logPath(), f"{commit:020d}.json")
    fs = file.getFileSystem(log.newDeltaHadoopConf())
    if not fs.exists(file):
        return None
    stream = fs.open(file)
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    for line in text.splitlines():
        action = json.loads(line) if line.strip() else {}
        if "commitInfo" in action:
            return action["commitInfo"]
    return {}


def commit_infos(spark: SparkSession, path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(version, commit info) from the latest commit back, while the log holds them."""
    latest = version(spark, path)
    for commit in range(latest if latest is not None else -1, -1, -1):
        info = commit_info(spark, path, commit)
        if info is None:
            return
        yield commit, info
