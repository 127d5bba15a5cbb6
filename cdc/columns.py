"""Whose column is it: the one rule that keeps the pipeline's columns and the source's apart in the lake.

Changelog and mirror tables hold the source's columns beside the pipeline's own (`_op`, `_seq`, `_source_ts`,
`_valid_from`…, DESIGN.md), and Iceberg and Delta add metadata columns of their own (`_deleted`, `_file`,
`_change_type`). All of these start with one `_`. A source column may be named like any of them, so:

- a name that starts with exactly one `_` is the pipeline's (or the table format's);
- a source column whose name starts with `_` is kept under that name with one more `_` in front (`_seq` ->
  `__seq`, `__x` -> `___x`); every other source name is kept as it is.

The mapping is one-to-one and reversible (`source_column`), so no two source columns meet and none meets a
pipeline column, whatever the source calls them. It is applied where source rows become change records
(`cdc/normalize.py`, DMS files in `cdc/dms_files.py`) and where the source names a key (a Debezium record key, a
DMS `table-def`); everything after that, settings included (`mirror.keys`, `partition_by`, the SCD2 column
lists), names columns as the lake spells them. docs/types.md documents it for users.
"""

from __future__ import annotations

from collections.abc import Iterable

MARK = "_"


def is_pipeline_column(name: str) -> bool:
    """A lake column the pipeline (or the table format) owns: one `_`, then not another."""
    return name.startswith(MARK) and not name.startswith(MARK * 2)


def lake_column(source: str) -> str:
    """The lake's name of source column `source`: one `_` more in front when it starts with `_`."""
    return MARK + source if source.startswith(MARK) else source


def source_column(lake: str) -> str:
    """The source's name of lake column `lake` (`lake_column` reversed); a `ValueError` for a pipeline column."""
    if is_pipeline_column(lake):
        raise ValueError(f"{lake!r} is one of the pipeline's columns, not a source column")
    return lake[len(MARK):] if lake.startswith(MARK) else lake


def source_columns(columns: Iterable[str]) -> list[str]:
    """The source's columns among a lake table's `columns` (lake names), in order."""
    return [c for c in columns if not is_pipeline_column(c)]
