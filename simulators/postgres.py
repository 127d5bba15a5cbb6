"""Random DML on a real PostgreSQL, for real Debezium to capture, and the source's rows as the lake should hold them.

`ShopDriver` creates `customers` and `orders` with the column types real sources have (timestamptz, timestamp,
date, time, numeric with and without precision, json/jsonb, uuid, an enum, bytea, a large TOASTed text under
`REPLICA IDENTITY DEFAULT`) and, from a seed, runs inserts, updates, deletes and re-inserts, with an
`ALTER TABLE ... ADD COLUMN`, a `TRUNCATE` and primary-key changes mid-run. PostgreSQL itself is the truth:
`lake_rows` reads `SELECT *` back as the Python values of the lake types (`LAKE_TYPES`), and `compare_mirror`
checks a mirror's column types and live rows against it.
"""

from __future__ import annotations

import argparse
import random
import string
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from cdc.columns import is_pipeline_column
from pipeline.stack.psql import Psql
from tables.names import SourceTable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.config.settings import PipelineConfig
    from pipeline.ops.verify import TableVerdict

TIERS = ("bronze", "silver", "gold")
STATUSES = ("new", "paid", "shipped", "cancelled")
NAMES = ("Ada", "Grace", "Linus", "Edsger", "Barbara", "Ken", "Margaret", "Dennis", "Siobhán", "Conan O'Brien")
TOAST_CHARS = 6000  # random letters compress too little to stay inline: stored out of line (TOASTed)
KEYS = {"customers": "id", "orders": "order_id"}

SCHEMA = f"""
DROP TABLE IF EXISTS customers, orders;
DROP TYPE IF EXISTS tier;
CREATE TYPE tier AS ENUM ({", ".join(f"'{t}'" for t in TIERS)});
CREATE TABLE customers (
    id serial PRIMARY KEY, name text, email text, balance numeric(12,2), created_at timestamptz, tags jsonb,
    birthday date, wakes_at time, uid uuid, tier tier, score numeric, avatar bytea, notes text);
CREATE TABLE orders (
    order_id bigint PRIMARY KEY, customer_id int, amount numeric(10,2), status text, updated_at timestamp,
    meta json);
"""

# What each source type lands as in the lake (Spark's simpleString), the contract the pipeline keeps.
LAKE_TYPES = {
    "integer": "int", "bigint": "bigint", "text": "string", "character varying": "string",
    "timestamp with time zone": "timestamp", "timestamp without time zone": "timestamp_ntz", "date": "date",
    "time without time zone": "string", "jsonb": "string", "json": "string", "uuid": "string",
    "USER-DEFINED": "string", "bytea": "binary", "boolean": "boolean",
}


@dataclass(frozen=True)
class SourceColumn:
    name: str
    pg_type: str  # information_schema's data_type
    precision: int | None
    scale: int | None

    @property
    def lake_type(self) -> str:
        if self.pg_type == "numeric":  # numeric without precision: Debezium's VariableScaleDecimal
            return f"decimal({self.precision},{self.scale})" if self.precision else "decimal(38,18)"
        return LAKE_TYPES[self.pg_type]

    @property
    def select(self) -> str:
        """The expression that reads the column as text where JSON would lose its exact form."""
        if self.pg_type in ("json", "jsonb", "time without time zone", "uuid", "USER-DEFINED", "numeric"):
            return f"{self.name}::text AS {self.name}"
        if self.pg_type == "bytea":
            return f"encode({self.name}, 'hex') AS {self.name}"
        return self.name

    def lake_value(self, text: Any) -> Any:
        """The Python value the lake column holds for the source's value."""
        if text is None:
            return None
        kind = self.lake_type
        if kind == "timestamp":
            return datetime.fromisoformat(text).astimezone(timezone.utc)
        if kind == "timestamp_ntz":
            return datetime.fromisoformat(text)
        if kind == "date":
            return date.fromisoformat(text)
        if kind == "binary":
            return bytes.fromhex(text)
        if kind.startswith("decimal"):
            return Decimal(text)
        if self.pg_type == "time without time zone":
            return time.fromisoformat(text).isoformat(timespec="microseconds")
        return text


@dataclass
class Summary:
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def line(self) -> str:
        return ", ".join(f"{kind}={n}" for kind, n in sorted(self.counts.items()))


