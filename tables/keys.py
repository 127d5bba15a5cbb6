"""The key of a changelog table, kept with the table, so that `mirror` needs no `mirror.keys` setting for it.

What the source already says is not asked of the user again: a Debezium record's Kafka key names the primary
key's columns (its key schema, in the registry), and a DMS `create-table` control record names them in its
`table-def` (`primary-key`). The changelog stage keeps them in a table property, `pipeline.keys` (a JSON
list), when it creates the table (Iceberg's identifier fields would need the columns to be required, which a
change record's columns are not); a DMS control record's definition is kept beside it. `mirror.keys.<table>`
still wins: an override, and the only key of DMS files on S3, which name none.
"""

from __future__ import annotations

import json
from typing import Mapping, Sequence

KEYS_PROPERTY = "pipeline.keys"
DMS_TABLE_DEF_PROPERTY = "pipeline.dms-table-def"  # the newest DMS `table-def` of the table, as DMS sent it


def keys_property(keys: Sequence[str]) -> dict[str, str]:
    """The table property that keeps `keys` (none for no key)."""
    return {KEYS_PROPERTY: json.dumps(list(keys))} if keys else {}


def stored_keys(properties: Mapping[str, str]) -> list[str]:
    """The key a table keeps; empty when it keeps none (or an unreadable one)."""
    try:
        found = json.loads(properties.get(KEYS_PROPERTY) or "[]")
    except json.JSONDecodeError:
        return []
    return [str(column) for column in found] if isinstance(found, list) else []


def table_key(configured: Sequence[str], properties: Mapping[str, str]) -> list[str]:
    """The key the mirror merges a table by: `mirror.keys.<table>` when set, else the one the table keeps."""
    return list(configured) or stored_keys(properties)
