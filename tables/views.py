"""The SQL views analysts query, defined once in Spark SQL and rendered for each engine.

- `mirror.<t>_current`: the mirror without soft-deleted rows, the source's current state.
- `mirror.<t>_deleted`: the soft-deleted rows with `_deleted_at`, what the source deleted and when.
- `mirror.<t>_history` (SCD2 mirrors): every version of every key; the other two show the current versions.
- `changelog.<t>_latest`: the newest change per key (by `_seq`), deletes included; the first truncate after a
  live key's change deletes it, as in the mirror.

Spark creates them in the catalog when the catalog keeps views (JDBC, REST and Hive do; Iceberg's Glue catalog
does not, so there Athena holds them, from `pipeline athena-ddl`). Athena's text is the same view transpiled
by sqlglot into the Athena (Trino) dialect, so the two engines never drift apart. The views select columns
as they are, so their types are the tables' (docs/types.md); `athena_type` names a column type for Glue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

import structlog

from cdc.merge import TRUNCATE, Relations, overlay_sql
from cdc.scd2 import VERSION_COLUMNS, history_sql, tracked
from pipeline.config.settings import PipelineConfig
from tables.append import iceberg_table, nullable, spark_schema
from tables.lake import java_class, lake_table, table_names
from tables.names import quote, sql_string
from tables.history import mirror_history_columns
from tables.pending import pending_columns

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType

log = structlog.get_logger(__name__)

LATEST_RANK = "_latest_rank"
# The first truncate after a key's newest change, and its rank among the truncates after it (`latest_change_view`).
TRUNCATE_SEQ, TRUNCATE_TS, TRUNCATE_RANK = "_truncate_seq", "_truncate_ts", "_truncate_rank"


@dataclass(frozen=True)
class ViewSpec:
    namespace: str
    name: str  # the view's name, e.g. moma_artists_current
    table: str  # the table it reads, in the same namespace
    body: Callable[[Relations], str]  # its Spark SQL over the table's identifier (and its pending table's)
    pending_namespace: str | None = None  # where the table's pending table is (`tables/pending.py`), if it has one
    columns: tuple[str, ...] | None = None  # the table's columns the view gives, in order; None: all (`SELECT *`)

    def select(self, table_ref: str, pending_ref: str | None = None) -> str:
        return self.body(Relations(table_ref, pending_ref or ""))

    def select_in(self, catalog: str | None) -> str:
        """The view's query over its tables in `catalog` (None: the session catalog)."""
        where = (catalog, self.namespace) if catalog else (self.namespace,)
        pending = (catalog, self.pending_namespace) if catalog else (self.pending_namespace,)
        return self.select(quote(*where, self.table), quote(*pending, self.table) if self.pending_namespace else None)

    def spark_ddl(self, catalog: str | None) -> str:
        """`CREATE OR REPLACE VIEW` in `catalog` (None: the session catalog, e.g. for Delta path tables)."""
        where = (catalog, self.namespace) if catalog else (self.namespace,)
        return f"CREATE OR REPLACE VIEW {quote(*where, self.name)} AS {self.select_in(catalog)}"

    def athena_ddl(self) -> str:
        """The view in Athena's dialect, over the Glue database named like the namespace."""
        return athena_sql(self.spark_ddl(None))

    def athena_select(self) -> str:
        """The view's query in Athena's dialect: what Athena runs when the view is read, without the view."""
        pending = quote(self.pending_namespace, self.table) if self.pending_namespace else None
        return athena_sql(self.select(quote(self.namespace, self.table), pending))


def athena_sql(spark_sql: str) -> str:
    """Spark SQL over `namespace.table` names in Athena's (Trino's) dialect, as the views are rendered."""
    import sqlglot

    # Every identifier quoted: Athena wants names that start with `_` (the pipeline's columns) in quotes.
    return sqlglot.transpile(spark_sql, read="spark", write="athena", identify=True)[0]


def athena_type(kind: DataType) -> str:
    """A Spark column type as Glue and Athena name it: Spark's `timestamp_ntz` (a source `timestamp`) is their
    `timestamp`, which has no zone either; the other types are spelled the same."""
    return re.sub(r"\btimestamp_ntz\b", "timestamp", kind.simpleString())