class ShopDriver:
    """Seeded random DML; it knows which keys exist, so every statement changes a row (no silent no-ops)."""

    def __init__(self, psql: Psql, seed: int = 7) -> None:
        self.psql = psql
        self.rng = random.Random(seed)
        self.customers: set[int] = set()
        self.deleted_customers: set[int] = set()
        self.orders: set[int] = set()
        self.gone_orders: set[int] = set()
        self.truncated: set[int] = set()  # the order keys a TRUNCATE removed
        self.next_customer = 1  # the serial's next value: only inserts that take the default advance it
        self.next_order = 10_000_000_000  # beyond int: exercises bigint
        self.coupon_added = False

    def create(self, customers: int = 20, orders: int = 20) -> None:
        """The tables and a first set of rows (what the connector's snapshot reads)."""
        self.psql.execute(SCHEMA)
        self._apply([self._insert_customer() for _ in range(customers)] + [self._insert_order() for _ in range(orders)])

    def run(self, operations: int, batch: int = 40, truncate: bool = True) -> Summary:
        """`operations` random changes, in psql batches of `batch`; the column is added at 40 % (unless it
        exists), orders are truncated at 60 % (unless `truncate` is off: Debezium's unwrap transform drops
        truncate events, so a flattened stream cannot follow one)."""
        summary = Summary()
        statements: list[str] = []
        for n in range(operations):
            if n == int(operations * 0.4) and not self.coupon_added:
                statements.append("ALTER TABLE orders ADD COLUMN coupon text;")
                self.coupon_added = True
                summary.add("add_column")
            elif n == int(operations * 0.6) and truncate:
                statements.append("TRUNCATE orders;")
                self.truncated |= self.orders
                self.gone_orders |= self.orders
                self.orders.clear()
                summary.add("truncate")
            else:
                kind, statement = self._random_change()
                statements.append(statement)
                summary.add(kind)
            if len(statements) >= batch:
                self._apply(statements)
                statements = []
        self._apply(statements)
        return summary

    def attach(self) -> None:
        """Take up the keys of tables an earlier process created (deletions before now are not re-inserted)."""
        self.customers = {r["id"] for r in self.psql.rows("SELECT id FROM customers")}
        self.orders = {r["order_id"] for r in self.psql.rows("SELECT order_id FROM orders")}
        self.next_customer = self.psql.rows("SELECT nextval('customers_id_seq') AS n")[0]["n"]
        self.psql.execute(f"SELECT setval('customers_id_seq', {self.next_customer}, false);")
        self.next_order = max(self.orders | {self.next_order - 1}) + 1
        self.coupon_added = any(c.name == "coupon" for c in source_columns(self.psql, "orders"))

    def mark_end(self) -> str:
        """The WAL position after every change so far; one more change (a balance) follows it, so a connector
        that has delivered a change at or after it has delivered all of them (`pipeline.stack.debezium.
        wait_delivered`)."""
        lsn = self.psql.execute("SELECT pg_current_wal_lsn();").strip()
        self._apply([f"UPDATE customers SET balance = balance + 1 WHERE id = {min(self.customers)};"])
        return lsn

    def _apply(self, statements: list[str]) -> None:
        if statements:
            self.psql.execute("\n".join(statements))

    def _random_change(self) -> tuple[str, str]:
        roll = self.rng.random()
        if roll < 0.15 or not self.customers:
            return "insert_customer", self._insert_customer()
        if roll < 0.40:
            return "update_customer", self._update_customer()
        if roll < 0.47 and len(self.customers) > 5:
            return "delete_customer", self._delete_customer()
        if roll < 0.52 and self.deleted_customers:
            return "reinsert_customer", self._insert_customer(self.rng.choice(sorted(self.deleted_customers)))
        if roll < 0.68 or not self.orders:
            return "insert_order", self._insert_order()
        if roll < 0.85:
            return "update_order", self._update_order()
        if roll < 0.92:
            return "delete_order", self._delete_order()
        if roll < 0.96 and self.gone_orders:
            return "reinsert_order", self._insert_order(self.rng.choice(sorted(self.gone_orders)))
        return "change_order_key", self._change_order_key()

    def _insert_customer(self, reuse: int | None = None) -> str:
        values = self._customer_values(with_notes=True)
        if reuse is None:
            self.customers.add(self.next_customer)
            self.next_customer += 1
            return f"INSERT INTO customers ({', '.join(values)}) VALUES ({', '.join(values.values())});"
        self.deleted_customers.discard(reuse)
        self.customers.add(reuse)
        return (f"INSERT INTO customers (id, {', '.join(values)}) "
                f"VALUES ({reuse}, {', '.join(values.values())});")

    def _update_customer(self) -> str:
        """Mostly without the large `notes`: Debezium then sends its TOAST placeholder instead of the value."""
        values = self._customer_values(with_notes=self.rng.random() < 0.1)
        chosen = self.rng.sample(sorted(values), k=self.rng.randint(1, 4))
        if "notes" in values and "notes" not in chosen:
            chosen.append("notes")
        customer = self.rng.choice(sorted(self.customers))
        return f"UPDATE customers SET {', '.join(f'{c} = {values[c]}' for c in chosen)} WHERE id = {customer};"

    def _delete_customer(self) -> str:
        customer = self.rng.choice(sorted(self.customers))
        self.customers.discard(customer)
        self.deleted_customers.add(customer)
        return f"DELETE FROM customers WHERE id = {customer};"

    def _insert_order(self, reuse: int | None = None) -> str:
        order = reuse if reuse is not None else self.next_order
        if reuse is None:
            self.next_order += self.rng.randint(1, 3)
        self.gone_orders.discard(order)
        self.orders.add(order)
        values = {"order_id": str(order), **self._order_values()}
        return f"INSERT INTO orders ({', '.join(values)}) VALUES ({', '.join(values.values())});"

    def _update_order(self) -> str:
        values = self._order_values()
        chosen = self.rng.sample(sorted(values), k=self.rng.randint(1, 3))
        order = self.rng.choice(sorted(self.orders))
        return f"UPDATE orders SET {', '.join(f'{c} = {values[c]}' for c in chosen)} WHERE order_id = {order};"

    def _delete_order(self) -> str:
        order = self.rng.choice(sorted(self.orders))
        self.orders.discard(order)
        self.gone_orders.add(order)
        return f"DELETE FROM orders WHERE order_id = {order};"

    def _change_order_key(self) -> str:
        """An UPDATE of the primary key: Debezium sends a delete of the old key and a create of the new one."""
        old, new = self.rng.choice(sorted(self.orders)), self.next_order
        self.next_order += 1
        self.orders.discard(old)
        self.gone_orders.add(old)
        self.orders.add(new)
        return f"UPDATE orders SET order_id = {new}, status = 'rekeyed' WHERE order_id = {old};"

    def _customer_values(self, with_notes: bool) -> dict[str, str]:
        rng = self.rng
        name = f"{rng.choice(NAMES)} {rng.randint(1, 999)}"
        offset = rng.choice(("+00:00", "+02:00", "-05:30"))
        values = {
            "name": _text(name),
            "email": "NULL" if rng.random() < 0.1 else _text(f"{name.split()[0].lower()}{rng.randint(1, 99)}@shop.test"),
            "balance": str(Decimal(rng.randint(-10**6, 10**9)) / 100),
            "created_at": _text(f"{_moment(rng).isoformat()}{offset}") + "::timestamptz",
            "tags": _text(f'{{"vip": {str(rng.random() < 0.2).lower()}, "labels": ["{rng.choice(TIERS)}"], '
                          f'"visits": {rng.randint(0, 500)}}}') + "::jsonb",
            "birthday": _text((date(1940, 1, 1) + timedelta(days=rng.randint(0, 30000))).isoformat()) + "::date",
            "wakes_at": _text(time(rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59),
                                   rng.choice((0, rng.randint(0, 999_999)))).isoformat()) + "::time",
            "uid": _text(str(uuid.UUID(int=rng.getrandbits(128), version=4))) + "::uuid",
            "tier": _text(rng.choice(TIERS)) + "::tier",
            "score": rng.choice(("0", "-12", "3.14159", "1234567.5", "0.000001", "NULL")),
            "avatar": f"'\\x{rng.randbytes(rng.randint(0, 24)).hex()}'::bytea",
        }
        if with_notes:
            values["notes"] = _text("".join(rng.choices(string.ascii_letters, k=TOAST_CHARS)))
        return values

    def _order_values(self) -> dict[str, str]:
        rng = self.rng
        values = {
            "customer_id": str(rng.choice(sorted(self.customers | {0}))),
            "amount": str(Decimal(rng.randint(0, 10**8)) / 100),
            "status": _text(rng.choice(STATUSES)),
            "updated_at": _text(_moment(rng).isoformat()) + "::timestamp",
            "meta": _text(f'{{"channel":"{rng.choice(("web", "app", "phone"))}", "items": {rng.randint(1, 9)}}}') + "::json",
        }
        if self.coupon_added:
            values["coupon"] = "NULL" if rng.random() < 0.5 else _text(f"SAVE{rng.randint(5, 50)}")
        return values


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _moment(rng: random.Random) -> datetime:
    """A microsecond-precise time, before and after the Unix epoch."""
    return datetime(1965, 1, 1) + timedelta(seconds=rng.randint(0, 2_000_000_000), microseconds=rng.randint(0, 999_999))


