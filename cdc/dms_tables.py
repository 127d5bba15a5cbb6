"""Which table a DMS JSON record belongs to, and DMS's control records.

AWS DMS writes every table of a task to one Kafka topic (or Kinesis stream) unless told otherwise, and each
record names its table in `metadata` (`schema-name`, `table-name`). So a record is routed by that, whatever
carries it: to `<db>.<schema>.<table>`, where `<db>` is the first dot-separated part of the topic or stream
(the part Debezium's topics name the database by), and a record that names no table keeps its topic.

Control records (`metadata.record-type = "control"`) report a table's DDL (`operation`: `create-table`,
`drop-table`, `add-column`, ...) and describe no row. With the task's `IncludeControlDetails` they carry the
table's definition, `control.table-def`: its `columns` and its `primary-key`, which is the mirror's key. The
stage counts them and keeps the definition with the table; they are never landed nor dead-lettered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

# AWS's list for the Kafka and Kinesis targets (control records: IncludeControlDetails,
# IncludeTableAlterOperations)
CONTROL_OPERATIONS = ("create-table", "rename-table", "drop-table", "change-columns", "add-column", "drop-column",
                      "rename-column", "column-type-change")


def _metadata(parsed: Column, name: str) -> Column:
    return F.try_variant_get(parsed, f"$.metadata['{name}']", "string")


def routed_topic(topic: Column, parsed: Column) -> Column:
    """`<db>.<schema>.<table>` for a DMS JSON record (`parsed`, a variant) that names its table, else `topic`.
    The same for a topic routed already: its first part is kept."""
    named = F.concat(F.substring_index(topic, ".", 1), F.lit("."), _metadata(parsed, "schema-name"), F.lit("."),
                     _metadata(parsed, "table-name"))
    return F.coalesce(named, topic)


def operation(parsed: Column) -> Column:
    return _metadata(parsed, "operation")


def is_control(parsed: Column) -> Column:
    """A DMS control record of an operation the stage knows (null for a value that is not DMS JSON)."""
    return (_metadata(parsed, "record-type") == "control") & operation(parsed).isin(*CONTROL_OPERATIONS)


def table_def(parsed: Column) -> Column:
    """A control record's `control.table-def` as JSON text, or null."""
    return F.try_variant_get(parsed, "$.control['table-def']", "string")


def issued_at(parsed: Column) -> Column:
    """When DMS wrote the record (`metadata.timestamp`, ISO 8601 text: it sorts as it reads)."""
    return _metadata(parsed, "timestamp")


@dataclass(frozen=True)
class TableDef:
    """A table's definition as a DMS control record gives it."""

    columns: dict[str, dict[str, Any]]  # column -> its DMS type, length, nullable...
    primary_key: list[str]

    @classmethod
    def parse(cls, text: str) -> TableDef:
        found = json.loads(text)
        columns = found.get("columns") or {} if isinstance(found, dict) else None
        key = found.get("primary-key") or [] if isinstance(found, dict) else None
        if not isinstance(columns, dict) or not isinstance(key, list):
            raise ValueError(f"a DMS table-def has columns as an object and primary-key as a list: {text[:200]}")
        return cls(columns, [str(column) for column in key])
