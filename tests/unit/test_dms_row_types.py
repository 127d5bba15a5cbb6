"""Learned DMS JSON row types (`cdc/decode.py`): which record shapes (`data` and `metadata`) decode exactly with a
learned type, and how types merge. The shapes and merged types below are what Spark 4.1's `schema_of_variant` and
`schema_of_variant_agg` print for those records (tests/integration/test_kinesis.py runs them in Spark)."""

from __future__ import annotations

import re

import pytest

from cdc import decode

LEARNED = "OBJECT<`a b`: BIGINT, amount: DECIMAL(4,2), name: STRING, note: VOID, rate: DOUBLE>"
METADATA = ("OBJECT<operation: STRING, `partition-key-type`: STRING, `record-type`: STRING, `schema-name`: STRING, "
            "`table-name`: STRING, timestamp: STRING, `transaction-id`: BIGINT, `transaction-record-id`: BIGINT>")


def _fits(data: str, row_type: str = LEARNED, metadata: str | None = METADATA) -> bool:
    """Whether a record of this `data` shape (and `metadata` shape, None: no metadata) fits."""
    shape = f"OBJECT<data: {data}" + (f", metadata: {metadata}>" if metadata is not None else ">")
    return re.search(decode.shape_pattern(row_type), shape) is not None


@pytest.mark.parametrize("shape", [
    LEARNED,
    "OBJECT<`a b`: BIGINT, amount: DECIMAL(3,1), name: STRING, note: VOID, rate: BIGINT>",  # narrower values
    "OBJECT<`a b`: VOID, amount: VOID, name: VOID, note: VOID, rate: DECIMAL(30,10)>",  # nulls; DOUBLE takes numbers
    "OBJECT<amount: DECIMAL(1,0), rate: DOUBLE>",  # keys absent
    "OBJECT<>",
])
def test_a_shape_that_merges_into_the_learned_type_unchanged_fits(shape: str) -> None:
    assert _fits(shape)


@pytest.mark.parametrize("shape", [
    "OBJECT<`a b`: DECIMAL(2,1)>",  # 1.5 would be cast to 1
    "OBJECT<`a b`: STRING>",  # "12" would be cast to 12
    "OBJECT<`a b`: BOOLEAN>",  # true would be cast to 1
    "OBJECT<amount: DECIMAL(3,3)>",  # 0.125 would be rounded to 0.13
    "OBJECT<amount: DECIMAL(4,1)>",  # 123.4 does not fit two integer digits
    "OBJECT<amount: BIGINT>",  # neither does any BIGINT
    "OBJECT<name: BIGINT>",  # STRING and BIGINT merge into VARIANT
    "OBJECT<note: STRING>",  # a value where the learned rows had none
    "OBJECT<email: STRING, name: STRING>",  # a key the learned type lacks
    "OBJECT<name: STRING, zip: STRING>",
    "OBJECT<name: OBJECT<first: STRING>>",
    "STRING",  # `data` is not an object
])
def test_a_shape_the_learned_type_would_change_does_not_fit(shape: str) -> None:
    assert not _fits(shape)


@pytest.mark.parametrize("metadata", [
    METADATA,
    None,  # no metadata: the record is not valid, whichever way it is decoded
    "OBJECT<operation: STRING, timestamp: VOID>",  # fields absent or null
    "OBJECT<`commit-timestamp`: STRING, operation: STRING, `prev-transaction-id`: BIGINT, z: DECIMAL(2,1)>",
    "OBJECT<`1`: BOOLEAN, `a``b`: DOUBLE, `transaction-record-id`: BIGINT, `zz-top`: VOID>",
])
def test_metadata_fits_when_each_field_it_reads_has_its_type_and_the_others_are_scalars(metadata: str | None) -> None:
    assert _fits("OBJECT<name: STRING>", metadata=metadata)


