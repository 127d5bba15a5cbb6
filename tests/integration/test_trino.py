"""Trino, Athena's engine, on the lake the stages write to Glue and S3 (moto). Glue holds what Athena reads each
table by, and pyiceberg reads what Spark reads. The stack's Trino answers as Spark does, row for row, for the
changelog, SCD1 mirrors in the pending layout (their base, their pending changes and, through the views
`athena-ddl` prints, their current state and their deleted rows) with soft and hard deletes, SCD1 mirrors in the
merge layout with both, an SCD2 mirror (its versions, one key's history), the changelog's latest-change views,
time travel on the mirror, `athena-ddl`'s own examples included, and a Delta mirror and a Delta changelog
through Trino's Delta Lake connector. Every Iceberg table the stages write is format v2, and what Trino does
with v3 is pinned. `verify` reads the mirrors through Trino, and Trino's failures name what they are about."""

from __future__ import annotations

import datetime as dt
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple

import boto3
import pytest
import trino

from pipeline.api import apply_changes
from pipeline.config.settings import PipelineConfig
from pipeline.ops.verify import verify_lake
from pipeline.sql.athena import athena_statements
from pipeline.sql.trino_query import TrinoError, fetch
from pipeline.stack import Stack
from pipeline.stack.trino import DELTA_CATALOG, connect
from pipeline.stages.changelog import ChangelogStage
from pipeline.stages.mirror import MirrorStage
from simulators.truth import TruthStore
from tables.catalog import load_pyiceberg_catalog
from tables.glue_delta import DeltaGlue
from tables.lake import create_namespace
from tables.names import column, quote, sql_string
from tables.pending import pending_table
from tables.views import ViewSpec, lake_views, views_of_mirror
from tests.conftest import GLUE_BUCKET, PORT_OFFSET, free_port
from tests.integration.test_glue_catalog import _current_metadata, glue_cfg  # noqa: F401 (glue_cfg: a fixture)
from tests.integration.test_mirror import Source, _assert_equal_to_truth, _configure, _own_mirrors
from tests.integration.test_sql_access import assert_athena_ddl_parses

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

pytestmark = pytest.mark.integration

Rows = tuple[list[str], list[tuple]]
V3_ON_TRINO = "Unexpected PUFFIN file format"  # Trino 476 on an Iceberg v3 deletion vector (docs/sql-access.md)


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


class Lake(NamedTuple):
    cfg: PipelineConfig  # the mirrors in the pending layout, soft deletes; `history_table` is SCD2
    source: Source
    hard: PipelineConfig  # `hard_table` mirrored again with hard deletes, merge layout, merge-on-read
    truth: TruthStore  # the source's rows and versions


def history_table(prefix: str) -> str:
    return f"{prefix}_artworks"


def hard_table(prefix: str) -> str:
    return f"{prefix}_orders"


@pytest.fixture(scope="module")
def lake(glue_cfg: PipelineConfig, trino_starting, spark, tmp_path_factory) -> Lake:
    """One source landed in Glue mode (Athena's catalog) in two parts, each merged into mirrors of this module's
    own: the first part's rows are in the mirrors' base tables, the second's changes pending on them; one table
    is also merged into a hard-delete mirror, whose second merge deletes rows by position delete files. Asks for
    `trino_starting` only so that Trino starts first and comes up while this lands."""
    prefix = f"tr{uuid.uuid4().hex[:6]}"
    cfg = _own_mirrors(_configure(glue_cfg, prefix), "tr", scd_type={history_table(prefix): 2})
    hard = _own_mirrors(_configure(glue_cfg, prefix), "th", tables=[hard_table(prefix)], delete_mode="hard",
                        layout="merge", write_mode="merge-on-read")
    source = Source(cfg, prefix, tmp_path_factory.mktemp("trino"))
    for events in (450, 900):  # the longer run repeats the shorter one, then goes on
        truth = source.simulate(events)
        source.land(spark)
        MirrorStage(cfg, spark).run_once()
        MirrorStage(hard, spark).run_once()
    return Lake(cfg, source, hard, truth)


def _nulls_first(keys: list) -> list:
    """Keys in order; a changelog's truncate rows name no key."""
    return sorted(keys, key=lambda k: (k is not None, k))


