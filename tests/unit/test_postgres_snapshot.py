"""The SQL `pipeline backfill` sends PostgreSQL: literals, each type's read as its lake type, key ranges."""

from __future__ import annotations

import pytest

from pipeline.config.settings import BackfillSettings
from pipeline.sources.postgres_snapshot import PostgresSnapshot, SourceColumn, _within, pg_string
from pipeline.stages.backfill import Position, _ranges


def col(name: str, type_name: str, declared: str = "", category: str = "b", precision: int | None = None,
        scale: int | None = None) -> SourceColumn:
    return SourceColumn(name, type_name, category, declared or type_name, True, precision, scale)


def test_a_string_literal_holds_its_value_whatever_the_server_setting() -> None:
    assert pg_string("it's") == "E'it''s'"
    assert pg_string("a\\b") == "E'a\\\\b'"  # E'' reads a backslash as an escape: doubled


@pytest.mark.parametrize(("column", "expression"), [
    (col("id", "int4"), '"id" AS "id"'),
    (col("n", "int2"), '"n"::int AS "n"'),  # Debezium's int16 is an Avro int
    (col("amount", "numeric", precision=12, scale=2), '"amount" AS "amount"'),
    (col("score", "numeric"), '"score"::numeric(38, 18) AS "score"'),  # VariableScaleDecimal
    (col("big", "numeric", precision=50, scale=4), '"big"::numeric(38, 4) AS "big"'),
    (col("wakes_at", "time"), "to_char(\"wakes_at\", 'HH24:MI:SS.US') AS \"wakes_at\""),
    (col("at", "timetz"), "to_char((\"at\" AT TIME ZONE 'UTC')::time, 'HH24:MI:SS.US') AS \"at\""),
    (col("tags", "jsonb"), '"tags"::text AS "tags"'),
    (col("tier", "tier", category="e"), '"tier"::text AS "tier"'),  # an enum
    (col("_seq", "int8"), '"_seq" AS "__seq"'),  # a source name the pipeline's columns would shadow
    (col('a"b', "text"), '"a""b" AS "a""b"'),
])
def test_each_column_is_read_as_its_lake_type(column: SourceColumn, expression: str) -> None:
    assert column.select() == expression
    assert column.supported


def test_rows_come_in_binary_from_a_ranges_first_and_only_read() -> None:
    """pgJDBC sends numbers, times and dates as text until a statement's fifth run; a key range is read once."""
    settings = BackfillSettings(url="jdbc:postgresql://db:5432/shop", fetch_rows=500)
    options = PostgresSnapshot(None, settings, "public", "trips").options  # type: ignore[arg-type]
    assert options["prepareThreshold"] == "-1"  # pgJDBC's "force binary"
    assert options["fetchsize"] == "500"


def test_types_without_a_lake_type_are_not_supported() -> None:
    assert not col("took", "interval").supported
    assert not col("ids", "_int4").supported


def test_a_key_range_compares_the_key_as_a_row_of_typed_literals() -> None:
    key = [col("region", "text"), col("id", "int8", declared="bigint")]
    assert _within(key, None, ["eu", "7"]) == "(\"region\", \"id\") <= (E'eu'::text, E'7'::bigint)"
    assert _within(key, ["eu", "7"], ["us'x", "2"]) == (
        "(\"region\", \"id\") > (E'eu'::text, E'7'::bigint) AND (\"region\", \"id\") <= (E'us''x'::text, E'2'::bigint)")


def test_ranges_run_from_where_the_last_commit_stopped() -> None:
    assert _ranges([["3"], ["6"], ["8"]], None) == [(None, ["3"]), (["3"], ["6"]), (["6"], ["8"])]
    assert _ranges([["9"]], ["8"]) == [(["8"], ["9"])]
    assert _ranges([], ["8"]) == []


def test_a_commit_records_the_last_key_it_read() -> None:
    assert Position(3, ["eu", "7"], 600, complete=False).committed() == {
        "pipeline.backfill.after": '["eu", "7"]', "pipeline.backfill.complete": "false",
        "pipeline.backfill.rows-before": "600"}