@pytest.mark.parametrize("metadata", [
    "OBJECT<operation: BIGINT>",  # 1 would be read as "1"
    "OBJECT<timestamp: DECIMAL(2,1)>",
    "OBJECT<`transaction-id`: STRING>",  # "5" would be read as 5
    "OBJECT<`transaction-record-id`: DOUBLE>",
    "OBJECT<`table-name`: OBJECT<a: STRING>>",
    "OBJECT<extra: OBJECT<a: BIGINT>, operation: STRING>",  # a field of no scalar type
    "OBJECT<extra: ARRAY<BIGINT>>",
    "STRING",
])
def test_metadata_a_field_of_another_type_does_not_fit(metadata: str) -> None:
    assert not _fits("OBJECT<name: STRING>", metadata=metadata)


@pytest.mark.parametrize("shape", [
    "OBJECT<`before-image`: OBJECT<name: STRING>, data: OBJECT<name: STRING>>",  # a key beside data and metadata
    "OBJECT<metadata: OBJECT<operation: STRING>>",  # no data
    "OBJECT<data: VOID>",
    "STRING",
])
def test_a_record_of_another_shape_does_not_fit(shape: str) -> None:
    assert re.search(decode.shape_pattern(LEARNED), shape) is None


def test_a_failing_match_does_not_try_every_way_to_share_other_metadata_fields() -> None:
    """Metadata of many fields the decode does not read, none that it does, and a nested one at the end (no fit):
    with the runs of other fields backtracking, this match would try some 10^10 splits of the forty fields among
    the nine runs, per record, and the suite's timeout would end it."""
    others = ", ".join(f"x{i:02d}: STRING" for i in range(40))
    assert not _fits("OBJECT<name: STRING>", metadata=f"OBJECT<{others}, zz: OBJECT<a: BIGINT>>")
    assert _fits("OBJECT<name: STRING>", metadata=f"OBJECT<{others}>")


def test_decimal_fields_take_bigints_when_they_have_the_integer_digits_of_one() -> None:
    assert _fits("OBJECT<n: BIGINT>", "OBJECT<n: DECIMAL(22,2)>")
    assert not _fits("OBJECT<n: BIGINT>", "OBJECT<n: DECIMAL(20,2)>")


@pytest.mark.parametrize("a, b, merged", [
    ("OBJECT<a: DECIMAL(2,1), c: VOID>", "OBJECT<a: DECIMAL(4,2)>", "OBJECT<a: DECIMAL(4,2), c: VOID>"),
    ("OBJECT<a: DECIMAL(4,2)>", "OBJECT<a: BIGINT>", "OBJECT<a: DECIMAL(22,2)>"),
    ("OBJECT<a: DOUBLE>", "OBJECT<a: BIGINT>", "OBJECT<a: DOUBLE>"),
    ("OBJECT<a: VOID, b: STRING>", "OBJECT<a: BIGINT, `c d`: BOOLEAN>", "OBJECT<a: BIGINT, b: STRING, `c d`: BOOLEAN>"),
    ("OBJECT<Z: BIGINT>", "OBJECT<a: BIGINT>", "OBJECT<Z: BIGINT, a: BIGINT>"),  # by name, as Spark sorts them
    ("OBJECT<a: BIGINT>", "OBJECT<a: STRING>", None),  # VARIANT
    ("OBJECT<a: DECIMAL(38,0)>", "OBJECT<a: DECIMAL(2,1)>", None),  # past 38 digits
    ("OBJECT<a: BIGINT>", "OBJECT<a: OBJECT<b: BIGINT>>", None),  # not an object of scalars
])
def test_row_types_merge_as_schema_of_variant_agg_merges_them(a: str, b: str, merged: str | None) -> None:
    assert decode.merged_row_type(a, b) == merged


def test_only_objects_of_scalar_fields_are_learnable() -> None:
    assert decode.learnable(LEARNED)
    assert not decode.learnable("OBJECT<a: ARRAY<BIGINT>>")
    assert not decode.learnable("OBJECT<a: VARIANT>")
    assert not decode.learnable("VOID")
    assert not decode.learnable(None)
    with pytest.raises(ValueError, match="not a learnable DMS row type"):
        decode.shape_pattern("OBJECT<a: VARIANT>")