def test_the_stages_tables_are_in_glue_as_athena_and_pyiceberg_read_them(lake, spark) -> None:
    """Every changelog and mirror table the stages wrote in Glue mode: its Glue entry holds what Athena reads an
    Iceberg table by, pyiceberg reads the rows Spark reads, the mirrors equal the source, and `athena-ddl`'s
    statements parse (Glue keeps no Iceberg views: Athena holds them)."""
    cfg, source, _, truth = lake
    _assert_equal_to_truth(cfg, spark, truth, source.tables())
    glue = boto3.client("glue", **cfg.aws.boto3_kwargs())
    pyiceberg = load_pyiceberg_catalog(cfg.catalog, cfg.aws)
    for namespace in (cfg.changelog.namespace, cfg.mirror.namespace):
        for table in source.tables():
            ref = f"{cfg.catalog.name}.{namespace}.{table}"
            entry = glue.get_table(DatabaseName=namespace, Name=table)["Table"]
            # What Athena reads an Iceberg table by: the type, the current metadata file, the columns.
            assert entry["Parameters"]["table_type"].upper() == "ICEBERG"
            assert entry["Parameters"]["metadata_location"] == _current_metadata(spark, ref)
            assert entry["Parameters"]["metadata_location"].startswith(f"s3://{GLUE_BUCKET}/")
            rows = spark.table(ref)
            assert [c["Name"] for c in entry["StorageDescriptor"]["Columns"]] == rows.columns
            # The simulator added a column half-way: the Glue entry evolved with the table.
            assert "_is_deleted" in rows.columns and len(rows.columns) > 10

            arrow = pyiceberg.load_table((namespace, table)).scan().to_arrow()
            key = cfg.mirror.key_columns(table)[0]
            spark_keys = [r[key] for r in rows.select(key).collect()]
            assert _nulls_first(arrow.column(key).to_pylist()) == _nulls_first(spark_keys)
    assert_athena_ddl_parses(cfg, spark, source.tables())


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


def _view_pair(cfg: PipelineConfig, spark, connection: trino.dbapi.Connection, view: ViewSpec) -> tuple[str, str]:
    """The view created on Trino from its Athena text (as Athena holds it in Glue), and Spark's SQL of the same
    view: the two to compare."""
    connection.cursor().execute(view.athena_ddl())
    pending = quote(cfg.catalog.name, view.pending_namespace, view.table) if view.pending_namespace else None
    table = quote(cfg.catalog.name, view.namespace, view.table)
    return _on_trino(view.namespace, view.name), view.select(table, pending)


def test_trino_reads_the_changelog_as_spark_does(lake, spark, trino_server) -> None:
    cfg, source, *_ = lake
    for table in source.tables():
        expected = spark_rows(spark.table(quote(cfg.catalog.name, cfg.changelog.namespace, table)))
        assert len(expected[1]) > 0
        assert trino_rows(trino_server, f"SELECT * FROM {_on_trino(cfg.changelog.namespace, table)}") == expected


def test_trino_reads_the_mirrors_base_and_pending_tables(lake, spark, trino_server) -> None:
    cfg, source, *_ = lake
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
    cfg, source, *_ = lake
    views = [v for v in lake_views(cfg, spark) if v.table in source.tables()]
    m = cfg.mirror
    suffixes = (m.view_suffix, m.deleted_view_suffix, m.latest_view_suffix)
    assert sorted(v.name for v in views) == sorted([f"{t}{s}" for t in source.tables() for s in suffixes]
                                                   + [f"{history_table(source.prefix)}{m.history_view_suffix}"])
    try:
        for view in views:
            on_trino, on_spark = _view_pair(cfg, spark, trino_server, view)
            expected = spark_rows(spark.sql(on_spark))
            assert len(expected[1]) > 0, view.name
            assert trino_rows(trino_server, f"SELECT * FROM {on_trino}") == expected, f"{view.namespace}.{view.name}"
    finally:  # the changelog namespace is the worker's, shared with other modules' tables
        for view in views:
            if view.namespace == cfg.changelog.namespace:
                trino_server.cursor().execute(f"DROP VIEW IF EXISTS {_on_trino(view.namespace, view.name)}")


