"""One simulator run: the source commits changes, the ground truth records them, a format encodes them, the
fault injector perturbs the stream, and a transport delivers it."""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

from tqdm import tqdm

from registry.avro import AvroSchema, avro_schema
from registry.serde import AvroSerde
from simulators.faults import AVRO_POISON, JSON_POISON, FaultInjector, Message, avro_poison, json_poison
from simulators.formats import FORMATS, DebeziumEnvelope, Format
from simulators.source import Change, SourceDatabase
from simulators.tables import TABLE_SETS, Table
from simulators.transport import Transport
from simulators.truth import TruthStore

TRUTH_BATCH = 5_000


class SimulationError(RuntimeError):
    pass


@dataclass(frozen=True)
class SimulationOptions:
    format: str = "debezium"
    tables: str = "all"
    events: int = 10_000
    duration_s: float | None = None
    rate: float | None = None  # events per second at most
    seed: int = 7
    duplicates: float = 0.0
    reorder: float = 0.0
    poison: float = 0.0
    evolve_at: int | None = None  # after this many events the tables gain a column
    snapshot_rows: int = 100  # rows per table in the initial snapshot
    tombstones: bool = False  # Debezium envelope only: a null-valued message after each delete
    topic_prefix: str | None = None  # replaces the server name in <server>.<schema>.<table>

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise SimulationError(f"unknown format {self.format!r}; choose one of {', '.join(FORMATS)}")
        if self.tables not in TABLE_SETS:
            raise SimulationError(f"unknown table set {self.tables!r}; choose one of {', '.join(TABLE_SETS)}")
        for name in ("duplicates", "reorder", "poison"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise SimulationError(f"--{name} is a probability between 0 and 1, got {getattr(self, name)}")


@dataclass
class Summary:
    events: Counter = field(default_factory=Counter)  # (table, op) -> count
    faults: Counter = field(default_factory=Counter)
    messages_acknowledged: int = 0
    seconds: float = 0.0
    topics: list[str] = field(default_factory=list)

    @property
    def total_events(self) -> int:
        return sum(self.events.values())

    def lines(self) -> list[str]:
        rate = self.total_events / self.seconds if self.seconds else 0.0
        out = [f"events: {self.total_events} in {self.seconds:.1f} s ({rate:,.0f} events/s); "
               f"messages acknowledged: {self.messages_acknowledged}"]
        for (table, op), count in sorted(self.events.items()):
            out.append(f"  {table:<26} {op}  {count}")
        if self.faults:
            out.append("faults injected: " + ", ".join(f"{k}={v}" for k, v in sorted(self.faults.items())))
        return out


class Simulation:
    def __init__(self, options: SimulationOptions, transport: Transport, truth: TruthStore,
                 serde: AvroSerde | None) -> None:
        self.options = options
        self.format: Format = FORMATS[options.format](**({"tombstones": options.tombstones}
                                                        if options.format == DebeziumEnvelope.name else {}))
        if self.format.avro and serde is None:
            raise SimulationError(f"format {options.format} is registry-backed Avro: it needs a schema registry")
        if truth.count():
            raise SimulationError(f"the truth store {truth.path} already holds {truth.count()} changes of an earlier "
                                  "run; give this run its own --truth file (and --topic-prefix)")
        self.tables = TABLE_SETS[options.tables]
        self.source = SourceDatabase(self.tables, seed=options.seed, rows_per_table=options.snapshot_rows)
        self.transport, self.truth, self.serde = transport, truth, serde
        self.faults = FaultInjector(options.seed, options.duplicates, options.reorder, options.poison)
        self._topics = {t.name: self.topic(t) for t in self.tables}
        self._schemas: dict[tuple[str, int], AvroSchema] = {}
        self._key_schemas: dict[str, AvroSchema | None] = {}  # None: the format keys by the key's text
        self._key_bytes: dict[tuple[str, int], bytes] = {}  # a key's framed bytes never change

    def topic(self, table: Table) -> str:
        return f"{self.options.topic_prefix or table.database}.{table.schema}.{table.name}"

    def run(self, progress: bool = True) -> Summary:
        summary = Summary(topics=list(self._topics.values()))
        self.transport.prepare(summary.topics)
        started = time.perf_counter()
        pending: list[Change] = []
        bar = tqdm(total=self.options.events, unit="ev", unit_scale=True, disable=not progress,
                   desc=f"simulate {self.options.format}", mininterval=0.5 if sys.stderr.isatty() else 5.0)
        for count, change in enumerate(self._changes(started), start=1):
            pending.append(change)
            summary.events[(change.table.qualified, change.op)] += 1
            for message in self._messages(change):
                self.transport.send(message)
            if len(pending) >= TRUTH_BATCH:
                self.truth.record(pending)
                pending.clear()
                bar.update(TRUTH_BATCH)
            if self.options.rate and count % 100 == 0:
                ahead = count / self.options.rate - (time.perf_counter() - started)
                if ahead > 0:
                    time.sleep(ahead)
        self.truth.record(pending)
        bar.update(len(pending))
        bar.close()
        for message in self.faults.drain():
            self.transport.send(message)
        summary.messages_acknowledged = self.transport.close().acknowledged
        summary.seconds = time.perf_counter() - started
        summary.faults = self.faults.counts
        return summary

    def _changes(self, started: float) -> Iterator[Change]:
        """Snapshot, then transactions, until the event count or the duration is reached."""
        options, emitted = self.options, 0

        def stream() -> Iterator[Change]:
            yield from self.source.snapshot()
            for transaction in self.source.transactions():
                yield from transaction

        for change in stream():
            if emitted >= options.events or (options.duration_s and time.perf_counter() - started > options.duration_s):
                return
            if options.evolve_at is not None and emitted == options.evolve_at:
                self.source.evolve()
            emitted += 1
            yield change

    def _messages(self, change: Change) -> Iterator[Message]:
        topic = self._topics[change.table.name]
        if not self.format.avro:
            message = Message(topic, self.format.key(change), self.format.value(change))
            yield from self.faults.apply(message, lambda kind: json_poison(kind, message), JSON_POISON)
            return
        assert self.serde is not None
        version = self._writer_version(change)
        schema = self._value_schema(change.table, version)
        record = self.format.value(change)
        key = self._key(topic, change)
        message = Message(topic, key, self.serde.serialize(topic, schema, record))
        if not self.faults.active:
            yield message
        else:
            yield from self.faults.apply(
                message,
                lambda kind: avro_poison(kind, message, self.serde.wire,
                                         self.format.value_schema(change.table, version), record, change.table.key),
                AVRO_POISON,
            )
        if change.op == "d" and self.options.tombstones:
            yield Message(topic, key, None)

    def _writer_version(self, change: Change) -> int:
        """After evolution old and new writers interleave; a row holding a value of the new column needs v2."""
        if self.source.schema_version == 1:
            return 1
        if change.image.get(change.table.evolution.name) is not None:
            return 2
        return 1 if change.lsn % 2 else 2

    def _value_schema(self, table: Table, version: int) -> AvroSchema:
        found = self._schemas.get((table.name, version))
        if found is None:
            found = self._schemas[(table.name, version)] = avro_schema(self.format.value_schema(table, version))
        return found

    def _key(self, topic: str, change: Change) -> bytes:
        cached = self._key_bytes.get((change.table.name, change.key))
        if cached is not None:
            return cached
        schema = self._key_schemas.get(change.table.name)
        if schema is None and change.table.name not in self._key_schemas:
            key_schema = self.format.key_schema(change.table)
            schema = self._key_schemas[change.table.name] = None if key_schema is None else avro_schema(key_schema)
        if schema is None:
            key = self.format.key(change)
        else:
            key = self.serde.serialize(topic, schema, self.format.key(change), is_key=True)  # type: ignore[union-attr]
        if len(self._key_bytes) > 2_000_000:  # bound the cache on very long runs
            self._key_bytes.clear()
        self._key_bytes[(change.table.name, change.key)] = key
        return key

