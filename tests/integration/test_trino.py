"""Trino, Athena's engine, on the lake the stages write to Glue and S3 (moto): the stack's Trino answers as Spark
does, row for row, for the changelog, an SCD1 mirror in the pending layout (its base, its pending changes and,
through the views `athena-ddl` prints, its current state and its deleted rows), the changelog's latest-change
views, and time travel on the mirror, `athena-ddl`'s own examples included."""

from __future__ import annotations

import datetime as dt
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Iterator

import pytest
import trino

from pipeline.config.settings import PipelineConfig
from pipeline.sql.athena import athena_statements
from pipeline.stack import Stack
from pipeline.stack.trino import connect
from pipeline.stages.mirror import MirrorStage
from tables.names import quote
from tables.pending import pending_table
from tables.views import lake_views
from tests.conftest import PORT_OFFSET
from tests.integration.test_glue_catalog import glue_cfg  # noqa: F401 (a fixture: the tests' Glue catalog on moto)
from tests.integration.test_mirror import Source, _configure, _own_mirrors

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

pytestmark = pytest.mark.integration

Rows = tuple[list[str], list[tuple]]


@pytest.fixture(scope="module")
def trino_starting(cfg: PipelineConfig, stack: Stack) -> Iterator[tuple[PipelineConfig, Future[list[str]]]]:
    """The stack's Trino on a port of this worker's, for this module only (kept when it was up): it starts in
    the background while `lake` lands the source, and stops at the module's end if it was started here."""
    trino_cfg = cfg.model_copy(update={"stack": cfg.stack.model_copy(
        update={"trino": True, "trino_port": 18090 + PORT_OFFSET})})
    server = Stack(trino_cfg, only=["trino"])
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(server.up)
        yield trino_cfg, starting
        if starting.exception() is None and starting.result():
            server.down()


@pytest.fixture(scope="module")
def trino_server(trino_starting, lake) -> Iterator[trino.dbapi.Connection]:
    trino_cfg, starting = trino_starting
    starting.result()  # raises what stopped the start, with the service's log tail
    connection = connect(trino_cfg)
    yield connection
    connection.close()


@pytest.fixture(scope="module")
def lake(glue_cfg: PipelineConfig, trino_starting, spark, tmp_path_factory) -> tuple[PipelineConfig, Source]:
    """One source landed in Glue mode (Athena's catalog) in two parts, each merged into mirrors of this module's
    own: the first part's rows are in the mirrors' base tables, the second's changes pending on them. Asks for
    `trino_starting` only so that Trino starts first and comes up while this lands."""
    prefix = f"tr{uuid.uuid4().hex[:6]}"
    glue_cfg = _own_mirrors(_configure(glue_cfg, prefix), "tr")
    source = Source(glue_cfg, prefix, tmp_path_factory.mktemp("trino"))
    for events in (450, 900):  # the longer run repeats the shorter one, then goes on
        source.simulate(events)
        source.land(spark)
        MirrorStage(glue_cfg, spark).run_once()
    return glue_cfg, source


def _plain(value: Any) -> Any:
    """One value as both clients can be compared on: a struct (Spark's Row, Trino's row tuple) and an array as a
    tuple, a map as sorted pairs, a zoned time in this machine's zone without the zone (as PySpark hands out a
    Spark timestamp), bytes as bytes."""
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone().replace(tzinfo=None)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _sorted(rows: list) -> list[tuple]:
    return sorted((_plain(row) for row in rows), key=repr)


def trino_rows(connection: trino.dbapi.Connection, sql: str) -> Rows:
    cursor = connection.cursor()
    cursor.execute(sql)
    rows = cursor.fetchall()
    return [d[0] for d in cursor.description], _sorted(rows)


def spark_rows(frame: DataFrame) -> Rows:
    return frame.columns, _sorted(frame.collect())


def _on_trino(*parts: str) -> str:
    return quote(*parts, mark='"')


def test_trino_reads_the_changelog_as_spark_does(lake, spark, trino_server) -> None:
    cfg, source = lake
    for table in source.tables():
        expected = spark_rows(spark.table(quote(cfg.catalog.name, cfg.changelog.namespace, table)))
        assert len(expected[1]) > 0
        assert trino_rows(trino_server, f"SELECT * FROM {_on_trino(cfg.changelog.namespace, table)}") == expected