def mirror_views(cfg: PipelineConfig, table: str, overlay_columns: list[str] | None = None,
                 history_columns: list[str] | None = None) -> list[ViewSpec]:
    """The two views of a mirror; with `overlay_columns` (the mirror's columns, when it is in the pending
    layout) they read the overlay of its base and pending tables, the current state. An SCD2 mirror (its change
    columns in `history_columns`) has three (`history_views`)."""
    if history_columns is not None:
        return history_views(cfg, table, history_columns, overlay_columns is not None)
    namespace, current, deleted = cfg.mirror.namespace, cfg.mirror.view_suffix, cfg.mirror.deleted_view_suffix
    keys, mode = cfg.mirror.key_columns(table), cfg.mirror.delete_mode

    def state(on: Relations) -> str:
        return on.table if overlay_columns is None else f"({overlay_sql(overlay_columns, keys, mode, on)}) m"

    pending = None if overlay_columns is None else cfg.mirror.pending_namespace
    columns = None if overlay_columns is None else tuple(overlay_columns)
    return [
        ViewSpec(namespace, f"{table}{current}", table, lambda on: f"SELECT * FROM {state(on)} WHERE NOT _is_deleted",
                 pending, columns),
        ViewSpec(namespace, f"{table}{deleted}", table, lambda on: f"SELECT * FROM {state(on)} WHERE _is_deleted",
                 pending, columns),
    ]


def views_of_mirror(cfg: PipelineConfig, spark: SparkSession, name: str) -> list[ViewSpec]:
    """Mirror `name`'s views as the lake has it: over the overlay in the pending layout, versions for SCD2."""
    return mirror_views(cfg, name, pending_columns(cfg, spark, name), mirror_history_columns(cfg, spark, name))


def history_views(cfg: PipelineConfig, table: str, columns: list[str], pending: bool) -> list[ViewSpec]:
    """The views of an SCD2 mirror (`tables/history.py`): `<t>_current` and `<t>_deleted` over its current
    versions, and `<t>_history`, every version; in the pending layout over the overlay of its base and pending
    changes (`cdc.scd2.history_sql`)."""
    settings = cfg.mirror
    listed = ", ".join(quote(c) for c in (*columns, *VERSION_COLUMNS))
    keys = settings.key_columns(table)
    changing = tracked(columns, keys, *settings.history_columns(table))

    def state(on: Relations) -> str:
        return f"({history_sql(columns, keys, changing, on)}) m" if pending else on.table

    pending_namespace, given = settings.pending_namespace if pending else None, (*columns, *VERSION_COLUMNS)
    return [
        ViewSpec(settings.namespace, f"{table}{settings.view_suffix}", table,
                 lambda on: f"SELECT {listed} FROM {state(on)} WHERE _is_current AND NOT _is_deleted",
                 pending_namespace, given),
        ViewSpec(settings.namespace, f"{table}{settings.deleted_view_suffix}", table,
                 lambda on: f"SELECT {listed} FROM {state(on)} WHERE _is_current AND _is_deleted", pending_namespace,
                 given),
        ViewSpec(settings.namespace, f"{table}{settings.history_view_suffix}", table,
                 lambda on: f"SELECT {listed} FROM {state(on)}", pending_namespace, given),
    ]