def source_columns(psql: Psql, table: str) -> list[SourceColumn]:
    rows = psql.rows(f"SELECT column_name, data_type, numeric_precision, numeric_scale FROM information_schema.columns "
                     f"WHERE table_schema = 'public' AND table_name = '{table}' ORDER BY ordinal_position")
    return [SourceColumn(r["column_name"], r["data_type"], r["numeric_precision"], r["numeric_scale"]) for r in rows]


def lake_rows(psql: Psql, table: str) -> list[dict[str, Any]]:
    """`SELECT *` of the source table, each value as the lake type's Python value."""
    columns = source_columns(psql, table)
    rows = psql.rows(f"SELECT {', '.join(c.select for c in columns)} FROM {table}")
    return [{c.name: c.lake_value(row[c.name]) for c in columns} for row in rows]


@dataclass(frozen=True)
class Comparison:
    """A mirror against its source table: columns with the wrong lake type, then the live rows' verdict."""

    type_mismatches: list[str]
    verdict: TableVerdict

    @property
    def ok(self) -> bool:
        return not self.type_mismatches and self.verdict.mismatches == 0

    def lines(self, width: int = 240) -> list[str]:
        """The report, each line cut to `width` (a TOAST column's values run to kilobytes)."""
        lines = [*self.verdict.lines(), *[f"  type     {m}" for m in self.type_mismatches]]
        return [line if len(line) <= width else line[:width] + " ..." for line in lines]


