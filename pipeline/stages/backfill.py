"""`pipeline backfill`: a PostgreSQL table's rows landed in its changelog table as a snapshot, then its mirror.

A table's CDC stream carries what changes from the moment its connector starts; the rows the table already
held come from a snapshot. Debezium can take it (its `r` events, through Kafka), or, with the connector started
with `snapshot.mode=no_data`, the backfill reads the table itself (`pipeline/sources/postgres_snapshot.py`) in
batches of key ranges, one task a range. Each batch is one idempotent commit to the changelog table (`tables/
append.py`) that records the last key it read, so a killed backfill resumes after its last commit and
lands no row twice. Its rows are snapshot reads (`_op = 'r'`, `_seq.source_major = 0`): every streamed change
orders after them, so the changelog stage may land the stream before, during or after the backfill. Then the
mirror runs for the table: its first build when it is empty (docs/real-sources.md).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from cdc.columns import lake_column
from cdc.normalize import SNAPSHOT_MAJOR, record_columns, source_struct
from pipeline.config.settings import PipelineConfig
from pipeline.sources.postgres_snapshot import Bound, KeyRange, PostgresSnapshot, SourceColumn, TableShape
from pipeline.stages.changelog.landing import changelog_appender, changelog_owners, stamped
from pipeline.stages.mirror import MirrorStage, TableReport
from tables.append import COMMIT_PROPERTY, SOURCE_PROPERTY
from tables.backfill_state import DONE, KEYS_ONCE, RUNNING, THROUGH, backfill_property, backfill_state, one_pass
from tables.first_build import is_first_build
from tables.keys import keys_property
from tables.lake import IcebergLakeTable, create_namespace, lake_table
from tables.names import SourceTable, UnmappableName, column, quote, sql_string
from tables.pending import pending_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = structlog.get_logger(__name__)

WRITER = "backfill"  # the writer id of its commits: `pipeline.commit = backfill:<batch>`
FORMAT = "backfill"  # `_source.format` of its rows
# A row's transport partition (its batch) and offset, made before its record, under names no source column has
ROW_PARTITION, ROW_OFFSET = "_row_partition", "_row_offset"
# A commit's properties: the last key it read (JSON texts), whether it read the last range, the rows before it
AFTER, COMPLETE, ROWS_BEFORE = (f"pipeline.backfill.{name}" for name in ("after", "complete", "rows-before"))


class BackfillError(RuntimeError):
    """A backfill that must not start or go on: the message names the table, the reason and the fix."""


@dataclass(frozen=True)
class Position:
    """How far a backfill got, as its last commit records it."""

    batch: int  # the next batch's id
    after: Bound | None  # the last key landed: the next batch reads the keys after it (None: from the first)
    rows: int  # rows landed so far
    complete: bool = False  # every key the table held when the backfill began is landed

    def committed(self) -> dict[str, str]:
        """The properties of the commit that reaches it (`rows` are those before that commit: its own are
        counted as it writes them, and Iceberg records them as `added-records`)."""
        return {AFTER: json.dumps(self.after), COMPLETE: str(self.complete).lower(), ROWS_BEFORE: str(self.rows)}


@dataclass(frozen=True)
class BackfillReport:
    table: str  # the lake table
    rows: int  # snapshot rows in the changelog, all runs together
    landed: int  # of them, landed by this run
    seconds: float  # this run's landing
    mirror: list[TableReport]

    def line(self) -> str:
        rate = f", {self.landed / self.seconds:,.0f} rows/s" if self.landed and self.seconds else ""
        return f"{self.table}: {self.rows:,} snapshot rows in the changelog ({self.landed:,} landed now{rate})"


class Backfill:
    """The backfill of one source table, `<prefix>.<schema>.<table>` as its Debezium topic names it."""

    def __init__(self, cfg: PipelineConfig, spark: SparkSession, topic: str) -> None:
        source = SourceTable.of_topic(topic)
        if not source.schema:
            raise BackfillError(f"--table {topic!r}: give the table as its Debezium topic names it, "
                                "<prefix>.<schema>.<table> (e.g. dbserver1.public.customers)")
        if cfg.lake.format != "iceberg":
            raise BackfillError("backfill lands Iceberg changelog tables (lake.format = 'iceberg'); with Delta, let "
                                "the connector take the snapshot (Debezium's snapshot.mode=initial)")
        self.cfg, self.spark, self.source = cfg, spark, source
        self.where = f"{source.schema}.{source.table}"  # as the database names it
        create_namespace(spark, cfg.catalog.name, cfg.changelog.namespace)
        try:
            self.name = changelog_owners(cfg, spark).claim(source)  # its lake name; refused when another source table holds that table
        except UnmappableName as exc:
            raise BackfillError(f"{source}: {exc}") from None
        self.snapshot = PostgresSnapshot(spark, cfg.backfill, source.schema, source.table)
        self.table = lake_table(cfg, spark, cfg.changelog.namespace, self.name)
        self.appender = changelog_appender(cfg, spark)

    def run(self, restart: bool = False) -> BackfillReport:
        """Land the snapshot batch by batch from where the last run stopped (from the first key again with
        `restart`), mark the table backfilled, then run the mirror for it."""
        shape = self.snapshot.shape()
        key = self._key(shape)
        unsupported = [f"{c.name} ({c.type_name})" for c in shape.columns if not c.supported]
        if unsupported:
            raise BackfillError(f"{self.where} has columns backfill cannot read as their Debezium changes land: "
                                f"{', '.join(unsupported)}: let the connector take this table's snapshot "
                                "(snapshot.mode=initial)")
        started = time.monotonic()
        once = one_pass(self.table.properties() if self.table.exists() else None, restart)
        position, ranges = self._position(shape, key, restart)
        first_rows = position.rows
        if position.complete:
            log.info("backfill.landed", table=self.name, rows=position.rows, note="nothing left to read")
        else:
            log.info("backfill.start", table=self.name, source=str(self.source), key=[c.name for c in key],
                     ranges=len(ranges), rows_per_range=self._per_range(), after=position.after)
            if self.table.exists():  # else its first batch creates it so
                self.table.set_properties(backfill_property(RUNNING, **{KEYS_ONCE: once}))
            position = self._land(shape, key, ranges, position)
        if self.table.exists():
            self._finish(position, once)
        seconds = time.monotonic() - started
        mirror = MirrorStage(self.cfg, self.spark).run_once([self.name]) if self.table.exists() else []
        return BackfillReport(self.name, position.rows, position.rows - first_rows, seconds, mirror)

    def _finish(self, position: Position, once: bool) -> None:
        """Mark the table backfilled: its rows, and whether they are the pass's alone (`keys_once`), as of the
        commit it ends at. The table holding exactly the rows the pass landed rules out any other writer's, even
        one whose commits have expired."""
        through = self.table.commit_id()
        alone = once and through is not None and self.table.records_added(None, through) == position.rows
        finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.table.set_properties(backfill_property(DONE, rows=position.rows, finished_at=finished,
                                                    **{KEYS_ONCE: alone, THROUGH: str(through)}))

    # -- the plan ------------------------------------------------------------------------------------

    def _key(self, shape: TableShape) -> list[SourceColumn]:
        """The key the ranges and the mirror follow: `mirror.keys.<table>` when set, else the primary key. It
        must be unique and never null in the source (a primary key, or a unique index on exactly those columns,
        all NOT NULL): else two rows could become one, or a row fall outside every range."""
        table = self.name
        by_lake_name = {lake_column(c.name): c for c in shape.columns}
        configured = self.cfg.mirror.key_columns(table)
        if not configured:
            if not shape.primary_key:
                raise BackfillError(f"{self.where} has no primary key, so its mirror cannot tell its rows apart: add "
                                    f"one, or set mirror.keys.{table} to the columns of a unique index")
            return [shape.column(name) for name in shape.primary_key]
        key = [by_lake_name[name] for name in configured if name in by_lake_name]
        unique = [[lake_column(c) for c in columns] for columns in shape.unique_keys]
        if len(key) < len(configured) or not any(set(columns) == set(configured) for columns in unique):
            choices = "; ".join(", ".join(columns) for columns in unique) or "none"
            raise BackfillError(f"mirror.keys.{table} = {', '.join(configured)} is not unique in {self.where}: no "
                                "primary key or unique index covers exactly these columns, so two of its rows could "
                                "share a key and the mirror would keep one. Add a unique index on them, or set "
                                f"mirror.keys.{table} to the columns of one (unique in {self.where}: {choices})")
        nullable = [c.name for c in key if not c.not_null]
        if nullable:
            raise BackfillError(f"mirror.keys.{table}: {', '.join(nullable)} may be null in {self.where}, and a row "
                                f"with a null key has no place in the key's order: make them NOT NULL, or use the "
                                "primary key")
        return key

    def _position(self, shape: TableShape, key: list[SourceColumn], restart: bool) -> tuple[Position, list[KeyRange]]:
        """Where this run starts (after the last key a backfill commit landed, or at the first key) and the key
        ranges it reads: every key the table holds now after that one, `backfill.batch_rows` a batch."""
        exists = self.table.exists()
        last = self._last_commit() if exists else None
        state = backfill_state(self.table.properties() if exists else {})
        if not restart and (state.get("state") == DONE or (last is not None and last.complete)):
            rows = int(state["rows"]) if state.get("state") == DONE else last.rows  # type: ignore[union-attr, call-overload]
            return Position(last.batch if last else 0, None, rows, complete=True), []
        if exists and last is None and not restart:
            self._refuse_a_table_with_rows()
        batch, after, rows = (0, None, 0) if last is None else (last.batch, None if restart else last.after, last.rows)
        bounds = self.snapshot.bounds(key, self._per_range(), after)
        return Position(batch, after, rows, complete=not bounds), _ranges(bounds, after)

    def _last_commit(self) -> Position | None:
        """The position the newest backfill commit of the table records, with the next batch's id."""
        snapshots = quote(self.cfg.catalog.name, self.cfg.changelog.namespace, self.name, "snapshots")
        found = self.spark.sql(f"SELECT summary FROM {snapshots} WHERE summary[{sql_string(COMMIT_PROPERTY)}] LIKE "
                               f"{sql_string(WRITER + ':%')} ORDER BY committed_at DESC LIMIT 1").collect()
        if not found:
            return None
        summary = found[0]["summary"]
        batch = int(summary[COMMIT_PROPERTY].rpartition(":")[2])
        rows = int(summary[ROWS_BEFORE]) + int(summary.get("added-records") or 0)
        return Position(batch + 1, json.loads(summary[AFTER]), rows, complete=summary[COMPLETE] == "true")

    def _refuse_a_table_with_rows(self) -> None:
        """Before a backfill's first batch: a changelog table holding its CDC tool's snapshot reads has the table's
        rows already, and a mirror merged from the stream alone would take the snapshot rows after the streamed
        changes they should come before (`tables/backfill_state.py`)."""
        theirs = self.table.read().where(f"_op = 'r' AND _source.format <> {sql_string(FORMAT)}").limit(1).count()
        if theirs:
            raise BackfillError(f"changelog table {self.name} already holds a snapshot of {self.source} from its CDC "
                                "tool (snapshot reads, _op = 'r'), and its mirror is built from it: a backfill would land "
                                "the table's rows a second time. Backfill the tables whose connector streams without a "
                                "snapshot (Debezium's snapshot.mode=no_data)")
        mirror = lake_table(self.cfg, self.spark, self.cfg.mirror.namespace, self.name)
        pending = pending_table(self.cfg, self.spark, self.name)
        if isinstance(mirror, IcebergLakeTable) and mirror.exists() and not is_first_build(mirror, pending):
            also = f" and its pending table {pending.ref}" if pending is not None else ""
            raise BackfillError(f"mirror table {mirror.ref} already holds rows merged from {self.source}'s stream "
                                "without its snapshot, so the snapshot's rows would come after the changes they precede "
                                "(and a streamed update that left a TOASTed value out found no value to keep). Drop "
                                f"{mirror.ref}{also} (the changelog stays), then run the backfill again: its last step "
                                "builds the mirror from the whole changelog")

    def _tasks(self) -> int:
        return self.spark.sparkContext.defaultParallelism

    def _per_range(self) -> int:
        """Rows a key range holds: a batch reads one range a task."""
        return max(1, self.cfg.backfill.batch_rows // self._tasks())

    # -- the batches ---------------------------------------------------------------------------------

    def _land(self, shape: TableShape, key: list[SourceColumn], ranges: list[KeyRange], position: Position) -> Position:
        """Read and commit batch after batch, a range a task, logging rows, rate and ETA."""
        tasks, started, landed = self._tasks(), time.monotonic(), 0
        for first in range(0, len(ranges), tasks):
            batch = ranges[first:first + tasks]
            rows = self._changes(self.snapshot.read(shape.columns, key, batch), shape, position.batch)
            done = Position(position.batch + 1, batch[-1][1], position.rows, complete=first + tasks >= len(ranges))
            appended = self.appender.append(
                rows, self.name, WRITER, position.batch, properties=done.committed(),
                created=lambda: {SOURCE_PROPERTY: str(self.source), **keys_property([lake_column(c.name) for c in key]),
                                 **backfill_property(RUNNING, **{KEYS_ONCE: True})}).rows
            landed += appended
            position = Position(done.batch, done.after, position.rows + appended, done.complete)
            elapsed, read = time.monotonic() - started, min(first + tasks, len(ranges))
            log.info("backfill.batch", table=self.name, batch=done.batch - 1, rows=appended, rows_total=position.rows,
                     ranges=f"{read}/{len(ranges)}", rows_per_s=round(landed / elapsed) if elapsed else None,
                     eta_s=round(elapsed * (len(ranges) - read) / read))
        return position

    def _changes(self, rows: DataFrame, shape: TableShape, batch: int) -> DataFrame:
        """The snapshot's rows as change records, stamped with the batch (`stamped`): snapshot reads of the source
        table, ordered before every streamed change (and among themselves by batch, then row). The batch and the
        time come from the stamp's columns, not literals, so every batch runs the same generated code. The row's
        partition and offset are made in a projection of their own, below the record's: an offset is
        nondeterministic and `_seq` and `_transport` both take it, so Spark kept the record's projection apart from
        the one that framed the row, and built the `row` struct (which keeps the source's columns apart from the
        transport's names) for every row only to take it apart again (docs/benchmarks.md, the initial load)."""
        from pyspark.sql import functions as F

        numbered = stamped(rows, batch).select("*", F.col("_batch_id").cast("int").alias(ROW_PARTITION),
                                               F.monotonically_increasing_id().alias(ROW_OFFSET))
        framed = numbered.select(
            F.struct(*[column(name) for name in rows.columns]).alias("row"),
            F.lit(None).cast("string").alias("topic"), F.col(ROW_PARTITION).alias("partition"),
            F.col(ROW_OFFSET).alias("offset"), F.col("_ingested_at").alias("timestamp"),
            F.lit(None).cast("string").alias("schema_id"), "_ingested_at", "_batch_id")
        meta = {
            "_op": F.lit("r"), "_deleted": F.lit(False), "_source_ts": F.col("timestamp"),
            "_seq_major": F.lit(SNAPSHOT_MAJOR), "_seq_minor": F.lit(0),
            "_source": source_struct(FORMAT, F.lit("postgresql"), F.lit(shape.database), F.lit(self.source.schema),
                                     F.lit(self.source.table), F.lit(None), F.lit(True)),
        }
        return framed.select(*[F.col("row")[name].alias(name) for name in rows.columns],
                             *record_columns(meta, framed.schema, F.array().cast("array<string>")),
                             "_ingested_at", "_batch_id")


def _ranges(bounds: list[Bound], after: Bound | None) -> list[KeyRange]:
    """The key ranges the upper bounds make: after `after` up to the first, then after each up to the next."""
    return [(bounds[i - 1] if i else after, bound) for i, bound in enumerate(bounds)]