def test_trino_travels_to_every_commit_of_a_mirror_as_spark_does(lake, spark, trino_server) -> None:
    """Every commit of a pending-layout mirror's base (one: its first build; a fold would add the next) and of its
    pending table, and of a merge-layout base merged twice (its first build, then a merge whose hard deletes are
    position delete files) reads in Trino as in Spark; the last two each have a past that differs from their
    present."""
    cfg, source, hard, _ = lake
    table = source.tables()[0]
    travelled = [(cfg.mirror.namespace, table, 1), (cfg.mirror.pending_namespace, table, 2),
                 (hard.mirror.namespace, hard_table(source.prefix), 2)]
    for namespace, name, states in travelled:
        ref = quote(cfg.catalog.name, namespace, name)
        snapshots = [r["snapshot_id"] for r in spark.sql(f"SELECT snapshot_id FROM {ref}.snapshots").collect()]
        answers = []
        for snapshot in snapshots:
            expected = spark_rows(spark.sql(f"SELECT * FROM {ref} VERSION AS OF {snapshot}"))
            found = trino_rows(trino_server,
                               f"SELECT * FROM {_on_trino(namespace, name)} FOR VERSION AS OF {snapshot}")
            assert found == expected, f"{ref} as of {snapshot}"
            answers.append(found)
        assert len({repr(a) for a in answers}) >= states, f"{ref}: {states} different states in its commits"


