"""`pipeline verify`: a mirror (now) or a rebuilt state (as of a source time) against the simulator's truth.

An SCD2 mirror is compared version by version (`verify_history`, the truth's `versions`). With `engine="trino"`
the mirror is read by Trino (Athena's engine) through its views' SQL as Athena runs it (`mirror_rows`), so what
an Athena user will see is what is checked. The truth's rows take the table's own types, and a match on the
key finds rows missing from the lake, rows the source does not have, and rows whose values differ: on the
driver for a table of a few thousand rows (a database's hundreds of tables: no join to plan a table), by a
full outer join in Spark for a larger one.
Columns the truth row does not carry (written before a column existed) must be null in the lake. A truth
value of a semantic type (a `MicroTimestamp`'s long) is compared as the lake type it lands as
(`simulators/semantic.py`), where the lake column has that type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Callable, Literal

from cdc.columns import source_column, source_columns
from pipeline.config.settings import PipelineConfig
from pipeline.runtime.sessions import SessionPool
from pipeline.sql.trino_query import fetch
from pipeline.stages.mirror import MirrorError, table_keys, with_table_keys
from simulators.semantic import lake_value
from simulators.truth import TruthStore
from tables.history import tracked_columns
from tables.lake import lake_table, table_names
from tables.names import LakeNames, column, quote
from tables.pending import mirror_state
from tables.views import views_of_mirror

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

Engine = Literal["spark", "trino"]  # what reads the mirrors
MAX_REPORTED = 50  # mismatches listed per table; all are counted
DRIVER_ROWS = 20_000  # a table of at most this many source rows is compared on the driver, not by a join
# An SCD2 version's number (per key, from 1), boundaries (ms) and deletion, as compared with the truth's.
HISTORY_COLUMNS = ("scd2_version", "scd2_valid_from_ms", "scd2_valid_to_ms", "scd2_deleted")


@dataclass(frozen=True)
class Mismatch:
    kind: Literal["missing", "extra", "differs"]  # missing: in the source, not in the lake; extra: the opposite
    key: tuple
    columns: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # column -> (lake, source)

    def line(self) -> str:
        if self.kind != "differs":
            return f"  {self.kind:<8} key {self.key}"
        diffs = ", ".join(f"{c}: lake={lake!r} source={src!r}" for c, (lake, src) in self.columns.items())
        return f"  differs  key {self.key}: {diffs}"


@dataclass(frozen=True)
class TableVerdict:
    table: str
    truth_table: str
    rows: int  # rows the source holds
    mismatches: int
    examples: list[Mismatch]

    def lines(self) -> list[str]:
        head = f"{self.table} vs {self.truth_table}: {self.rows} source rows, {self.mismatches} mismatches"
        return [head, *[m.line() for m in self.examples]]


def truth_table_for(truth: TruthStore, table: str, names: LakeNames) -> str:
    """The truth's `<db>.<schema>.<table>` for a lake table (its db part may be a topic prefix, so it is not
    compared): the one whose schema and table `names.tables` maps to it, else the one whose `_<table>` ends its
    name, and of several those whose `_<schema>_<table>` does (`names.with_schema`)."""
    tables = truth.tables()
    mapped = {source.split(".", 1)[1] for source, name in names.tables.items() if name == table}
    if mapped:
        candidates = [name for name in tables if name.split(".", 1)[1] in mapped]
    else:
        candidates = [name for name in tables if table.endswith("_" + name.rsplit(".", 1)[-1])]
        if len(candidates) > 1:
            apart = [name for name in candidates if table.endswith("_" + name.split(".", 1)[1].replace(".", "_"))]
            candidates = apart or candidates
    if len(candidates) != 1:
        found = ", ".join(tables) or "none"
        raise ValueError(f"table {table} matches {len(candidates)} truth tables (the truth has: {found}); "
                         "verify tables named <db>_<table> or <db>_<schema>_<table> after the source table, or "
                         "named in names.tables")
    return candidates[0]


def source_time_us(source_time: str) -> int:
    """An ISO timestamp (UTC unless it names a zone) as microseconds since the epoch, as the truth keeps time."""
    parsed = datetime.fromisoformat(source_time)
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return int(parsed.timestamp() * 1_000_000)


def compare(spark: SparkSession, lake: DataFrame, truth_rows: dict[Any, dict[str, Any]], keys: list[str],
            table: str, truth_table: str, column_types: dict[str, Any] | None = None) -> TableVerdict:
    """Compare the lake's current rows (metadata columns ignored) with the truth's rows for one table, reading
    truth values by the source's `column_types` (the truth's `column_types`; none: as they are). The truth names
    columns as the source does, the lake as `cdc/columns.py` does. A table of at most `DRIVER_ROWS` source rows is
    compared on the driver (one scan of the lake's side): a join a table cost a database's `verify` ~1 s a table;
    a larger one by a full outer join in Spark."""
    columns = source_columns(lake.columns)
    lake = lake.selectExpr(*map(quote, columns))  # one py4j call, not one a column
    schema = lake.schema
    readers = _lake_readers(schema, column_types or {})
    named = {c: source_column(c) for c in columns}
    expected = [tuple(None if row.get(named[c]) is None else readers[c](row[named[c]]) if c in readers
                      else row.get(named[c]) for c in columns) for row in truth_rows.values()]
    if len(expected) <= DRIVER_ROWS:
        found = _differences(lake.collect(), [_as_spark_returns(schema, row) for row in expected], columns, keys)
        total, examples = len(found), found[:MAX_REPORTED]
    else:
        total, examples = _joined_differences(spark.createDataFrame(expected, schema), lake, columns, keys)
    return TableVerdict(table, truth_table, len(truth_rows), total, examples)


def _as_spark_returns(schema: StructType, row: tuple) -> tuple:
    """A row as Spark returns it once stored with `schema` (times in the session's zone, as a collect gives
    them), so a Python comparison sees what a join in Spark would."""
    return tuple(schema.fromInternal(schema.toInternal(row)))


def _differences(lake_rows: list[Any], source_rows: list[tuple], columns: list[str], keys: list[str]
                 ) -> list[Mismatch]:
    """Every mismatch between rows of `columns` (the lake's and the source's), matched by `keys`."""
    at = [columns.index(k) for k in keys]
    lake = {tuple(row[i] for i in at): row for row in lake_rows}
    source = {tuple(row[i] for i in at): row for row in source_rows}
    found = [Mismatch("extra", key) for key in lake if key not in source]
    for key, row in source.items():
        held = lake.get(key)
        if held is None:
            found.append(Mismatch("missing", key))
            continue
        differs = {c: (held[i], row[i]) for i, c in enumerate(columns) if not _same(held[i], row[i])}
        if differs:
            found.append(Mismatch("differs", key, differs))
    return found


def _same(lake: Any, source: Any) -> bool:
    """Equal as Spark's `<=>` has it: NaN equals NaN."""
    return lake == source or (isinstance(lake, float) and isinstance(source, float)
                              and math.isnan(lake) and math.isnan(source))


def _joined_differences(expected: DataFrame, lake: DataFrame, columns: list[str], keys: list[str]
                        ) -> tuple[int, list[Mismatch]]:
    """`_differences` by a full outer join in Spark: how many, and the first `MAX_REPORTED`."""
    from pyspark.sql import functions as F

    lake_side = lake.select(*[column(c).alias(f"lake_{c}") for c in columns], F.lit(True).alias("_in_lake"))
    source_side = expected.select(*[column(c).alias(f"src_{c}") for c in columns], F.lit(True).alias("_in_src"))
    joined = lake_side.join(source_side, [column(f"lake_{k}") == column(f"src_{k}") for k in keys], "full_outer")
    differs = [F.when(~column(f"lake_{c}").eqNullSafe(column(f"src_{c}")), F.lit(c)) for c in columns]
    found = joined.select(
        "*",
        F.when(F.col("_in_src").isNull(), "extra").when(F.col("_in_lake").isNull(), "missing")
        .otherwise(F.when(F.size(F.array_compact(F.array(*differs))) > 0, "differs")).alias("_kind"),
        F.array_compact(F.array(*differs)).alias("_columns"),
    ).where("_kind IS NOT NULL")
    first = found.limit(MAX_REPORTED + 1).collect()  # the join runs once when nothing (or little) mismatches
    total = len(first) if len(first) <= MAX_REPORTED else found.count()
    examples = []
    for row in first[:MAX_REPORTED]:
        side = "src" if row["_kind"] == "missing" else "lake"
        key = tuple(row[f"{side}_{k}"] for k in keys)
        diffs = {c: (row[f"lake_{c}"], row[f"src_{c}"]) for c in row["_columns"]} if row["_kind"] == "differs" else {}
        examples.append(Mismatch(row["_kind"], key, diffs))
    return total, examples


def _lake_readers(schema: StructType, column_types: dict[str, Any]) -> dict[str, Callable[[Any], Any]]:
    """Per lake column whose truth values need reading as the lake's type, how: semantic types as the lake type
    they land as (by the column's Avro type, which the truth records), other decimals exactly (a truth float, or
    a decimal kept as text)."""
    from pyspark.sql.types import DecimalType

    readers: dict[str, Callable[[Any], Any]] = {}
    for f in schema.fields:
        reader = lake_value(column_types.get(source_column(f.name)), f.dataType.simpleString())
        if reader is None and isinstance(f.dataType, DecimalType):
            reader = _exact
        if reader is not None:
            readers[f.name] = reader
    return readers


def _exact(value: Any) -> Any:
    """A truth float, or decimal text, as the decimal the lake holds (DMS JSON numbers with a fraction are read
    as decimals)."""
    return Decimal(str(value)) if isinstance(value, (float, str)) else value


def mirror_rows(cfg: PipelineConfig, spark: SparkSession, name: str, engine: Engine) -> DataFrame:
    """What a reader of mirror `name` sees: its live rows (SCD1), or every version (SCD2), pending changes
    overlaid. Trino reads them through the SQL of the `_current` or `_history` view as Athena runs it; its rows
    come back as a DataFrame in the types Spark gives the same view."""
    history = cfg.mirror.scd_type_of(name) == 2
    if engine == "spark":
        state = mirror_state(cfg, spark, name)
        return state if history else state.where("NOT _is_deleted")
    suffix = cfg.mirror.history_view_suffix if history else cfg.mirror.view_suffix
    view = next(v for v in views_of_mirror(cfg, spark, name) if v.name == f"{name}{suffix}")
    pending = quote(cfg.catalog.name, view.pending_namespace, view.table) if view.pending_namespace else None
    schema = spark.sql(view.select(quote(cfg.catalog.name, view.namespace, view.table), pending)).schema
    _, rows = fetch(cfg, view.athena_select(), f"view {view.namespace}.{view.name} (its SQL as athena-ddl prints it)")
    return spark.createDataFrame(rows, schema)


def verify_lake(cfg: PipelineConfig, spark: SparkSession, truth: TruthStore, tables: list[str],
                source_time: str | None = None, engine: Engine = "spark") -> list[TableVerdict]:
    """Each mirror, read by `engine` (or, with `source_time`, each changelog rebuilt to that time by Spark)
    against the truth; `mirror.concurrent_tables` tables at a time, each in a thread and session of its own: a
    small table's check is mostly its reading's planning and job, which another table's can overlap."""
    namespace = cfg.changelog.namespace if source_time else cfg.mirror.namespace
    names = tables or [t for t in table_names(cfg, spark, namespace) if t != cfg.changelog.dead_letter_table]
    if not names:
        raise MirrorError(f"nothing to verify: namespace {namespace!r} has no tables; run the stages first")
    cfg, _ = with_table_keys(cfg, spark, names)
    truth.index()  # before the threads read it
    sessions = SessionPool(spark)
    return sessions.map(lambda name: verify_table(cfg, sessions.current, truth, name, source_time, engine), names,
                        cfg.mirror.concurrent_tables, "verify")


def verify_table(cfg: PipelineConfig, spark: SparkSession, truth: TruthStore, name: str, source_time: str | None,
                 engine: Engine) -> TableVerdict:
    """One table of `verify_lake`: its mirror (or its changelog rebuilt to `source_time`) against the truth."""
    from pipeline.ops.timetravel import state

    truth_table = truth_table_for(truth, name, cfg.names.rule())
    if source_time:
        lake = state(cfg, spark, name, source_time)
        expected = truth.state_at(truth_table, source_time_us(source_time))
        keys = table_keys(cfg, name, lake_table(cfg, spark, cfg.changelog.namespace, name))
        return compare(spark, lake, expected, keys, name, truth_table, truth.column_types(truth_table))
    mirror = lake_table(cfg, spark, cfg.mirror.namespace, name)
    if not mirror.exists():
        raise MirrorError(f"no mirror {mirror.ref}: run `pipeline mirror` first")
    keys = table_keys(cfg, name, mirror)
    lake = mirror_rows(cfg, spark, name, engine)
    if cfg.mirror.scd_type_of(name) == 2:
        return verify_history(cfg, truth, name, truth_table, keys, lake)
    return compare(spark, lake, truth.state_at(truth_table), keys, name, truth_table, truth.column_types(truth_table))


def verify_history(cfg: PipelineConfig, truth: TruthStore, name: str, truth_table: str, keys: list[str],
                   versions: DataFrame) -> TableVerdict:
    """An SCD2 mirror's `versions` against the versions the truth's changes make under the same rules: every
    version of every key, its values, whether it is a deletion, and its boundaries (`_valid_from`, `_valid_to`,
    to the millisecond, the precision of Debezium's source times), matched by key and the version's number."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    columns = source_columns(versions.columns)
    numbered = Window.partitionBy(*map(column, keys)).orderBy("_seq_from")
    lake = versions.select(*map(column, columns), F.row_number().over(numbered).alias(HISTORY_COLUMNS[0]),
                           F.unix_millis("_valid_from").alias(HISTORY_COLUMNS[1]),
                           F.unix_millis("_valid_to").alias(HISTORY_COLUMNS[2]),
                           F.col("_is_deleted").alias(HISTORY_COLUMNS[3]))
    expected = truth.versions(truth_table, [source_column(c) for c in tracked_columns(cfg, name, versions.columns)],
                              HISTORY_COLUMNS)
    return compare(versions.sparkSession, lake, expected, [*keys, HISTORY_COLUMNS[0]], name, truth_table,
                   truth.column_types(truth_table))