def latest_change_view(cfg: PipelineConfig, table: str, keys: list[str], columns: list[str]) -> ViewSpec:
    """The newest change per key, with the table's truncates applied as the mirror applies them (`truncated`): a
    key live in its newest change shows as deleted by the first truncate after that change. Columns are listed,
    not `*`, so the ranks stay out of the view; new columns need the view replaced, which the mirror stage does
    when it sees them."""
    partition = ", ".join(quote(k) for k in keys)
    older = ("c._seq.source_major < t._seq.source_major OR (c._seq.source_major = t._seq.source_major "
             "AND c._seq.source_minor < t._seq.source_minor)")
    by_truncate = {"_op": sql_string(TRUNCATE), "_is_deleted": "true", "_seq": TRUNCATE_SEQ,
                   "_source_ts": TRUNCATE_TS}
    listed = ", ".join(f"CASE WHEN {TRUNCATE_SEQ} IS NOT NULL THEN {by_truncate[c]} ELSE {quote(c)} END AS {quote(c)}"
                       if c in by_truncate else quote(c) for c in columns)

    def body(on: Relations) -> str:
        changes = (f"SELECT *, row_number() OVER (PARTITION BY {partition} ORDER BY _seq DESC) AS {LATEST_RANK} "
                   f"FROM {on.table} WHERE _op <> {sql_string(TRUNCATE)}")
        truncates = f"SELECT _seq, _source_ts FROM {on.table} WHERE _op = {sql_string(TRUNCATE)}"
        in_order = "t._seq.source_major, t._seq.source_minor"
        paired = (f"SELECT c.*, t._seq AS {TRUNCATE_SEQ}, t._source_ts AS {TRUNCATE_TS}, row_number() OVER "
                  f"(PARTITION BY {', '.join(f'c.{quote(k)}' for k in keys)} ORDER BY {in_order}) AS {TRUNCATE_RANK} "
                  f"FROM ({changes}) c LEFT JOIN ({truncates}) t ON NOT c._is_deleted AND ({older}) "
                  f"WHERE c.{LATEST_RANK} = 1")
        return f"SELECT {listed} FROM ({paired}) p WHERE {TRUNCATE_RANK} = 1"

    return ViewSpec(cfg.changelog.namespace, f"{table}{cfg.mirror.latest_view_suffix}", table, body,
                    columns=tuple(columns))


def table_views(cfg: PipelineConfig, table: str, keys: list[str], changelog_columns: list[str],
                overlay_columns: list[str] | None = None, history_columns: list[str] | None = None) -> list[ViewSpec]:
    """Every view of one source table: its mirror's (see `mirror_views`) and its changelog's one."""
    return [*mirror_views(cfg, table, overlay_columns, history_columns),
            latest_change_view(cfg, table, keys, changelog_columns)]


def replace_views(spark: SparkSession, catalog: str | None, views: list[ViewSpec],
                  schemas: Mapping[str, StructType] | None = None) -> None:
    """`CREATE OR REPLACE VIEW` each of `views` in `catalog`. An Iceberg catalog's are replaced through its view
    API (jvm/cdc `Views`) with the types of the columns they give read from the tables they read: analysing a
    mirror's overlay took Catalyst ~0.2 s a view, three views a new mirror. `schemas` (a table's reference, as
    `quote` writes it, -> its Spark columns) spares the lookup of the tables the caller knows. The session
    catalog's (None: Delta path tables' views) by the statement."""
    from pyspark.sql.types import StructType

    if catalog is None:
        for view in views:
            spark.sql(view.spark_ddl(None))
        return
    tables = {ref: nullable(schema) for ref, schema in (schemas or {}).items()}
    for view in views:
        ref = quote(catalog, view.namespace, view.table)
        if ref not in tables:
            tables[ref] = nullable(spark_schema(spark, iceberg_table(spark, ref)))
        fields = {f.name: f for f in tables[ref].fields}
        schema = tables[ref] if view.columns is None else StructType([fields[c] for c in view.columns])
        java_class(spark, "cdc.spark.Views").replace(spark._jsparkSession, catalog, view.namespace, view.name,
                                                     view.select_in(catalog), schema.json())


def _no_key(table: str, view: str) -> None:
    log.warning("views.no_key", table=table, skipped=view, fix=f"set mirror.keys.{table} = '<column>[,<column>…]'")


def lake_views(cfg: PipelineConfig, spark: SparkSession) -> list[ViewSpec]:
    """Every view of the lake: two per mirror, and the latest-change view of each changelog table whose key
    is configured (`mirror.keys.<table>`)."""
    views = []
    for name in table_names(cfg, spark, cfg.mirror.namespace):
        overlay = pending_columns(cfg, spark, name)
        if overlay is not None and not cfg.mirror.key_columns(name):  # the overlay matches rows by key
            _no_key(name, f"{name}{cfg.mirror.view_suffix}")
            continue
        views += mirror_views(cfg, name, overlay, mirror_history_columns(cfg, spark, name))
    for name in table_names(cfg, spark, cfg.changelog.namespace):
        if name == cfg.changelog.dead_letter_table:
            continue
        keys = cfg.mirror.key_columns(name)
        if not keys:
            _no_key(name, f"{name}{cfg.mirror.latest_view_suffix}")
            continue
        columns = [f.name for f in lake_table(cfg, spark, cfg.changelog.namespace, name).fields()]
        views.append(latest_change_view(cfg, name, keys, columns))
    return views
