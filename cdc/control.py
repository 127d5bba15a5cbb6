"""Debezium's control records: heartbeats and transaction metadata, which share a subscription with change
events (a pattern like `shop\\..*` matches `shop.transaction`) but describe no row.

They are told apart by the value schema's name, which Debezium fixes for every connector; the stage counts
and skips them, so they never land as a table nor as dead letters.
"""

from __future__ import annotations

from typing import Any

CONTROL_SCHEMAS = {
    "io.debezium.connector.common.Heartbeat": "heartbeat",
    "io.debezium.connector.common.TransactionMetadataValue": "transaction",
}


def control_kind(value_schema: dict[str, Any]) -> str | None:
    """'heartbeat' or 'transaction' for Debezium's control records' value schema, else None."""
    name, namespace = value_schema.get("name", ""), value_schema.get("namespace")
    full_name = name if "." in name or not namespace else f"{namespace}.{name}"
    return CONTROL_SCHEMAS.get(full_name)
