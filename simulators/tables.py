"""The simulated source tables: the MoMA `artists` and `artworks` tables of the Debezium/Hudi post, and the
`employee` table of the streaming-Iceberg example. Columns, keys and partition-like columns match the seeds.

Each table also names the nullable column that schema evolution adds mid-run (an `ALTER TABLE … ADD COLUMN`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

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
    avro_type: str  # the Avro primitive; every non-key column is nullable, as Debezium writes them
    generate: Generator | None = None  # None for the key, which the source assigns


@dataclass(frozen=True)
class Table:
    database: str  # the Debezium server name and database
    schema: str
    name: str
    key: str
    columns: tuple[Column, ...]  # key column first
    partition_column: str  # a partition-like column that updates sometimes move
    evolution: Column  # the nullable column added mid-run; null in about half the rows

    @cached_property  # every event names its table: build the text once
    def qualified(self) -> str:
        return f"{self.database}.{self.schema}.{self.name}"

    def columns_at(self, version: int) -> tuple[Column, ...]:
        """Schema version 1 is the original table; version 2 has the evolution column."""
        return self.columns if version == 1 else (*self.columns, self.evolution)

    def value_columns(self, version: int) -> tuple[Column, ...]:
        return tuple(col for col in self.columns_at(version) if col.name != self.key)


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

TABLE_SETS: dict[str, tuple[Table, ...]] = {
    "moma": (ARTISTS, ARTWORKS),
    "employees": (EMPLOYEE,),
    "all": (ARTISTS, ARTWORKS, EMPLOYEE),
}
