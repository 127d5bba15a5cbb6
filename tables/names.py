"""Lake table names for source tables, and identifiers quoted in SQL text.

Databases allow table names that Spark, Iceberg, Glue and Athena do not take bare (`Order-Items`, `my table`,
`Größe`, `order`). One rule (`LakeNames`, as `names.*` configures it) names every lake table, whatever the
transport names the source table by (`SourceTable`: a Kafka topic `<db>.<schema>.<table>`, DMS metadata on
Kinesis, a DMS folder `<db>/<schema>/<table>/` on S3; `<db>` is the topic prefix, stream or folder):

- a source table named in `names.tables` gets the name given there;
- the name is `<db>_<table>`, or `<db>_<schema>_<table>` for a schema `names.with_schema` lists (a database with
  a table of one name in two schemas: by default both map to one lake table, which only the first to land may
  use, `tables/owners.py`);
- a name that is already lowercase ASCII letters, digits and `_` stays as it is (every plain name keeps the
  name it always had);
- any other name is folded: NFKD to ASCII where a letter has an ASCII base (`é` -> `e`), lowercased, and every
  other character outside `[a-z0-9_]` becomes `_`; then `_` and the first 8 hex digits of the SHA-256 of the
  source name (`<db>` NUL [`<schema>` NUL] `<table>`, UTF-8) are appended, so two source tables that fold
  alike (`Order-Items`, `order_items`, `ORDER ITEMS`) never share a lake table;
- a name that cannot be a lake table goes to the dead letters with its reason: no table name (`NoTableName`),
  no database name, or more than `MAX_LENGTH` characters once mapped (`UnmappableName`).

Lake names may still start with a digit or be a reserved word; SQL text always quotes identifiers (`quote`), the
DataFrame API names columns through `column`, and values go into SQL text as literals (`sql_string`). A projection
over every column of a table is SQL text (`selectExpr` of `quote`d names), one py4j call: a `Column` costs a call
or more for each function and column, and the JVM a search of the class path for PySpark's `functions` class on
each, seconds for a wide table's plan (docs/mirror.md, "The first build").
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from pyspark.sql import Column

# Glue (and so Athena) takes names of up to 255 characters; the views add a suffix (`_current`, `_deleted`,
# `_latest` by default), which must fit too.
MAX_LENGTH = 240
HASH_DIGITS = 8
PLAIN = re.compile(r"[a-z0-9_]+")  # a name that is a lake name as it is
_OTHER = re.compile(r"[^a-z0-9_]")


class UnmappableName(ValueError):
    """A source name that names no lake table; `error_class` is the dead letters' error class."""

    error_class = "UnmappableName"


class NoTableName(UnmappableName):
    """A record that names no table: landing it in a table named after its stream or folder would be a guess."""

    error_class = "NoTableName"


@dataclass(frozen=True)
class SourceTable:
    """A source table as its transport names it; `<db>` is the database, server, topic prefix, stream or folder."""

    db: str
    schema: str
    table: str

    @classmethod
    def of_topic(cls, topic: str) -> SourceTable:
        """A topic `<db>.<schema>.<table>`: its first part, its last, and what lies between (`<stream>..`, what
        the Kinesis transport makes of a record that names no table, names none)."""
        parts = topic.split(".")
        return cls(parts[0], ".".join(parts[1:-1]), parts[-1])

    def __str__(self) -> str:
        return f"{self.db}.{self.schema}.{self.table}"


@dataclass(frozen=True)
class LakeNames:
    """The rule from source tables to lake table names: `names.tables`, else `names.with_schema`, else
    `<db>_<table>`."""

    with_schema: frozenset[str] = frozenset()  # `<schema>`, `<db>.<schema>`, or `*` for every schema
    tables: Mapping[str, str] = field(default_factory=dict)  # `<db>.<schema>.<table>` -> lake name

    def of(self, source: SourceTable) -> str:
        if str(source) in self.tables:
            return self.tables[str(source)]
        listed = {"*", source.schema, f"{source.db}.{source.schema}"} & self.with_schema
        return lake_table_name(source.db, source.table, source.schema if listed and source.schema else "")

    def of_topic(self, topic: str) -> str:
        return self.of(SourceTable.of_topic(topic))


def lake_table_name(db: str, table: str, schema: str = "") -> str:
    """The lake table of source table `table` of database (or server, topic prefix, stream, folder) `db`:
    `<db>_<table>`, or `<db>_<schema>_<table>` when given a schema."""
    if not table:
        raise NoTableName(f"the record names no table (database {db!r})")
    if not db:
        raise UnmappableName(f"table {table!r} comes with no database name")
    parts = (db, schema, table) if schema else (db, table)
    name = "_".join(parts)
    if not PLAIN.fullmatch(name):
        digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:HASH_DIGITS]
        name = f"{_fold(name)}_{digest}"
    if len(name) > MAX_LENGTH:
        raise UnmappableName(f"table {table!r} of {db!r} maps to a name of {len(name)} characters; Glue and Athena "
                             f"take at most {MAX_LENGTH} (with room for the views' suffixes)")
    return name


def _fold(name: str) -> str:
    decomposed = unicodedata.normalize("NFKD", name)
    ascii_only = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return _OTHER.sub("_", ascii_only.lower())


def quote(*parts: str, mark: str = "`") -> str:
    """A (multi-part) identifier for SQL text: each part in `mark`s, an embedded mark doubled. Backticks for
    Spark SQL and Hive/Athena DDL; `mark='"'` for Athena (Trino) queries and views."""
    return ".".join(mark + part.replace(mark, mark * 2) + mark for part in parts)


def column(name: str) -> Column:
    """A DataFrame column by its name as written (`a.b` is one column, not field `b` of `a`; a backtick is
    doubled): `quote`'s counterpart in the DataFrame API."""
    from pyspark.sql import functions as F

    return F.col(quote(name))


def property_list(properties: Mapping[str, str]) -> str:
    """Table properties for `SET TBLPROPERTIES (...)`: each key and value a string literal."""
    return ", ".join(f"{sql_string(key)} = {sql_string(value)}" for key, value in properties.items())


def sql_string(value: str) -> str:
    """A Spark SQL string literal holding `value` exactly."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
