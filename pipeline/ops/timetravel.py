"""The past of the lakehouse: SQL as of a lake commit, the history of one key, a table as of a source time.

- As of a lake commit: Spark's `VERSION AS OF` / `TIMESTAMP AS OF`, which both Iceberg and Delta serve. A
  mirror in the pending layout is its base and its pending table, each pinned to the commit's time.
- History of a key: every changelog row of the key in `_seq` order, with the lake commit that added it.
- As of a source time: the changelog rebuilt to the state the source held then (`cdc.merge.state_as_of`).
Delta path tables are registered in the session catalog first, so SQL names them like Iceberg tables:
`changelog.<table>`, `mirror.<table>` and their views (`tables/views.py`).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Callable

from cdc.columns import source_columns
from cdc.merge import state_as_of
from pipeline.config.settings import PipelineConfig
from pipeline.stages.mirror import table_keys
from tables.lake import lake_table, table_names
from tables.names import column, quote, sql_string
from tables.pending import pending_table, state_as_of_commit
from tables.views import lake_views, replace_views

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# A table reference after FROM or JOIN (not a subquery): the place `VERSION AS OF` goes.
_QUOTED = r"`(?:[^`]|``)+`"  # a quoted identifier part (a backtick in it doubled)
_TABLE_REFERENCE = re.compile(rf"(?i)\b(FROM|JOIN)(\s+)((?:[A-Za-z_]\w*|{_QUOTED})(?:\.(?:\w+|{_QUOTED}))*)(?!\s*\()")


class QueryError(ValueError):
    """A query, key or time the lake cannot answer; the message says what to pass instead."""


def as_of_sql(sql: str, as_of: str, pinned: Callable[[str], str | None] = lambda reference: None) -> str:
    """`sql` with every table it reads pinned to one lake commit: a snapshot id / version, or a timestamp.
    `pinned` may name a relation that stands for a table reference already pinned (a mirror in the pending
    layout is two tables: `pinned_mirrors`)."""
    clause = (f"VERSION AS OF {int(as_of)}" if re.fullmatch("[0-9]+", as_of)
              else f"TIMESTAMP AS OF {sql_string(checked_time(as_of, '--as-of'))}")

    def pin(match: re.Match[str]) -> str:
        instead = pinned(match[3])
        return f"{match[1]}{match[2]}{instead}" if instead else f"{match[1]}{match[2]}{match[3]} {clause}"

    rewritten, count = _TABLE_REFERENCE.subn(pin, sql)
    if not count:
        raise QueryError(f"--as-of needs a query that reads a table by name (FROM <table>), got: {sql}")
    return rewritten


def checked_time(value: str, option: str) -> str:
    """`value` if it reads as a timestamp (`2026-11-22 18:00:00`, ISO 8601 with an optional offset), else a
    QueryError naming `option`: a typo is refused here, not met as a Spark parse error or an empty result."""
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise QueryError(f"{option} {value!r} is not a timestamp: give one such as '2026-11-22 18:00:00'"
                         + (" or a snapshot id" if option == "--as-of" else "")) from None
    return value


def register_delta_tables(cfg: PipelineConfig, spark: SparkSession) -> None:
    """Name Delta path tables and their views in the session catalog: `changelog.<t>`, `changelog.<t>_latest`,
    `mirror.<t>`, `mirror.<t>_current`, `mirror.<t>_deleted`."""
    spark.sql("USE spark_catalog")
    for namespace in (cfg.changelog.namespace, cfg.mirror.namespace):
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote(namespace)}")
        for name in table_names(cfg, spark, namespace):
            path = f"{cfg.lake.delta_root}/{namespace}/{name}"
            spark.sql(f"CREATE TABLE IF NOT EXISTS {quote(namespace, name)} USING delta LOCATION {sql_string(path)}")
    replace_views(spark, None, lake_views(cfg, spark))


def query(cfg: PipelineConfig, spark: SparkSession, sql: str, as_of: str | None = None) -> DataFrame:
    """`sql` over the lake's tables, resolved when called. Delta's names live in the session catalog, which is
    current only while the query is resolved: a caller's session keeps its own current catalog and namespace."""
    def resolved() -> DataFrame:
        return spark.sql(as_of_sql(sql, as_of, pinned_mirrors(cfg, spark, as_of)) if as_of else sql)

    if cfg.lake.format != "delta":
        return resolved()
    catalog, namespace = spark.catalog.currentCatalog(), spark.catalog.currentDatabase()
    try:
        register_delta_tables(cfg, spark)
        return resolved()
    finally:
        if spark.catalog.currentCatalog() != catalog:
            spark.catalog.setCurrentCatalog(catalog)
        if spark.catalog.currentDatabase() != namespace:
            spark.catalog.setCurrentDatabase(namespace)