def test_athena_ddls_time_travel_examples_run_on_trino_as_printed(lake, spark, trino_server) -> None:
    """`FOR TIMESTAMP AS OF` and `FOR VERSION AS OF`, both pinned to each mirror base's latest commit: its live
    rows then, in the columns the table had then (the second part added one since)."""
    cfg, source, *_ = lake
    examples = [s.sql for s in athena_statements(cfg, spark) if s.sql and " AS OF " in s.sql]
    assert len(examples) == 2 * len(source.tables())
    for table in source.tables():
        ref = quote(cfg.catalog.name, cfg.mirror.namespace, table)
        latest = spark.sql(f"SELECT snapshot_id FROM {ref}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
        live = "_is_current AND NOT _is_deleted" if table == history_table(source.prefix) else "NOT _is_deleted"
        expected = spark_rows(spark.sql(f"SELECT * FROM {ref} VERSION AS OF {latest} WHERE {live}"))
        for example in [e for e in examples if _on_trino(cfg.mirror.namespace, table) in e]:
            assert trino_rows(trino_server, example) == expected, example


def _views_of(cfg: PipelineConfig, spark, table: str) -> dict[str, ViewSpec]:
    """A mirror's views by suffix, as `athena-ddl` prints them."""
    return {v.name.removeprefix(table): v for v in views_of_mirror(cfg, spark, table)}


def test_trino_shows_one_keys_history_in_an_scd2_mirror_as_spark_does(lake, spark, trino_server) -> None:
    """The `_history` view (base versions with the pending changes' versions rebuilt over them) of the key with
    the most versions, one of them its deletion: every version, with its boundaries, in both engines."""
    cfg, source, *_ = lake
    table = history_table(source.prefix)
    key = cfg.mirror.key_columns(table)[0]
    history = _views_of(cfg, spark, table)[cfg.mirror.history_view_suffix]
    on_trino, on_spark = _view_pair(cfg, spark, trino_server, history)
    most = spark.sql(f"SELECT {quote(key)} AS k, count(*) AS n FROM ({on_spark}) GROUP BY {quote(key)} "
                     "HAVING max(CAST(_is_deleted AS int)) = 1 ORDER BY n DESC, k LIMIT 1").first()
    assert most is not None and most["n"] > 2, f"{table}: a key with versions and a deletion"
    value = f"CAST({sql_string(str(most['k']))} AS bigint)"
    expected = spark_rows(spark.sql(f"SELECT * FROM ({on_spark}) WHERE {quote(key)} = {value}"))
    assert len(expected[1]) == most["n"]
    assert trino_rows(trino_server, f"SELECT * FROM {on_trino} WHERE {_on_trino(key)} = {value}") == expected


def test_trino_reads_a_hard_delete_mirror_as_spark_does(lake, spark, trino_server) -> None:
    """Merged twice with merge-on-read, its second merge's updates and deletes are position delete files that
    Trino applies: it shows Spark's rows, none of the keys the soft mirror shows as deleted, and an empty
    `_deleted` view."""
    cfg, source, hard, _ = lake
    table = hard_table(source.prefix)
    key = quote(cfg.mirror.key_columns(table)[0])
    ref = quote(hard.catalog.name, hard.mirror.namespace, table)
    assert spark.sql(f"SELECT count(*) FROM {ref}.delete_files").first()[0] > 0, "position deletes to apply"
    expected = spark_rows(spark.table(ref))
    found = trino_rows(trino_server, f"SELECT * FROM {_on_trino(hard.mirror.namespace, table)}")
    assert found == expected
    soft_deleted = _view_pair(cfg, spark, trino_server, _views_of(cfg, spark, table)[cfg.mirror.deleted_view_suffix])[1]
    deleted = {r[0] for r in spark.sql(f"SELECT {key} FROM ({soft_deleted})").collect()}
    position = found[0].index(cfg.mirror.key_columns(table)[0])
    assert deleted and not deleted & {row[position] for row in found[1]}
    views = _views_of(hard, spark, table)
    for suffix, rows in ((hard.mirror.view_suffix, expected[1]), (hard.mirror.deleted_view_suffix, [])):
        on_trino, _ = _view_pair(hard, spark, trino_server, views[suffix])
        assert trino_rows(trino_server, f"SELECT * FROM {on_trino}")[1] == rows, suffix


def _halves(changes: DataFrame) -> tuple[DataFrame, DataFrame]:
    """A changelog's changes in two parts by source position: the first half, then the rest."""
    middle = changes.selectExpr("percentile_approx(_seq.source_major, 0.5)").first()[0]
    return changes.where(f"_seq.source_major <= {middle}"), changes.where(f"_seq.source_major > {middle}")


@pytest.fixture(scope="module")
def delta_mirror(lake, spark) -> tuple[PipelineConfig, str]:
    """`hard_table`'s changelog applied to a Delta mirror on S3 by `apply_changes` (the mirror stage's code) in
    two parts, the first half of its changes by source position and then the rest, and registered in Glue as the
    stages register Delta tables (`lake.delta_glue`): the configuration it is in, and its path."""
    cfg, source, *_ = lake
    run = uuid.uuid4().hex[:6]
    delta = cfg.model_copy(update={
        "lake": cfg.lake.model_copy(update={"format": "delta", "delta_root": f"s3://{GLUE_BUCKET}/delta-{run}",
                                            "delta_glue": True}),
        "mirror": cfg.mirror.model_copy(update={"namespace": f"mirror_td{run}"})})
    table = hard_table(source.prefix)
    path = f"{delta.lake.delta_root}/{delta.mirror.namespace}/{table}"
    changes = spark.table(quote(cfg.catalog.name, cfg.changelog.namespace, table))
    for part in _halves(changes):
        apply_changes(spark, path, part, cfg.mirror.key_columns(table), "_seq", config=delta)
    assert DeltaGlue(delta, spark).sync(delta.mirror.namespace, table)
    return delta, path


def _in_millis(frame: DataFrame) -> DataFrame:
    """`frame` with its zoned timestamps cut to milliseconds, in structs too (the changelog's `_transport`), as
    Trino's Delta Lake connector reads a Delta `timestamp`: as `timestamp(3) with time zone`."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F
    from pyspark.sql.types import DataType, StructType, TimestampType

    def cut(value: Column, kind: DataType) -> Column:
        if isinstance(kind, TimestampType):
            return F.date_trunc("millisecond", value)
        if isinstance(kind, StructType) and any(isinstance(f.dataType, (TimestampType, StructType)) for f in kind):
            return F.when(value.isNotNull(), F.struct(*[cut(value[f.name], f.dataType).alias(f.name) for f in kind]))
        return value

    return frame.select(*[cut(column(f.name), f.dataType).alias(f.name) for f in frame.schema.fields])


def test_trino_reads_a_delta_mirror_in_glue_as_spark_does(lake, delta_mirror, spark, trino_server) -> None:
    """Through Trino's Delta Lake connector (catalog `delta`, the same Glue and S3): the table now, and each of
    its versions as Spark reads it (`FOR VERSION AS OF`), zoned times to the millisecond; its soft-deleted rows
    are among them."""
    delta, path = delta_mirror
    table = _on_trino(DELTA_CATALOG, delta.mirror.namespace, hard_table(lake.source.prefix))
    rows = spark.read.format("delta").load(path)
    assert rows.where("_merged_at <> date_trunc('millisecond', _merged_at)").count() > 0, "microseconds to cut"
    expected = spark_rows(_in_millis(rows))
    assert any(row[expected[0].index("_is_deleted")] for row in expected[1]), "deleted rows to read"
    assert trino_rows(trino_server, f"SELECT * FROM {table}") == expected
    versions = [r["version"] for r in spark.sql(f"DESCRIBE HISTORY delta.{quote(path)}").collect()]
    assert len(versions) > 1
    for version in versions:
        then = spark_rows(_in_millis(spark.read.format("delta").option("versionAsOf", version).load(path)))
        assert trino_rows(trino_server, f"SELECT * FROM {table} FOR VERSION AS OF {version}") == then, version


# The SCD1 mirrors `lake` does not merge: the pending layout with hard deletes, the merge layout with soft ones.
SCD1_SHAPES = {"pending-hard": {"layout": "pending", "delete_mode": "hard"},
               "merge-soft": {"layout": "merge", "delete_mode": "soft"}}


@pytest.fixture(scope="module")
def scd1_shapes(lake, spark) -> dict[str, PipelineConfig]:
    """`hard_table`'s changelog applied by `apply_changes` (the mirror stage's code) to one mirror of each of
    `SCD1_SHAPES`, in two parts (the first half of its changes by source position, then the rest): in the
    pending layout the second part's changes, its deletions among them, are pending on the base. By shape, the
    configuration each mirror is in."""
    cfg, source, *_ = lake
    table = hard_table(source.prefix)
    changes = spark.table(quote(cfg.catalog.name, cfg.changelog.namespace, table))
    shapes = {}
    for shape, how in SCD1_SHAPES.items():
        tag = "".join(word[0] for word in shape.split("-"))
        mirrored = _own_mirrors(cfg, tag, tables=[table], scd_type={}, write_mode="merge-on-read", **how)
        for namespace in (mirrored.mirror.namespace, mirrored.mirror.pending_namespace):
            create_namespace(spark, cfg.catalog.name, namespace)  # as the mirror stage does before its first run
        for part in _halves(changes):
            apply_changes(spark, f"{cfg.catalog.name}.{mirrored.mirror.namespace}.{table}", part,
                          cfg.mirror.key_columns(table), "_seq", config=mirrored, **how)
        shapes[shape] = mirrored
    return shapes


@pytest.mark.parametrize("shape", list(SCD1_SHAPES))
def test_trino_reads_every_scd1_shape_and_its_views_as_spark_does(lake, scd1_shapes, shape: str, spark,
                                                                   trino_server) -> None:
    """Its tables (the base, and the pending changes in the pending layout) and its `_current` and `_deleted`
    views from their Athena text: the same rows in both engines; the current state shows no key the source
    deleted, and only soft deletes keep deleted rows."""
    cfg = scd1_shapes[shape]
    table = hard_table(lake.source.prefix)
    pending = pending_table(cfg, spark, table)
    assert (pending is not None) == (cfg.mirror.layout == "pending"), shape
    for namespace in (cfg.mirror.namespace, *([cfg.mirror.pending_namespace] if pending is not None else [])):
        expected = spark_rows(spark.table(quote(cfg.catalog.name, namespace, table)))
        assert len(expected[1]) > 0, f"{namespace}.{table}"
        assert trino_rows(trino_server, f"SELECT * FROM {_on_trino(namespace, table)}") == expected, namespace
    views = _views_of(cfg, spark, table)
    shown = {}
    for suffix in (cfg.mirror.view_suffix, cfg.mirror.deleted_view_suffix):
        on_trino, on_spark = _view_pair(cfg, spark, trino_server, views[suffix])
        shown[suffix] = spark_rows(spark.sql(on_spark))
        assert trino_rows(trino_server, f"SELECT * FROM {on_trino}") == shown[suffix], f"{shape} {suffix}"
    key = cfg.mirror.key_columns(table)[0]
    current, deleted = shown[cfg.mirror.view_suffix], shown[cfg.mirror.deleted_view_suffix]
    live = {row[current[0].index(key)] for row in current[1]}
    changelog = quote(cfg.catalog.name, cfg.changelog.namespace, table)
    gone = {row[0] for row in spark.sql(f"SELECT {quote(key)} FROM {changelog} WHERE _op <> 't' GROUP BY {quote(key)} "
                                        "HAVING max_by(_op, _seq) = 'd'").collect()}  # a key's last change deleted it
    assert live and gone and not live & gone, "the source's deleted keys are not current"
    assert (len(deleted[1]) > 0) == (cfg.mirror.delete_mode == "soft"), shape


@pytest.fixture(scope="module")
def delta_changelog(lake, spark, tmp_path_factory) -> tuple[PipelineConfig, str]:
    """`hard_table`'s topic landed again by the changelog stage into a Delta changelog table on S3, registered in
    Glue as the stage registers it (`lake.delta_glue`): the configuration, and the table's path."""
    cfg, source, *_ = lake
    run = uuid.uuid4().hex[:6]
    table = hard_table(source.prefix)
    delta = cfg.model_copy(update={
        "lake": cfg.lake.model_copy(update={"format": "delta", "delta_root": f"s3://{GLUE_BUCKET}/delta-{run}",
                                            "delta_glue": True}),
        "changelog": cfg.changelog.model_copy(update={
            "namespace": f"changelog_td{run}", "topic_pattern": rf"{source.prefix}\.public\.orders",
            "checkpoint": str(tmp_path_factory.mktemp("delta-changelog") / "checkpoint")})})
    ChangelogStage(delta, spark).run(until_caught_up=True)
    return delta, f"{delta.lake.delta_root}/{delta.changelog.namespace}/{table}"