def compare_mirror(cfg: PipelineConfig, spark: SparkSession, psql: Psql, source_table: str,
                   lake_name: str, key: str | None = None) -> Comparison:
    """The mirror's live rows (its state: in the pending layout its base and pending changes) against `SELECT *`
    by `key` (the shop table's own by default); a column of the wrong type is reported and left out of the value
    comparison (its values could not be compared)."""
    from pipeline.ops.verify import compare
    from tables.pending import mirror_state

    mirror = mirror_state(cfg, spark, lake_name).where("NOT _is_deleted")
    lake_types = {f.name: f.dataType.simpleString() for f in mirror.schema.fields}
    wrong = [f"{c.name}: lake {lake_types.get(c.name, 'missing')}, expected {c.lake_type} (source {c.pg_type})"
             for c in source_columns(psql, source_table) if lake_types.get(c.name) != c.lake_type]
    comparable = [c for c in mirror.columns
                  if is_pipeline_column(c) or not any(w.startswith(f"{c}:") for w in wrong)]
    key = key or KEYS[source_table]
    expected = {row[key]: row for row in lake_rows(psql, source_table)}
    return Comparison(wrong, compare(spark, mirror.select(*comparable), expected, [key], lake_name, source_table))


def main(argv: list[str] | None = None) -> int:
    """`python -m simulators.postgres create|run|compare`: the `make demo-postgres` steps on the stack's Postgres."""
    from pipeline.config.settings import load_config
    from pipeline.stack.debezium import wait_delivered

    parser = argparse.ArgumentParser(prog="python -m simulators.postgres", description=__doc__)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("action", choices=["create", "run", "compare"])
    parser.add_argument("--operations", type=int, default=500, help="run: random changes to make")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-truncate", action="store_true", help="run: no TRUNCATE (for the unwrap transform)")
    parser.add_argument("--connector", action="append", default=[],
                        help="run: wait until this Debezium connector has delivered every change to Kafka")
    parser.add_argument("--prefix", action="append", default=[], help="compare: the lake tables' topic prefix")
    args = parser.parse_args(argv)
    cfg = load_config(overrides=args.overrides)
    psql = Psql(cfg.stack)
    driver = ShopDriver(psql, args.seed)
    if args.action == "create":
        driver.create()
        print(f"created customers and orders in {cfg.stack.postgres_database}")
        return 0
    if args.action == "run":
        driver.attach()
        print(driver.run(args.operations, truncate=not args.no_truncate).line())
        lsn = driver.mark_end()
        for connector in args.connector:
            wait_delivered(cfg, connector, lsn)
        return 0
    from pipeline.runtime.spark import get_spark

    spark = get_spark(cfg)
    names = cfg.names.rule()
    comparisons = [compare_mirror(cfg, spark, psql, table, names.of(SourceTable(prefix, "public", table)))
                   for prefix in args.prefix for table in KEYS]
    print("\n".join(line for c in comparisons for line in c.lines()))
    return 0 if all(c.ok for c in comparisons) else 3


if __name__ == "__main__":
    raise SystemExit(main())