def pinned_mirrors(cfg: PipelineConfig, spark: SparkSession, as_of: str) -> Callable[[str], str | None]:
    """For `as_of_sql`: a reference to a mirror in the pending layout becomes a temporary view of its state at
    that commit (`tables.pending.state_as_of`); other references are pinned as they are."""
    def pinned(reference: str) -> str | None:
        parts = [part.strip("`").replace("``", "`") for part in re.findall(rf"{_QUOTED}|[^.]+", reference)]
        if parts[:1] == [cfg.catalog.name] and len(parts) == 3:
            parts = parts[1:]
        if len(parts) != 2 or parts[0] != cfg.mirror.namespace or pending_table(cfg, spark, parts[1]) is None:
            return None
        view = f"{parts[1]}_as_of_{abs(hash(as_of))}"
        try:
            state_as_of_commit(cfg, spark, parts[1], as_of).createOrReplaceTempView(view)
        except ValueError as exc:
            raise QueryError(str(exc)) from None
        return quote(view)

    return pinned


def parse_key(keys: list[str], key: str) -> dict[str, str]:
    """One key given as `value` or `v1,v2` (composite keys, in key order) -> column -> value."""
    values = key.split(",")
    if len(values) != len(keys):
        raise QueryError(f"--key {key!r} has {len(values)} value(s); the table's key is ({', '.join(keys)})")
    return dict(zip(keys, values))


def history(cfg: PipelineConfig, spark: SparkSession, table: str, key: str) -> DataFrame:
    """Every change of one key, oldest first: op, source time, the lake commit that added it, and the row.
    A change delivered twice (same source position, another transport offset) is shown once."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    changelog = lake_table(cfg, spark, cfg.changelog.namespace, table)
    if not changelog.exists():
        raise QueryError(f"no changelog table {table} ({changelog.ref}); tables: "
                         f"{', '.join(table_names(cfg, spark, cfg.changelog.namespace)) or 'none'}")
    rows = changelog.read_with_commits(parse_key(table_keys(cfg, table, changelog), key))
    first_delivery = Window.partitionBy("_seq.source_major", "_seq.source_minor").orderBy("_seq")
    columns = source_columns(rows.columns)
    return (rows.withColumn("_rank", F.row_number().over(first_delivery)).where("_rank = 1")  # duplicates once
            .orderBy("_seq").select("_op", "_source_ts", "_commit", "_seq", *map(column, columns)))


def state(cfg: PipelineConfig, spark: SparkSession, table: str, source_time: str, key: str | None = None) -> DataFrame:
    """The table (or its row of one `key`) as the source held it at `source_time`, rebuilt from the changelog."""
    changelog = lake_table(cfg, spark, cfg.changelog.namespace, table)
    if not changelog.exists():
        raise QueryError(f"no changelog table {table} ({changelog.ref})")
    keys = table_keys(cfg, table, changelog)
    changes = changelog.read_key(parse_key(keys, key)) if key is not None else changelog.read()
    return state_as_of(changes, keys, checked_time(source_time, "--as-of-source"))
