"""`--tables synthetic:N`: a source database of N tables (up to 1,000) with the shapes real schemas have, drawn
from the seed, so one seed gives the same database every time.

A table is data (`simulators/tables.py`'s `Table` of `Column`s), so the rest of the simulator (rows, Avro
schemas, registration, evolution, the ground truth) treats it like the hand-written ones. What varies:
- 3 to 120 columns, log-uniform (most tables narrow, a few wide);
- the column kinds of `KINDS`: plain Avro types and every Debezium semantic type `cdc/semantic_types.py` maps,
  each present in any database of `len(KINDS)` tables or more; TOAST-able text; every non-key column nullable;
- a primary key of the serial alone, of two or three columns (one table in five), or none (one in fifty);
- sizes and change rates Zipf-distributed over a seeded order of the tables: a few hot tables, a long quiet tail.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from simulators.semantic import semantic
from simulators.tables import LAST, Column, Generator, Table

PREFIX = "synthetic:"
MAX_TABLES = 1_000
DATABASE = "synth"
ZIPF_EXPONENT = 1.1  # over 200 tables the hottest 10 % carry about 70 % of the changes
COMPOSITE_EVERY, KEYLESS_EVERY = 5, 50  # one table in five has a composite key, one in fifty none
STEMS = ("orders", "customers", "invoices", "payments", "events", "sessions", "accounts", "products", "shipments",
         "audit_log", "tickets", "users", "devices", "readings", "contracts", "refunds", "carts", "messages")
STATES = ("active", "pending", "suspended", "closed")


def size(name: str) -> int | None:
    """N of a `synthetic:N` set name; None for any other name; ValueError for an N out of range."""
    name = name.strip()
    if not name.startswith(PREFIX):
        return None
    count = name.removeprefix(PREFIX)
    if not count.isdigit() or not 1 <= int(count) <= MAX_TABLES:
        raise ValueError(f"--tables {name}: N must be a whole number from 1 to {MAX_TABLES}")
    return int(count)


def _nullable(generate: Generator, rate: float = 0.2) -> Generator:
    return lambda rng: None if rng.random() < rate else generate(rng)


def _toast(rng: random.Random) -> str:
    """A text long enough for Postgres to store out of line (over ~2 kB), cheap to draw: a table may have many."""
    return f"{rng.choice(LAST)} {rng.getrandbits(64):016x} " * (100 + rng.randint(0, 50))


def _decimal_type(precision: int, scale: int) -> dict[str, Any]:
    """A Kafka Connect Decimal, as Debezium's Avro converter writes `numeric(p, s)`."""
    return {"type": "bytes", "scale": scale, "precision": precision, "logicalType": "decimal", "connect.version": 1,
            "connect.parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
            "connect.name": "org.apache.kafka.connect.data.Decimal"}


VARIABLE_SCALE = {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
                  "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
                  "connect.version": 1, "connect.name": "io.debezium.data.VariableScaleDecimal"}


def _variable_scale(rng: random.Random) -> dict[str, Any]:
    """Postgres `numeric` without a precision: the unscaled digits as two's-complement bytes, and the scale."""
    digits = rng.randint(-10**12, 10**12)
    return {"scale": rng.randint(0, 6), "value": digits.to_bytes(8, "big", signed=True)}


def _zoned_timestamp(rng: random.Random) -> str:
    return (f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
            f":{rng.randint(0, 59):02d}.{rng.randint(0, 999_999):06d}Z")


@dataclass(frozen=True)
class Kind:
    """A kind of column: its name's stem, Avro type and values."""

    stem: str
    avro_type: str | dict[str, Any]
    generate: Generator
    toasted: bool = False


