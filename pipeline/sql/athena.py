"""`pipeline athena-ddl`: the Athena statements that make the lake's tables and views queryable from Athena.

Athena reads tables through the Glue Data Catalog, one Glue database per namespace (`changelog`, `mirror`):
- Iceberg tables in Glue mode are there already: the stages create them through Iceberg's Glue catalog.
  From another catalog they are named with the Spark call that registers them in Glue (Athena has no DDL
  that adopts an existing Iceberg table).
- Delta tables are registered the way Athena reads Delta natively: an external table at the table's folder
  with `table_type = 'DELTA'`; Athena takes the columns from the Delta log. With `lake.delta_glue` the
  stages have registered them already (`tables/glue_delta.py`).
- The views of `tables/views.py`, transpiled into Athena's dialect. A mirror in the pending layout is two Iceberg
  tables (format version 2, which Athena reads), its base and its pending changes, and its views are the overlay
  of the two (`max_by` over a row, as Trino spells it): Athena reads the current state from the views. An SCD2
  mirror's views (`<t>_current`, `<t>_deleted`, `<t>_history`) rebuild its pending keys' versions the same way.
- Time travel examples on Iceberg tables, pinned to the current snapshot (Athena has no Delta time travel).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.config.settings import PipelineConfig
from tables.glue_delta import s3_location
from tables.lake import table_names
from tables.names import quote, sql_string
from tables.pending import pending_table
from tables.views import lake_views

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Statement:
    comment: str
    sql: str | None  # None: a note only

    def text(self) -> str:
        note = "\n".join(f"-- {line}" for line in self.comment.splitlines())
        return f"{note}\n{self.sql};" if self.sql else note


def athena_statements(cfg: PipelineConfig, spark: SparkSession) -> list[Statement]:
    namespaces = (cfg.changelog.namespace, cfg.mirror.namespace)
    if cfg.lake.format == "iceberg":
        namespaces += (cfg.mirror.pending_namespace,)
    statements = [Statement(f"Glue database of the {ns} tables", f"CREATE DATABASE IF NOT EXISTS {quote(ns)}")
                  for ns in namespaces]
    for namespace in namespaces:
        for name in table_names(cfg, spark, namespace):
            statements.append(_registration(cfg, spark, namespace, name))
    statements += [Statement(f"view {v.namespace}.{v.name}", v.athena_ddl()) for v in lake_views(cfg, spark)]
    if cfg.lake.format == "iceberg":
        statements += [example for name in table_names(cfg, spark, cfg.mirror.namespace)
                       for example in _time_travel_examples(cfg, spark, name)]
    return statements


def _registration(cfg: PipelineConfig, spark: SparkSession, namespace: str, name: str) -> Statement:
    if cfg.lake.format == "delta" and cfg.lake.delta_glue:
        return Statement(f"Delta table {namespace}.{name}: in Glue already (table_type=DELTA, lake.delta_glue)", None)
    if cfg.lake.format == "delta":
        location = s3_location(f"{cfg.lake.delta_root}/{namespace}/{name}")
        return Statement(f"Delta table {namespace}.{name}: Athena reads its columns from the Delta log",
                         f"CREATE EXTERNAL TABLE {quote(namespace, name)} LOCATION {sql_string(location)} "
                         "TBLPROPERTIES ('table_type' = 'DELTA')")
    if cfg.catalog.type == "glue":
        return Statement(f"Iceberg table {namespace}.{name}: in Glue already (table_type=ICEBERG)", None)
    metadata = spark.sql(f"SELECT file FROM {quote(cfg.catalog.name, namespace, name)}.metadata_log_entries "
                         "ORDER BY timestamp DESC LIMIT 1").first()
    return Statement(
        f"Iceberg table {namespace}.{name} is in the {cfg.catalog.type} catalog, which Athena does not read.\n"
        "Write to Glue (catalog.type = 'glue'), or register it in a Glue catalog from Spark:\n"
        f"CALL <glue catalog>.system.register_table(table => '{namespace}.{name}', "
        f"metadata_file => '{metadata['file'] if metadata else '<metadata file>'}')", None)


def _time_travel_examples(cfg: PipelineConfig, spark: SparkSession, name: str) -> list[Statement]:
    ref = quote(cfg.catalog.name, cfg.mirror.namespace, name)
    current = spark.sql(f"SELECT snapshot_id, committed_at FROM {ref}.snapshots "
                        "ORDER BY committed_at DESC LIMIT 1").first()
    if current is None:
        return []
    table = quote(cfg.mirror.namespace, name, mark='"')  # Athena quotes with backticks in DDL, double quotes in queries
    # In the pending layout the table is the base: a past commit of it is the state as of a fold.
    base = ", the state its last fold wrote" if pending_table(cfg, spark, name) is not None else ""
    at = current["committed_at"].strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    # An SCD2 mirror holds every version: its state then is its current versions then.
    live = '"_is_current" AND NOT "_is_deleted"' if cfg.mirror.scd_type_of(name) == 2 else 'NOT "_is_deleted"'
    return [
        Statement(f"{cfg.mirror.namespace}.{name} as of a time (its latest commit{base})",
                  f"SELECT * FROM {table} FOR TIMESTAMP AS OF TIMESTAMP '{at} UTC' WHERE {live}"),
        Statement(f"{cfg.mirror.namespace}.{name} as of a snapshot id (its latest commit{base})",
                  f"SELECT * FROM {table} FOR VERSION AS OF {current['snapshot_id']} WHERE {live}"),
    ]


def athena_ddl(cfg: PipelineConfig, spark: SparkSession) -> str:
    return "\n\n".join(statement.text() for statement in athena_statements(cfg, spark)) + "\n"
