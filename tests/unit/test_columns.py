"""The column rule (`cdc/columns.py`): every column the pipeline adds is its own, and every source name maps to a
lake name that is none of them and maps back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc.columns import is_pipeline_column, lake_column, source_column, source_columns
from cdc.decode import BODY, PARSED, VALID
from cdc.dms_files import FILE_COLUMNS
from cdc.merge import CHANGELOG_ONLY, FROM_BASE, TOMBSTONE, UNCHANGED, known_seq
from cdc.normalize import META_COLUMNS
from cdc.scd2 import DROP, VERSION_COLUMNS
from tables.views import LATEST_RANK, TRUNCATE_RANK, TRUNCATE_SEQ, TRUNCATE_TS

# The columns the pipeline writes into changelog and mirror tables (SCD1 and SCD2) or works with beside a source's
# (its own, and the ones Spark and the table formats add): a source column may carry any of these names.
PIPELINE_COLUMNS = sorted({*META_COLUMNS, *CHANGELOG_ONLY, *TOMBSTONE, *VERSION_COLUMNS, *FILE_COLUMNS, UNCHANGED,
                           FROM_BASE, DROP, LATEST_RANK, TRUNCATE_SEQ, TRUNCATE_TS, TRUNCATE_RANK, VALID, PARSED, BODY,
                           "_row", "_spark_path", "_metadata", "_commit", "_rank", known_seq(0), known_seq(119),
                           "_t_seq", "_t_ts", "_deleted", "_file", "_pos", "_change_type"})


def test_every_column_the_pipeline_adds_is_its_own() -> None:
    assert all(is_pipeline_column(c) for c in PIPELINE_COLUMNS)
    assert source_columns(["id", "_seq", "__seq", "_op", "a_b", "___x"]) == ["id", "__seq", "a_b", "___x"]


def test_a_source_column_named_like_a_pipeline_column_gets_one_more_underscore() -> None:
    assert [lake_column(c) for c in ("_seq", "__seq", "_", "id", "a_", "Größe")] == \
        ["__seq", "___seq", "__", "id", "a_", "Größe"]
    for name in PIPELINE_COLUMNS:
        assert not is_pipeline_column(lake_column(name)) and source_column(lake_column(name)) == name


@given(st.text(min_size=1), st.text(min_size=1))
def test_every_source_name_maps_to_a_lake_name_of_its_own_and_back(name: str, other: str) -> None:
    lake = lake_column(name)
    assert not is_pipeline_column(lake) and source_column(lake) == name
    assert (lake_column(other) == lake) == (other == name)


def test_a_pipeline_column_is_no_source_column() -> None:
    with pytest.raises(ValueError, match="'_seq' is one of the pipeline's columns"):
        source_column("_seq")