def test_trino_reads_the_mirrors_base_and_pending_tables(lake, spark, trino_server) -> None:
    cfg, source = lake
    for table in source.tables():
        assert pending_table(cfg, spark, table) is not None, "the mirror is in the pending layout"
        for namespace in (cfg.mirror.namespace, cfg.mirror.pending_namespace):
            expected = spark_rows(spark.table(quote(cfg.catalog.name, namespace, table)))
            assert len(expected[1]) > 0, f"{namespace}.{table}"
            assert trino_rows(trino_server, f"SELECT * FROM {_on_trino(namespace, table)}") == expected


def test_the_views_athena_ddl_prints_run_on_trino_and_answer_as_in_spark(lake, spark, trino_server) -> None:
    """Each view, created in Glue by Trino from its Athena text (as Athena holds them), shows what the same view
    shows in Spark: a mirror's `_current` and `_deleted` (the overlay of its pending changes on its base) and a
    changelog table's `_latest`."""
    cfg, source = lake
    views = [v for v in lake_views(cfg, spark) if v.table in source.tables()]
    suffixes = (cfg.mirror.view_suffix, cfg.mirror.deleted_view_suffix, cfg.mirror.latest_view_suffix)
    assert sorted(v.name for v in views) == sorted(f"{t}{s}" for t in source.tables() for s in suffixes)
    try:
        for view in views:
            trino_server.cursor().execute(view.athena_ddl())
            pending = quote(cfg.catalog.name, view.pending_namespace, view.table) if view.pending_namespace else None
            expected = spark_rows(spark.sql(view.select(quote(cfg.catalog.name, view.namespace, view.table), pending)))
            assert len(expected[1]) > 0, view.name
            found = trino_rows(trino_server, f"SELECT * FROM {_on_trino(view.namespace, view.name)}")
            assert found == expected, f"{view.namespace}.{view.name}"
    finally:  # the changelog namespace is the worker's, shared with other modules' tables
        for view in views:
            if view.namespace == cfg.changelog.namespace:
                trino_server.cursor().execute(f"DROP VIEW IF EXISTS {_on_trino(view.namespace, view.name)}")


def test_trino_travels_to_every_commit_of_a_mirror_as_spark_does(lake, spark, trino_server) -> None:
    """Its base and its pending table: each has a past that differs from its present."""
    cfg, source = lake
    table = source.tables()[0]
    for namespace in (cfg.mirror.namespace, cfg.mirror.pending_namespace):
        ref = quote(cfg.catalog.name, namespace, table)
        snapshots = [r["snapshot_id"] for r in spark.sql(f"SELECT snapshot_id FROM {ref}.snapshots").collect()]
        answers = []
        for snapshot in snapshots:
            expected = spark_rows(spark.sql(f"SELECT * FROM {ref} VERSION AS OF {snapshot}"))
            found = trino_rows(trino_server,
                               f"SELECT * FROM {_on_trino(namespace, table)} FOR VERSION AS OF {snapshot}")
            assert found == expected, f"{ref} as of {snapshot}"
            answers.append(found)
        assert len({repr(a) for a in answers}) > 1, f"{ref}: its commits show different rows"


def test_athena_ddls_time_travel_examples_run_on_trino_as_printed(lake, spark, trino_server) -> None:
    """`FOR TIMESTAMP AS OF` and `FOR VERSION AS OF`, both pinned to each mirror base's latest commit: its live
    rows then, in the columns the table had then (the second part added one since)."""
    cfg, source = lake
    examples = [s.sql for s in athena_statements(cfg, spark) if s.sql and " AS OF " in s.sql]
    assert len(examples) == 2 * len(source.tables())
    for table in source.tables():
        ref = quote(cfg.catalog.name, cfg.mirror.namespace, table)
        latest = spark.sql(f"SELECT snapshot_id FROM {ref}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
        expected = spark_rows(spark.sql(f"SELECT * FROM {ref} VERSION AS OF {latest} WHERE NOT _is_deleted"))
        for example in [e for e in examples if _on_trino(cfg.mirror.namespace, table) in e]:
            assert trino_rows(trino_server, example) == expected, example