def test_trino_reads_a_delta_changelog_in_glue_as_spark_does(lake, delta_changelog, spark, trino_server) -> None:
    """Every change, with its transport position and sequence (structs), zoned times to the millisecond."""
    delta, path = delta_changelog
    table = _on_trino(DELTA_CATALOG, delta.changelog.namespace, hard_table(lake.source.prefix))
    rows = spark.read.format("delta").load(path)
    landed = spark.table(quote(lake.cfg.catalog.name, lake.cfg.changelog.namespace, hard_table(lake.source.prefix)))
    assert rows.count() == landed.count() > 0
    assert trino_rows(trino_server, f"SELECT * FROM {table}") == spark_rows(_in_millis(rows))


def test_the_stages_write_iceberg_format_v2_which_trino_reads_and_v3_is_named(lake, spark, trino_server) -> None:
    """Athena reads Iceberg format v2, not v3: every table the stages wrote is v2. A v3 table with a row deleted
    (a deletion vector) shows what Trino does with what the pipeline does not write."""
    cfg, source, hard, _ = lake
    pyiceberg = load_pyiceberg_catalog(cfg.catalog, cfg.aws)
    written = [(namespace, table) for namespace in (cfg.changelog.namespace, cfg.mirror.namespace,
                                                    cfg.mirror.pending_namespace, hard.mirror.namespace)
               for table in source.tables() if spark.catalog.tableExists(quote(cfg.catalog.name, namespace, table))]
    assert len(written) > len(source.tables())
    assert {pyiceberg.load_table(name).metadata.format_version for name in written} == {2}
    probe = quote(cfg.catalog.name, cfg.mirror.namespace, "v3_probe")
    spark.sql(f"CREATE TABLE {probe} (id BIGINT, name STRING) USING iceberg "
              "TBLPROPERTIES ('format-version' = '3', 'write.delete.mode' = 'merge-on-read')")
    try:
        spark.sql(f"INSERT INTO {probe} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        spark.sql(f"DELETE FROM {probe} WHERE id = 2")
        try:
            found = trino_rows(trino_server, f"SELECT * FROM {_on_trino(cfg.mirror.namespace, 'v3_probe')}")
        except trino.exceptions.TrinoQueryError as exc:
            found = exc.message
        assert found == V3_ON_TRINO, found
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {probe}")


def _on_the_modules_trino(cfg: PipelineConfig, trino_starting) -> PipelineConfig:
    return cfg.model_copy(update={"stack": trino_starting[0].stack})


def test_verify_through_trino_finds_the_sources_rows_and_versions(lake, spark, trino_starting, trino_server) -> None:
    """`verify --engine trino`: an SCD1 mirror's current rows and the SCD2 mirror's versions as Trino reads them
    through their views' Athena SQL, against the simulator's truth; with no Trino there, it says so."""
    cfg, source, _, truth = lake
    tables = [source.tables()[0], history_table(source.prefix)]
    verdicts = verify_lake(_on_the_modules_trino(cfg, trino_starting), spark, truth, tables, engine="trino")
    assert all(v.mismatches == 0 and v.rows > 0 for v in verdicts), "\n".join(l for v in verdicts for l in v.lines())
    assert [v.table for v in verdicts] == tables
    down = cfg.model_copy(update={"stack": cfg.stack.model_copy(update={"trino_port": free_port()})})
    with pytest.raises(TrinoError, match=r"Trino at http://\S+ does not answer"):
        verify_lake(down, spark, truth, source.tables()[:1], engine="trino")


def test_a_table_trino_cannot_read_is_named_with_trinos_error(lake, trino_starting, trino_server) -> None:
    cfg = _on_the_modules_trino(lake.cfg, trino_starting)
    missing = _on_trino(cfg.mirror.namespace, "moved_away")
    with pytest.raises(TrinoError, match=rf"could not read {cfg.mirror.namespace}.moved_away: TABLE_NOT_FOUND"):
        fetch(cfg, f"SELECT * FROM {missing}", f"{cfg.mirror.namespace}.moved_away")
