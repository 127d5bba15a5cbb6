"""One simulator run: the source commits changes, the ground truth records them, a format encodes them, the
fault injector perturbs the stream, and a transport delivers it."""

from __future__ import annotations

import itertools
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from tqdm import tqdm

from registry.avro import avro_schema
from registry.serde import AvroSerde
from simulators import synthetic
from simulators.faults import AVRO_POISON, JSON_POISON, FaultInjector, Message, avro_poison, json_poison
from simulators.formats import FORMATS, DebeziumEnvelope, Format
from simulators.source import Change, SourceDatabase
from simulators.tables import TABLE_SETS, Table, table_set
from simulators.transport import Transport
from simulators.truth import TruthStore

TRUTH_BATCH = 5_000
TRUNCATE_EVERY = 150  # transactions between truncates of the tables that have them (Debezium envelope only)
Serializer = Callable[[Any], bytes]


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
        try:
            unknown = [name for name in self.tables.split(",")
                       if name.strip() not in TABLE_SETS and not synthetic.size(name)]
        except ValueError as exc:
            raise SimulationError(str(exc)) from None
        if unknown:
            raise SimulationError(f"unknown table set {', '.join(unknown)}; choose one or more (comma-separated) "
                                  f"of {', '.join(TABLE_SETS)} or {synthetic.PREFIX}N")
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
        self.tables = table_set(options.tables, options.seed)
        truth.define(self.tables)
        # Only the envelope carries truncates: the unwrap SMT drops them, DMS does not replicate them.
        self.source = SourceDatabase(self.tables, seed=options.seed, rows_per_table=options.snapshot_rows,
                                     truncate_every=TRUNCATE_EVERY if options.format == DebeziumEnvelope.name else None)
        self.transport, self.truth, self.serde = transport, truth, serde
        self.faults = FaultInjector(options.seed, options.duplicates, options.reorder, options.poison)
        self._topics = {t.name: self.topic(t) for t in self.tables}
        self._faulty = self.faults.active  # the rates are fixed: asked once, not per change
        self._poison_kinds = AVRO_POISON if self.format.avro else JSON_POISON
        self._tombstones = options.tombstones and self.format.avro
        self._values: dict[tuple[str, int], Serializer] = {}  # (table, schema version) -> value serializer
        self._key_serializers: dict[str, Serializer] = {}
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
            self._send(change)
            if len(pending) >= TRUTH_BATCH:
                self._record(pending, summary, bar)
            if self.options.rate and count % 100 == 0:
                ahead = count / self.options.rate - (time.perf_counter() - started)
                if ahead > 0:
                    time.sleep(ahead)
        self._record(pending, summary, bar)
        self.truth.index()
        bar.close()
        for message in self.faults.drain():
            self.transport.send(message)
        summary.messages_acknowledged = self.transport.close().acknowledged
        summary.seconds = time.perf_counter() - started
        summary.faults = self.faults.counts
        return summary

    def _record(self, changes: list[Change], summary: Summary, bar: tqdm) -> None:
        """Hand a batch of committed changes to the ground truth and count them (a batch at a time: cheaper than
        a counter update per change), then empty the batch."""
        self.truth.record(changes)
        summary.events.update((change.table.qualified, change.op) for change in changes)
        bar.update(len(changes))
        changes.clear()

    def _changes(self, started: float) -> Iterator[Change]:
        """Snapshot, then transactions, until the event count or the duration is reached."""
        options, emitted = self.options, 0
        stream = itertools.chain(self.source.snapshot(), itertools.chain.from_iterable(self.source.transactions()))
        for change in stream:
            if emitted >= options.events or (options.duration_s and time.perf_counter() - started > options.duration_s):
                return
            if options.evolve_at is not None and emitted == options.evolve_at:
                self.source.evolve()
            emitted += 1
            yield change

    def _send(self, change: Change) -> None:
        """The change's message, or what the fault injector makes of it, then a tombstone after a delete."""
        message = self._message(change)
        if self._faulty and change.op != "t":  # a truncate is sent as it is: see docs/types.md
            for perturbed in self.faults.apply(message, self._poison(change, message), self._poison_kinds):
                self.transport.send(perturbed)
        else:
            self.transport.send(message)
        if self._tombstones and change.op == "d":
            self.transport.send(Message(message.topic, message.key, None))

    def _message(self, change: Change) -> Message:
        topic = self._topics[change.table.name]
        if not self.format.avro:
            return Message(topic, self.format.key(change), self.format.value(change))
        # a truncate has no key, nor has a row of a table without a primary key
        key = None if change.op == "t" or not change.table.keys else self._key(topic, change)
        return Message(topic, key, self._value_serializer(topic, change)(self.format.value(change)))

    def _poison(self, change: Change, message: Message) -> Callable[[str], Message]:
        """Makes an undecodable variant of `message` of a given kind, when the injector asks for one."""
        if not self.format.avro:
            return lambda kind: json_poison(kind, message)
        table, version = change.table, self._writer_version(change)
        return lambda kind: avro_poison(kind, message, self.serde.wire,  # type: ignore[union-attr]
                                        self.format.value_schema(table, version), self.format.value(change), table.key)

    def _writer_version(self, change: Change) -> int:
        """After evolution old and new writers interleave; a row holding a value of the new column needs v2."""
        if self.source.schema_version == 1:
            return 1
        if change.op == "t":
            return 2
        if change.image.get(change.table.evolution.name) is not None:
            return 2
        return 1 if change.lsn % 2 else 2

    def _value_serializer(self, topic: str, change: Change) -> Serializer:
        version = self._writer_version(change)
        found = self._values.get((change.table.name, version))
        if found is None:
            schema = avro_schema(self.format.value_schema(change.table, version))
            found = self.serde.serializer(topic, schema)  # type: ignore[union-attr]
            self._values[(change.table.name, version)] = found
        return found

    def _key(self, topic: str, change: Change) -> bytes:
        cached = self._key_bytes.get((change.table.name, change.key))
        if cached is not None:
            return cached
        key = self._key_serializer(topic, change.table)(self.format.key(change))
        if len(self._key_bytes) > 2_000_000:  # bound the cache on very long runs
            self._key_bytes.clear()
        self._key_bytes[(change.table.name, change.key)] = key
        return key

    def _key_serializer(self, topic: str, table: Table) -> Serializer:
        """The key schema's serializer; where the format keys by the key's text (DMS), that text unchanged."""
        found = self._key_serializers.get(table.name)
        if found is None:
            schema = self.format.key_schema(table)
            found = self._key_serializers[table.name] = (
                _unchanged if schema is None
                else self.serde.serializer(topic, avro_schema(schema), is_key=True))  # type: ignore[union-attr]
        return found


def _unchanged(key: bytes) -> bytes:
    return key
