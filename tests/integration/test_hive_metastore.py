"""The Hive metastore catalog (`catalog.type = 'hive'`) on the stack's Thrift metastore: a table Spark
writes is the table pyiceberg reads, and a table pyiceberg defines is one Spark writes into."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest

from pipeline.config.settings import PipelineConfig
from tables.catalog import load_pyiceberg_catalog
from tests.conftest import HIVE_CATALOG, make_config, running

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def metastore(stack) -> Iterator[None]:
    """The metastore, started for this module alone: no other test uses it, so no worker's stack starts it."""
    with running(make_config("stack.metastore=true")):
        yield


def test_a_table_round_trips_between_spark_and_pyiceberg(metastore, spark, cfg: PipelineConfig) -> None:
    namespace, name = "roundtrip", f"t{uuid.uuid4().hex[:8]}"
    ref = f"{HIVE_CATALOG.name}.{namespace}.{name}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {HIVE_CATALOG.name}.{namespace}")
    spark.createDataFrame([(1, "a"), (2, "b")], "id BIGINT, name STRING").writeTo(ref).using("iceberg").create()
    spark.sql(f"ALTER TABLE {ref} ADD COLUMNS (score DOUBLE)")
    spark.sql(f"INSERT INTO {ref} VALUES (3, 'c', 0.5)")

    pyiceberg = load_pyiceberg_catalog(HIVE_CATALOG, cfg.aws)
    table = pyiceberg.load_table((namespace, name))
    assert [f.name for f in table.schema().fields] == ["id", "name", "score"]
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "a", "score": None}, {"id": 2, "name": "b", "score": None},
        {"id": 3, "name": "c", "score": 0.5}]

    # The other way: pyiceberg defines a table in the metastore, Spark finds it and writes, pyiceberg reads.
    defined = f"{name}_py"
    pyiceberg.create_table((namespace, defined), schema=pa.schema([("id", pa.int64()), ("city", pa.string())]))
    spark.sql(f"INSERT INTO {HIVE_CATALOG.name}.{namespace}.{defined} VALUES (7, 'Oslo')")
    assert pyiceberg.load_table((namespace, defined)).scan().to_arrow().to_pylist() == [{"id": 7, "city": "Oslo"}]
