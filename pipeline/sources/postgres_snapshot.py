"""A PostgreSQL table read as a snapshot, one range of its key at a time: what `pipeline backfill` lands.

Why key ranges: a row stays in its key's range whatever happens to it, so each row the table holds is read
exactly once, with the value it has when its range is read; a change after that is in the table's CDC stream,
whose changes order after every snapshot row (`_seq.source_major` is 0 for a snapshot). Page ranges (`ctid`)
would read any table, but an update can move a row to a page already read: the row would be missed, and a
streamed update that left an unchanged TOASTed value out would find none to keep. The ranges' bounds are taken
once, in one pass over the key's index (every n-th key), as the texts PostgreSQL writes; a bound goes back into
SQL as that text cast to the column's type, through `pg_value`.

Each column is read as the lake type its Debezium change lands as (docs/types.md), so the snapshot's rows and
the stream's share one changelog table: the conversion Debezium makes is written here in PostgreSQL's SQL.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from cdc.columns import lake_column
from tables.names import quote

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipeline.config.settings import BackfillSettings

AS_READ = frozenset({"int4", "int8", "bool", "float4", "float8", "bytea", "date", "timestamp", "timestamptz",
                     "text", "varchar", "bpchar"})  # JDBC gives them their lake type
AS_TEXT = frozenset({"json", "jsonb", "uuid", "xml", "name", "citext", "inet", "cidr", "macaddr"})
CONVERTED = frozenset({"int2", "numeric", "time", "timetz"})
MAX_PRECISION = 38  # Spark's decimals; Debezium's precision is capped the same way
IDENTIFIER_MARK = '"'  # PostgreSQL quotes identifiers as SQL does
TIME_OF_DAY = "'HH24:MI:SS.US'"  # the lake's `HH:mm:ss.SSSSSS` text of a time of day
FORCE_BINARY = -1  # pgJDBC's `prepareThreshold` that asks for binary results from a statement's first run

Bound = list[str]  # a key's values, as PostgreSQL writes them as text
KeyRange = tuple["Bound | None", Bound]  # (after this key, or from the first; up to this key, included)


class SnapshotError(RuntimeError):
    """The source table cannot be read as a snapshot: the message names the table and what to do."""


def pg_string(value: str) -> str:
    """A PostgreSQL string literal holding `value` exactly, whatever `standard_conforming_strings` says."""
    return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


@dataclass(frozen=True)
class SourceColumn:
    name: str  # as the source names it
    type_name: str  # pg_type.typname (`_int4` for an array)
    category: str  # pg_type.typtype: b(ase), e(num), d(omain), ...
    declared: str  # format_type(): the type as SQL spells it, modifiers included
    not_null: bool
    precision: int | None  # numeric's, when declared
    scale: int | None

    @property
    def quoted(self) -> str:
        return quote(self.name, mark=IDENTIFIER_MARK)

    @property
    def supported(self) -> bool:
        return self.type_name in AS_READ | AS_TEXT | CONVERTED or self.category == "e"

    def pg_value(self, text: str) -> str:
        """A value of this column as SQL: its text form, cast to the column's type."""
        return f"{pg_string(text)}::{self.declared}"

    def select(self) -> str:
        """The expression reading the column as its lake type, named as the lake names it."""
        column, kind = self.quoted, self.type_name
        if kind == "int2":  # Debezium's int16 is an Avro int
            expression = f"{column}::int"
        elif kind == "numeric" and self.precision is None:  # VariableScaleDecimal
            expression = f"{column}::numeric({MAX_PRECISION}, 18)"
        elif kind == "numeric" and self.precision > MAX_PRECISION:
            expression = f"{column}::numeric({MAX_PRECISION}, {min(self.scale or 0, MAX_PRECISION)})"
        elif kind == "time":
            expression = f"to_char({column}, {TIME_OF_DAY})"
        elif kind == "timetz":  # ZonedTime: the time of day in UTC
            expression = f"to_char(({column} AT TIME ZONE 'UTC')::time, {TIME_OF_DAY})"
        elif kind in AS_TEXT or self.category == "e":
            expression = f"{column}::text"
        else:
            expression = column
        return f"{expression} AS {quote(lake_column(self.name), mark=IDENTIFIER_MARK)}"


@dataclass(frozen=True)
class TableShape:
    """What a backfill plans with: the database, the table's columns and its unique keys."""

    database: str
    columns: list[SourceColumn]
    unique_keys: list[list[str]]  # each unique index on plain columns, the primary key's first
    primary_key: list[str]

    def column(self, name: str) -> SourceColumn:
        return next(c for c in self.columns if c.name == name)


