"""An Iceberg append is committed once per (writer id, batch id), however far back the table's history holds it;
each table format says which (writer id, batch id) a table holds."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tables.append import ANCESTRY_LOOKUP, Appender, DeltaAppender, IcebergAppender


def test_a_batch_is_found_among_recent_and_old_snapshots(spark, cfg) -> None:
    namespace = f"{cfg.catalog.name}.appends_{uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
    appender = IcebergAppender(spark, namespace)

    def append(writer: str, batch: int) -> bool:
        rows = spark.createDataFrame([(writer, batch)], "writer string, batch bigint")
        done = appender.append(rows, "t", writer, batch, partition_by_source_time=False)
        assert done.skipped or done.rows == 1
        return not done.skipped

    assert append("w", 0) and append("w", 1)
    assert not append("w", 1) and not append("w", 0)  # the newest snapshot, then one behind it
    assert append("w+rest", 1) and not append("w", 1)  # another writer's commit in between
    for batch in range(ANCESTRY_LOOKUP + 1):  # the writer's commits pushed past the walk's reach
        assert append("other", batch)
    assert not append("w", 1) and not append("w", 0)  # found in all the snapshots
    assert append("w", 2) and not append("w", 2)
    rows = {(r["writer"], r["batch"]) for r in spark.table(f"{namespace}.t").collect()}
    assert spark.table(f"{namespace}.t").count() == len(rows) == 3 + 1 + ANCESTRY_LOOKUP + 1


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_table_says_which_batches_of_which_writer_it_holds(spark, cfg, tmp_path: Path, fmt: str) -> None:
    appender: Appender
    if fmt == "iceberg":
        namespace = f"{cfg.catalog.name}.holds_{uuid.uuid4().hex[:6]}"
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        appender = IcebergAppender(spark, namespace)
    else:
        appender = DeltaAppender(spark, str(tmp_path / "delta"))
    rows = spark.createDataFrame([("w", 3)], "writer string, batch bigint")
    assert not appender.holds("t", "w", 3)  # no table yet
    appender.append(rows, "t", "w", 3, partition_by_source_time=False)
    appender.append(rows, "t", "w+rest", 4, partition_by_source_time=False)
    assert appender.holds("t", "w", 3) and appender.holds("t", "w+rest", 4)
    assert not appender.holds("t", "w", 5) and not appender.holds("t", "other", 3)