KINDS: tuple[Kind, ...] = (
    Kind("count", "int", lambda rng: rng.randint(-1000, 100_000)),
    Kind("ref", "long", lambda rng: rng.randint(1, 10**15)),
    Kind("flag", "boolean", lambda rng: rng.random() < 0.5),
    Kind("ratio", "double", lambda rng: round(rng.uniform(-1e6, 1e6), 2)),
    Kind("score", "float", lambda rng: rng.randint(0, 4000) / 4),  # exact in 32 bits
    Kind("label", "string", lambda rng: f"{rng.choice(LAST)}-{rng.randint(1, 999)}"),
    Kind("payload", "bytes", lambda rng: rng.randbytes(rng.randint(1, 24))),
    Kind("notes", "string", _toast, toasted=True),
    Kind("created", semantic("long", "io.debezium.time.Timestamp"),
         lambda rng: rng.randint(1_500_000_000_000, 1_800_000_000_000)),
    Kind("updated", semantic("long", "io.debezium.time.MicroTimestamp"),
         lambda rng: rng.randint(1_500_000_000_000_000, 1_800_000_000_000_000)),
    Kind("logged", semantic("long", "io.debezium.time.NanoTimestamp"),
         lambda rng: rng.randint(1_500_000_000_000_000_000, 1_800_000_000_000_000_000)),
    Kind("seen", {**semantic("long", "org.apache.kafka.connect.data.Timestamp"), "logicalType": "timestamp-millis"},
         lambda rng: rng.randint(1_500_000_000_000, 1_800_000_000_000)),
    Kind("at", semantic("string", "io.debezium.time.ZonedTimestamp"), _zoned_timestamp),
    Kind("day", semantic("int", "io.debezium.time.Date"), lambda rng: rng.randint(0, 25_000)),
    Kind("due", {**semantic("int", "org.apache.kafka.connect.data.Date"), "logicalType": "date"},
         lambda rng: rng.randint(0, 25_000)),
    Kind("opens", semantic("int", "io.debezium.time.Time"), lambda rng: rng.randint(0, 86_399_999)),
    Kind("starts", semantic("long", "io.debezium.time.MicroTime"), lambda rng: rng.randint(0, 86_399_999_999)),
    Kind("ends", semantic("long", "io.debezium.time.NanoTime"), lambda rng: rng.randint(0, 86_399_999_999_999)),
    Kind("local", semantic("string", "io.debezium.time.ZonedTime"),
         lambda rng: f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}."
                     f"{rng.randint(0, 999_999):06d}Z"),
    Kind("amount", _decimal_type(12, 2), lambda rng: Decimal(rng.randint(-10**11, 10**11)).scaleb(-2)),
    Kind("balance", _decimal_type(38, 10), lambda rng: Decimal(rng.randint(-10**27, 10**27)).scaleb(-10)),
    Kind("measure", VARIABLE_SCALE, _variable_scale),
    Kind("attrs", semantic("string", "io.debezium.data.Json"),
         lambda rng: f'{{"n": {rng.randint(0, 99)}, "tag": "{rng.choice(LAST)}"}}'),
    Kind("doc", semantic("string", "io.debezium.data.Xml"), lambda rng: f"<v n=\"{rng.randint(0, 99)}\"/>"),
    Kind("uid", semantic("string", "io.debezium.data.Uuid"), lambda rng: str(uuid.UUID(int=rng.getrandbits(128)))),
    Kind("state", semantic("string", "io.debezium.data.Enum", allowed=",".join(STATES)),
         lambda rng: rng.choice(STATES)),
    Kind("perms", semantic("string", "io.debezium.data.EnumSet", allowed="read,write,admin"),
         lambda rng: ",".join(sorted(rng.sample(["read", "write", "admin"], rng.randint(1, 3))))),
)
ONCE = frozenset({"measure"})  # a named Avro type: defined once in a schema, so at most one column a table
KEY_TYPES = ("int", "long", "string")  # of a composite key's derived columns


def database(count: int, seed: int) -> tuple[Table, ...]:
    """`count` tables drawn from `seed`; their weights (sizes and change rates) Zipf over a seeded order."""
    rng = random.Random(f"synthetic:{seed}")
    ranks = list(range(1, count + 1))
    rng.shuffle(ranks)
    return tuple(_table(index, rng, 1.0 / rank ** ZIPF_EXPONENT) for index, rank in enumerate(ranks))


def _table(index: int, rng: random.Random, weight: float) -> Table:
    width = min(120, round(3 * 40 ** rng.random()))  # 3 to 120 columns, log-uniform
    serial, keyless = Column("id", "long"), index % KEYLESS_EVERY == KEYLESS_EVERY - 1
    parts: tuple[Column, ...] = ()
    if index % COMPOSITE_EVERY == 2 and not keyless:
        parts = tuple(Column(f"key_{n}", rng.choice(KEY_TYPES)) for n in range(1, rng.randint(2, 3)))
    primary_key = () if keyless else (serial.name, *(c.name for c in parts))
    kinds = [KINDS[index % len(KINDS)]]  # each kind in any database of len(KINDS) tables or more
    while len(kinds) < max(2, width - 1 - len(parts)):
        kind = rng.choice(KINDS)
        if kind.stem not in ONCE or kind not in kinds:
            kinds.append(kind)
    values = tuple(Column(f"{kind.stem}_{n}", kind.avro_type, _nullable(kind.generate), kind.toasted)
                   for n, kind in enumerate(kinds, start=1))
    return Table(
        DATABASE, "public", f"{STEMS[index % len(STEMS)]}_{index:04d}", serial.name, (serial, *parts, *values),
        partition_column=values[0].name,
        evolution=Column("added_note", "string", _nullable(lambda r: f"note {r.randint(1, 9999)}", 0.5)),
        primary_key=primary_key, weight=weight,
    )
