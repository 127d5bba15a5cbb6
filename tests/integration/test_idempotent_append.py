"""An Iceberg append is committed once per (writer id, batch id), however far back the table's history holds it."""

from __future__ import annotations

import uuid

from tables.append import ANCESTRY_LOOKUP, IcebergAppender


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
