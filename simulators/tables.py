"""The simulated source tables: the MoMA `artists` and `artworks` tables of the Debezium/Hudi post, the
`employee` table of the streaming-Iceberg example, and a `shop.orders` table of Postgres types that Debezium
sends as semantic types. Columns, keys and partition-like columns match the seeds.

Each table also names the nullable column that schema evolution adds mid-run (an `ALTER TABLE … ADD COLUMN`).
Row values are what the connector's Avro carries (a `MicroTimestamp` is a long; a decimal a `Decimal`, which
the Avro writer encodes as bytes); `simulators/semantic.py` says what each means in the lake.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property
from typing import Any, Callable

from simulators.semantic import DECIMAL_12_2, semantic

Row = dict[str, Any]
Generator = Callable[[random.Random], Any]

NATIONALITIES = ["American", "French", "German", "British", "Japanese", "Spanish", "Italian", "Mexican",
                 "Brazilian", "Russian", "Dutch", "Swiss", "Canadian", "Afghan", "Albanian", "Algerian"]
GENDERS = ["Male", "Female", "Non-binary", None]
CLASSIFICATIONS = ["Print", "Photograph", "Drawing", "Painting", "Sculpture", "Design", "Film", "Video"]
DEPARTMENTS = ["Prints & Illustrated Books", "Photography", "Drawings & Prints", "Painting & Sculpture",
               "Architecture & Design", "Film", "Media and Performance"]
MEDIUMS = ["Lithograph", "Gelatin silver print", "Oil on canvas", "Linoleum cut", "Pencil on paper", "Bronze"]
TEAMS = ["platform", "data", "payments", "search", "mobile", "security"]
ROLES = ["engineer", "senior engineer", "staff engineer", "manager", "analyst", "designer"]
FIRST = ["Robert", "Pablo", "Frida", "Georgia", "Ansel", "Man", "Berenice", "Yayoi", "Louise", "Andy"]
LAST = ["Arneson", "Picasso", "Kahlo", "O'Keeffe", "Adams", "Ray", "Abbott", "Kusama", "Bourgeois", "Warhol"]


@dataclass(frozen=True)
class Column:
    name: str
    avro_type: str | dict[str, Any]  # the Avro type, with Kafka Connect's annotations where it has a semantic type
    generate: Generator | None = None  # None for the key's columns, which the source assigns (`Table.key_row`)
    toasted: bool = False  # a large value Postgres stores out of line: an update leaving it unchanged omits it


@dataclass(frozen=True)
class Table:
    database: str  # the Debezium server name and database
    schema: str
    name: str
    key: str  # the column the source numbers its rows by (a serial)
    columns: tuple[Column, ...]  # key column first
    partition_column: str  # a partition-like column that updates sometimes move
    evolution: Column  # the nullable column added mid-run; null in about half the rows
    truncated: bool = False  # the source truncates it now and then (where the format carries truncates)
    primary_key: tuple[str, ...] | None = None  # the declared key: None is `key` alone, () a table without one
    weight: float = 1.0  # the table's share of the database's rows and changes, relative to the others

    @cached_property
    def keys(self) -> tuple[str, ...]:
        """The primary key's columns; the serial `key` is one of them (so they are unique), the others are
        derived from it and never change (a tenant, a line number)."""
        return (self.key,) if self.primary_key is None else self.primary_key

    def key_row(self, key: int) -> Row:
        """The columns the source assigns a new row: the serial, and each other key column derived from it."""
        row: Row = {self.key: key}
        for position, name in enumerate(self.keys, start=1):
            if name != self.key:
                part = key % (3 + 4 * position) + 1
                row[name] = f"p{part}" if self._types[name] == "string" else part
        return row

    @cached_property
    def _types(self) -> dict[str, Any]:
        return {col.name: col.avro_type for col in self.columns}

    @cached_property  # every event names its table: build the text once
    def qualified(self) -> str:
        return f"{self.database}.{self.schema}.{self.name}"

    @cached_property
    def toasted(self) -> tuple[str, ...]:
        """The columns whose unchanged values an update omits (a placeholder instead)."""
        return tuple(col.name for col in (*self.columns, self.evolution) if col.toasted)

    def columns_at(self, version: int) -> tuple[Column, ...]:
        """Schema version 1 is the original table; version 2 has the evolution column."""
        return self.columns if version == 1 else (*self.columns, self.evolution)

    def value_columns(self, version: int) -> tuple[Column, ...]:
        """The columns rows draw values for (not those `key_row` assigns)."""
        return tuple(col for col in self.columns_at(version) if col.generate is not None)


def _name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _year(low: int, high: int) -> Generator:
    return lambda rng: rng.randint(low, high) if rng.random() > 0.1 else None


def _choice(values: list[Any]) -> Generator:
    return lambda rng: rng.choice(values)


def _cm(rng: random.Random) -> float | None:
    return round(rng.uniform(1, 300), 2) if rng.random() > 0.3 else None


ARTISTS = Table(
    "moma", "public", "artists", "artist_id",
    (
        Column("artist_id", "int"),
        Column("name", "string", _name),
        Column("nationality", "string", _choice(NATIONALITIES)),
        Column("gender", "string", _choice(GENDERS)),
        Column("birth_year", "int", _year(1840, 1990)),
        Column("death_year", "int", _year(1900, 2023)),
    ),
    partition_column="nationality",
    evolution=Column("wiki_qid", "string", lambda rng: f"Q{rng.randint(1000, 9999999)}" if rng.random() < 0.5 else None),
)

ARTWORKS = Table(
    "moma", "public", "artworks", "artwork_id",
    (
        Column("artwork_id", "int"),
        Column("title", "string", lambda rng: f"Untitled {rng.randint(1, 99999)}" if rng.random() < 0.5 else "Picador (La Pique)"),
        Column("artist_id", "int", lambda rng: rng.randint(1, 5000)),
        Column("name", "string", _name),
        Column("date", "string", lambda rng: str(rng.randint(1870, 2020))),
        Column("medium", "string", _choice(MEDIUMS)),
        Column("dimensions", "string", lambda rng: f"{rng.randint(5, 90)} x {rng.randint(5, 90)} cm"),
        Column("acquisition_date", "string", lambda rng: f"{rng.randint(1930, 2023)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"),
        Column("credit", "string", lambda rng: rng.choice(["Gift of the artist", "Purchase", "Acquired through the Lillie P. Bliss Bequest"])),
        Column("catalogue", "string", _choice(["Y", "N"])),
        Column("department", "string", _choice(DEPARTMENTS)),
        Column("classification", "string", _choice(CLASSIFICATIONS)),
        Column("object_number", "string", lambda rng: f"{rng.randint(1, 999)}.{rng.randint(1, 9999)}"),
        Column("diameter_cm", "double", _cm),
        Column("circumference_cm", "double", _cm),
        Column("height_cm", "double", _cm),
        Column("length_cm", "double", _cm),
        Column("width_cm", "double", _cm),
        Column("depth_cm", "double", _cm),
        Column("weight_kg", "double", _cm),
        Column("durations", "int", lambda rng: rng.randint(1, 7200) if rng.random() < 0.1 else None),
    ),
    partition_column="classification",
    evolution=Column("thumbnail_url", "string",
                     lambda rng: f"https://moma.example/thumb/{rng.randint(1, 999999)}.jpg" if rng.random() < 0.5 else None),
)

EMPLOYEE = Table(
    "hr", "public", "employee", "employee_id",
    (
        Column("employee_id", "long"),
        Column("age", "int", lambda rng: rng.randint(18, 70)),
        Column("start_date", "long", lambda rng: rng.randint(1_262_304_000_000, 1_767_225_600_000)),
        Column("team", "string", _choice(TEAMS)),
        Column("role", "string", _choice(ROLES)),
        Column("address", "string", lambda rng: f"{rng.randint(1, 999)} Main St"),
        Column("name", "string", _name),
    ),
    partition_column="team",
    evolution=Column("email", "string", lambda rng: f"employee{rng.randint(1, 99999)}@example.com" if rng.random() < 0.5 else None),
)

STATUSES = ["new", "paid", "shipped", "cancelled"]


def _notes(rng: random.Random) -> str:
    """A text long enough for Postgres to TOAST (over ~2 kB)."""
    return " ".join(rng.choice(LAST) for _ in range(400 + rng.randint(0, 50)))


ORDERS = Table(
    "shop", "public", "orders", "order_id",
    (
        Column("order_id", "long"),
        Column("customer_id", "int", lambda rng: rng.randint(1, 500)),
        Column("amount", DECIMAL_12_2, lambda rng: Decimal(rng.randint(-10_000, 1_000_000)).scaleb(-2)),
        Column("status", semantic("string", "io.debezium.data.Enum", allowed=",".join(STATUSES)), _choice(STATUSES)),
        Column("updated_at", semantic("long", "io.debezium.time.MicroTimestamp"),
               lambda rng: 1_700_000_000_000_000 + rng.randint(0, 60_000_000_000_000)),
        Column("created_at", semantic("string", "io.debezium.time.ZonedTimestamp"),
               lambda rng: f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
                           f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999999):06d}Z"),
        Column("ship_date", semantic("int", "io.debezium.time.Date"), lambda rng: rng.randint(19_000, 21_000)),
        Column("pickup", semantic("long", "io.debezium.time.MicroTime"), lambda rng: rng.randint(0, 86_399_999_999)),
        Column("tags", semantic("string", "io.debezium.data.Json"),
               lambda rng: f'{{"gift": {str(rng.random() < 0.5).lower()}, "n": {rng.randint(0, 9)}}}'),
        Column("ref", semantic("string", "io.debezium.data.Uuid"),
               lambda rng: str(uuid.UUID(int=rng.getrandbits(128)))),
        Column("notes", "string", _notes, toasted=True),
    ),
    partition_column="status",
    evolution=Column("coupon", "string", lambda rng: f"C{rng.randint(100, 999)}" if rng.random() < 0.5 else None),
    truncated=True,
)

TABLE_SETS: dict[str, tuple[Table, ...]] = {
    "moma": (ARTISTS, ARTWORKS),
    "employees": (EMPLOYEE,),
    "all": (ARTISTS, ARTWORKS, EMPLOYEE),
    "shop": (ORDERS,),
}


def table_set(names: str, seed: int = 7) -> tuple[Table, ...]:
    """The tables of comma-separated set names (`all,shop`); `synthetic:N` is a database of N tables drawn from
    `seed` (`simulators/synthetic.py`)."""
    from simulators import synthetic  # it builds on this module's tables

    return tuple(table for name in names.split(",")
                 for table in (synthetic.database(synthetic.size(name), seed) if synthetic.size(name)
                               else TABLE_SETS[name.strip()]))