class PostgresSnapshot:
    """Reads `schema.table` of the database at `settings.url` through Spark's JDBC source."""

    def __init__(self, spark: SparkSession, settings: BackfillSettings, schema: str, table: str) -> None:
        self.spark = spark
        self.settings = settings
        self.schema, self.table = schema, table
        self.relation = quote(schema, table, mark=IDENTIFIER_MARK)
        self._regclass = f"to_regclass({pg_string(self.relation)})"

    @property
    def options(self) -> dict[str, str]:
        s = self.settings
        options = {"url": str(s.url), "user": s.user, "driver": "org.postgresql.Driver",
                   "fetchsize": str(s.fetch_rows), "preferTimestampNTZ": "true",  # `timestamp` has no zone
                   # Binary results from a statement's first run: the driver's default waits for its fifth, and
                   # a range is read once, so numbers, times and dates came as text, parsed row by row.
                   "prepareThreshold": str(FORCE_BINARY)}
        if s.password is not None:
            options["password"] = s.password.get_secret_value()
        return options

    def shape(self) -> TableShape:
        """The table's database, columns and keys, in three catalog queries; a missing table, or a database that
        does not answer, is named."""
        try:
            size = self._query(f"""
                SELECT current_database() AS database FROM pg_class AS c WHERE c.oid = {self._regclass}""")
        except Exception as exc:  # noqa: BLE001 - py4j's error: its first line is PostgreSQL's or the driver's
            reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            raise SnapshotError(f"PostgreSQL at {self.settings.url} (backfill.url, as user {self.settings.user}) "
                                f"could not be queried: {reason}") from None
        if not size:
            raise SnapshotError(f"table {self.schema}.{self.table} does not exist in the database at "
                                f"{self.settings.url} (backfill.url): check the name, or the setting")
        columns = self._query(f"""
            SELECT a.attname AS name, t.typname AS type_name, t.typtype AS category,
                   format_type(a.atttypid, a.atttypmod) AS declared, a.attnotnull AS not_null,
                   CASE WHEN t.typname = 'numeric' AND a.atttypmod >= 4
                        THEN ((a.atttypmod - 4) >> 16) & 65535 END AS precision,
                   CASE WHEN t.typname = 'numeric' AND a.atttypmod >= 4 THEN (a.atttypmod - 4) & 65535 END AS scale
            FROM pg_attribute AS a JOIN pg_type AS t ON t.oid = a.atttypid
            WHERE a.attrelid = {self._regclass} AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum""")
        keys = self._query(f"""
            SELECT i.indisprimary AS is_primary, array_agg(a.attname::text ORDER BY k.ord) AS columns
            FROM pg_index AS i CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
            JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
            WHERE i.indrelid = {self._regclass} AND i.indisunique AND i.indisvalid
              AND i.indpred IS NULL AND i.indexprs IS NULL
            GROUP BY i.indexrelid, i.indisprimary ORDER BY i.indisprimary DESC, i.indexrelid""")
        found = size[0]
        return TableShape(
            database=found["database"],
            columns=[SourceColumn(c["name"], c["type_name"], c["category"], c["declared"], c["not_null"],
                                  c["precision"], c["scale"]) for c in columns],
            unique_keys=[list(k["columns"]) for k in keys],
            primary_key=next((list(k["columns"]) for k in keys if k["is_primary"]), []))

    def bounds(self, key: Sequence[SourceColumn], rows: int, after: Bound | None = None) -> list[Bound]:
        """Every `rows`-th key after `after` in key order, and the last: the upper bounds of ranges of `rows` rows
        each, together holding every row the table holds now after that key. One pass over them, in PostgreSQL."""
        columns = ", ".join(c.quoted for c in key)
        texts = ", ".join(f"{c.quoted}::text AS k{i}" for i, c in enumerate(key))
        where = f"WHERE {_after(key, after)}" if after is not None else ""
        found = self._query(f"""
            SELECT {texts} FROM (
                SELECT {columns}, row_number() OVER (ORDER BY {columns}) AS n, count(*) OVER () AS total
                FROM {self.relation} {where}) AS numbered
            WHERE n % {int(rows)} = 0 OR n = total ORDER BY n""")
        return [[row[f"k{i}"] for i in range(len(key))] for row in found]

    def read(self, columns: Sequence[SourceColumn], key: Sequence[SourceColumn],
             ranges: Sequence[KeyRange]) -> DataFrame:
        """The rows of each key range, one task a range, each column as its lake type."""
        from pyspark.sql import DataFrame

        selected = ", ".join(column.select() for column in columns)
        frames = [self.spark.read.format("jdbc").options(**self.options).option(
            "query", f"SELECT {selected} FROM {self.relation} WHERE {_within(key, after, up_to)}").load()
                  for after, up_to in ranges]
        return functools.reduce(DataFrame.union, frames)

    def _query(self, sql: str) -> list[dict[str, Any]]:
        """A small catalog query's rows."""
        frame = self.spark.read.format("jdbc").options(**self.options).option("query", " ".join(sql.split())).load()
        return [row.asDict() for row in frame.collect()]


def _within(key: Sequence[SourceColumn], after: Bound | None, up_to: Bound) -> str:
    """The condition of a key range: after `after` (from the first key when None), up to `up_to` included."""
    upper = f"{_row(key)} <= {_row(key, up_to)}"
    return upper if after is None else f"{_after(key, after)} AND {upper}"


def _after(key: Sequence[SourceColumn], bound: Bound) -> str:
    return f"{_row(key)} > {_row(key, bound)}"


def _row(key: Sequence[SourceColumn], bound: Bound | None = None) -> str:
    """The key's columns as a row, or a bound's values cast to their types: PostgreSQL compares rows of the key
    in the order its index keeps."""
    if bound is None:
        return f"({', '.join(c.quoted for c in key)})"
    return f"({', '.join(c.pg_value(text) for c, text in zip(key, bound, strict=True))})"
