"""Lake table names for source tables, and identifiers quoted in SQL text.

Databases allow table names that Spark, Iceberg, Glue and Athena do not take bare (`Order-Items`, `my table`,
`Größe`, `order`). One rule names every lake table, whatever the transport (a Kafka topic
`<db>.<schema>.<table>`, DMS metadata on Kinesis, a DMS folder `<db>/<schema>/<table>/` on S3):

- the name is `<db>_<table>`;
- a name that is already lowercase ASCII letters, digits and `_` stays as it is (every plain name keeps the
  name it always had);
- any other name is folded: NFKD to ASCII where a letter has an ASCII base (`é` -> `e`), lowercased, and every
  other character outside `[a-z0-9_]` becomes `_`; then `_` and the first 8 hex digits of the SHA-256 of the
  source name (`<db>` NUL `<table>`, UTF-8) are appended, so two source tables that fold alike
  (`Order-Items`, `order_items`, `ORDER ITEMS`) never share a lake table;
- a name that cannot be a lake table goes to the dead letters with its reason: no table name (`NoTableName`),
  no database name, or more than `MAX_LENGTH` characters once mapped (`UnmappableName`).

Lake names may still start with a digit or be a reserved word; SQL text always quotes identifiers (`quote`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

# Glue (and so Athena) takes names of up to 255 characters; the views add a suffix (`_current`, `_deleted`,
# `_latest` by default), which must fit too.
MAX_LENGTH = 240
HASH_DIGITS = 8
_PLAIN = re.compile(r"[a-z0-9_]+")
_OTHER = re.compile(r"[^a-z0-9_]")


class UnmappableName(ValueError):
    """A source name that names no lake table; `error_class` is the dead letters' error class."""

    error_class = "UnmappableName"


class NoTableName(UnmappableName):
    """A record that names no table: landing it in a table named after its stream or folder would be a guess."""

    error_class = "NoTableName"


def lake_table_name(db: str, table: str) -> str:
    """The lake table of source table `table` of database (or server, topic prefix, stream, folder) `db`."""
    if not table:
        raise NoTableName(f"the record names no table (database {db!r})")
    if not db:
        raise UnmappableName(f"table {table!r} comes with no database name")
    name = f"{db}_{table}"
    if not _PLAIN.fullmatch(name):
        digest = hashlib.sha256(f"{db}\0{table}".encode()).hexdigest()[:HASH_DIGITS]
        name = f"{_fold(name)}_{digest}"
    if len(name) > MAX_LENGTH:
        raise UnmappableName(f"table {table!r} of {db!r} maps to a name of {len(name)} characters; Glue and Athena "
                             f"take at most {MAX_LENGTH} (with room for the views' suffixes)")
    return name


def topic_table_name(topic: str) -> str:
    """The lake table of a topic `<db>.<schema>.<table>`: its first and its last part."""
    return lake_table_name(topic.split(".")[0], topic.rsplit(".", 1)[-1])


def _fold(name: str) -> str:
    decomposed = unicodedata.normalize("NFKD", name)
    ascii_only = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return _OTHER.sub("_", ascii_only.lower())


def quote(*parts: str, mark: str = "`") -> str:
    """A (multi-part) identifier for SQL text: each part in `mark`s, an embedded mark doubled. Backticks for
    Spark SQL and Hive/Athena DDL; `mark='"'` for Athena (Trino) queries and views."""
    return ".".join(mark + part.replace(mark, mark * 2) + mark for part in parts)


def sql_string(value: str) -> str:
    """A Spark SQL string literal holding `value` exactly."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
