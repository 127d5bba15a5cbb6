"""The simulator's source model, formats, ground truth and fault injection, without services."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from io import BytesIO
from pathlib import Path

import fastavro
import pytest

from registry.avro import avro_schema
from registry.serde import AvroSerde
from registry.wire import WireFormat
from simulators.faults import FaultInjector, Message
from simulators.formats import FORMATS, DebeziumEnvelope, DebeziumUnwrapped, DmsJson, sequence
from simulators.simulation import Simulation, SimulationError, SimulationOptions
from simulators.source import Change, SourceDatabase
from simulators.tables import ARTISTS, TABLE_SETS
from simulators.transport import Delivery
from simulators.truth import TruthStore


def _changes(n: int, seed: int = 3, evolve_at: int | None = None) -> list[Change]:
    db = SourceDatabase(TABLE_SETS["all"], seed=seed, rows_per_table=20)
    stream = itertools.chain(db.snapshot(), itertools.chain.from_iterable(db.transactions()))
    out = []
    for i, change in enumerate(itertools.islice(stream, n)):
        if i == evolve_at:
            db.evolve()
        out.append(change)
    return out


def test_snapshot_then_live_changes_follow_each_rows_lifecycle() -> None:
    alive: dict[tuple[str, int], bool] = {}
    for change in _changes(5000):
        was_alive = alive.get((change.table.name, change.key), False)
        assert was_alive == (change.op in ("u", "d")), change
        alive[(change.table.name, change.key)] = change.op != "d"


def test_sequence_is_commit_ordered_while_raw_lsn_is_not() -> None:
    changes = [c for c in _changes(5000) if c.op != "r"]
    seqs = [(c.last_commit_lsn, c.lsn) for c in changes]
    assert seqs == sorted(seqs)
    assert any(b.lsn < a.lsn for a, b in itertools.pairwise(changes))  # overlapping transactions
    commit_times = [c.commit_us for c in changes]
    assert commit_times == sorted(commit_times)
    assert all(a.commit_us < b.commit_us for a, b in itertools.pairwise(changes) if a.tx_id != b.tx_id)
    assert sequence(changes[0]) == f'["{changes[0].last_commit_lsn}","{changes[0].lsn}"]'


def test_realistic_mix_deletes_reinserts_and_partition_moves() -> None:
    changes = _changes(20000)
    ops = Counter(c.op for c in changes)
    assert ops["c"] and ops["u"] and ops["d"] and ops["r"] == 60
    deleted, reinserted, moved = set(), 0, 0
    for c in changes:
        key = (c.table.name, c.key)
        if c.op == "d":
            deleted.add(key)
        elif c.op == "c" and key in deleted:
            reinserted += 1
        elif c.op == "u" and c.before[c.table.partition_column] != c.after[c.table.partition_column]:
            moved += 1
    assert reinserted > 0 and moved > 0


def test_same_seed_same_stream() -> None:
    first, second = _changes(2000, seed=11), _changes(2000, seed=11)
    assert [(c.table.name, c.op, c.key, c.after) for c in first] == [(c.table.name, c.op, c.key, c.after) for c in second]


@pytest.mark.parametrize("fmt", ["debezium", "debezium-unwrapped", "dms"])
def test_avro_formats_encode_with_their_schema(fmt: str) -> None:
    format_ = FORMATS[fmt]()
    for change in _changes(300, evolve_at=200)[::7]:
        schema = avro_schema(format_.value_schema(change.table, change.schema_version))
        buffer = BytesIO()
        fastavro.schemaless_writer(buffer, schema.parsed, format_.value(change))
        decoded = fastavro.schemaless_reader(BytesIO(buffer.getvalue()), schema.parsed)
        image = {col.name: change.image.get(col.name) for col in change.table.columns_at(change.schema_version)}
        if fmt == "debezium":
            assert decoded["op"] == change.op and decoded["source"]["lsn"] == change.lsn
            assert (decoded["after"] or decoded["before"]) == image
            assert schema.full_name == f"{change.table.qualified}.Envelope"
        elif fmt == "debezium-unwrapped":
            assert decoded["__deleted"] == ("true" if change.op == "d" else "false")
            assert {k: v for k, v in decoded.items() if not k.startswith("__")} == image
        else:
            assert decoded["metadata"]["operation"] == {"r": "load", "c": "insert", "u": "update", "d": "delete"}[change.op]
            assert decoded["data"] == image


def test_debezium_key_schema_is_named_as_debezium_names_it() -> None:
    assert DebeziumEnvelope().key_schema(ARTISTS) == {
        "type": "record", "name": "Key", "namespace": "moma.public.artists",
        "fields": [{"name": "artist_id", "type": "int"}]}
    names = [f["name"] for f in DebeziumUnwrapped().value_schema(ARTISTS, 1)["fields"]]
    assert names[-7:] == ["__op", "__db", "__table", "__schema", "__lsn", "__source_ts_ms", "__deleted"]


def test_dms_json_uses_dms_metadata_names() -> None:
    change = _changes(1)[0]
    value = json.loads(DmsJson().value(change))
    assert set(value["metadata"]) >= {"timestamp", "record-type", "operation", "partition-key-type", "schema-name",
                                      "table-name", "transaction-id"}
    assert value["metadata"]["operation"] == "load" and value["data"]["artist_id"] == change.key


def test_truth_answers_state_at_time_and_key_history(tmp_path: Path) -> None:
    db = SourceDatabase(TABLE_SETS["moma"], seed=5, rows_per_table=10)
    truth = TruthStore(tmp_path / "truth.db")
    changes = list(itertools.chain(db.snapshot(), itertools.chain.from_iterable(itertools.islice(db.transactions(), 500))))
    truth.record(changes)
    assert truth.count() == len(changes)
    assert truth.state_at("moma.public.artists") == db.rows["artists"]  # now
    middle = changes[len(changes) // 2].commit_us
    replay: dict[int, dict] = {}
    for c in changes:
        if c.table.name == "artworks" and c.commit_us <= middle:
            replay.pop(c.key, None) if c.op == "d" else replay.__setitem__(c.key, c.after)
    assert truth.state_at("moma.public.artworks", middle) == replay
    key = next(c.key for c in changes if c.table.name == "artists" and c.op == "d")
    history = truth.history("moma.public.artists", key)
    assert [h.op for h in history] == [c.op for c in changes if c.table.name == "artists" and c.key == key]


def test_fault_injector_delivers_every_message_and_counts_what_it_adds() -> None:
    injector = FaultInjector(seed=1, duplicates=0.1, reorder=0.1, poison=0.05)
    originals = [Message("t", str(i).encode(), str(i).encode()) for i in range(3000)]
    sent = []
    for message in originals:
        sent += injector.apply(message, lambda kind, m=message: Message("t", b"poison", kind.encode()), ("p",))
    sent += injector.drain()
    real = [m for m in sent if m.key != b"poison"]
    assert Counter(real) - Counter(originals) == Counter({m: c - 1 for m, c in Counter(real).items() if c > 1})
    assert set(real) == set(originals)
    assert len(real) - len(originals) == injector.counts["duplicates"]
    assert len(sent) - len(real) == injector.counts["poison:p"] > 0
    assert injector.counts["reordered"] > 0
    assert [m for m in real if m in originals] != originals  # some arrive late


class _MemoryRegistry:
    address = "memory"

    def __init__(self) -> None:
        self._schemas: dict[int, str] = {}
        self._ids: dict[tuple[str, str], int] = {}

    def register(self, subject: str, schema: str) -> int:
        if (subject, schema) not in self._ids:
            self._ids[(subject, schema)] = schema_id = len(self._schemas) + 1
            self._schemas[schema_id] = schema
        return self._ids[(subject, schema)]

    def schema(self, schema_id: int) -> str:
        return self._schemas[schema_id]


class _ListTransport:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    def prepare(self, topics: list[str]) -> None:
        self.topics = topics

    def send(self, message: Message) -> None:
        self.messages.append(message)

    def close(self) -> Delivery:
        return Delivery(acknowledged=len(self.messages))


def test_simulation_poison_never_decodes_and_everything_else_does(tmp_path: Path) -> None:
    serde = AvroSerde(_MemoryRegistry(), WireFormat.CONFLUENT)
    transport = _ListTransport()
    options = SimulationOptions(format="debezium", events=2000, poison=0.05, duplicates=0.02, evolve_at=1000, snapshot_rows=20)
    summary = Simulation(options, transport, TruthStore(tmp_path / "t.db"), serde).run(progress=False)
    assert summary.total_events == 2000 and summary.messages_acknowledged == len(transport.messages)
    failures = 0
    for message in transport.messages:
        try:
            serde.deserialize(message.value)
        except Exception:
            failures += 1
    assert failures == sum(v for k, v in summary.faults.items() if k.startswith("poison:"))
    assert transport.topics == ["moma.public.artists", "moma.public.artworks", "hr.public.employee"]


def test_options_are_validated(tmp_path: Path) -> None:
    with pytest.raises(SimulationError, match="unknown format"):
        SimulationOptions(format="maxwell")
    with pytest.raises(SimulationError, match="--poison is a probability"):
        SimulationOptions(poison=2)
    with pytest.raises(SimulationError, match="needs a schema registry"):
        Simulation(SimulationOptions(), _ListTransport(), TruthStore(tmp_path / "a.db"), None)
    used = TruthStore(tmp_path / "b.db")
    used.record(_changes(3))
    with pytest.raises(SimulationError, match="already holds 3 changes"):
        Simulation(SimulationOptions(format="dms-json"), _ListTransport(), used, None)


def test_updates_always_change_a_column() -> None:
    assert all(c.before != c.after for c in _changes(5000) if c.op == "u")


def test_shop_orders_carry_semantic_types_toast_placeholders_and_truncates(tmp_path: Path) -> None:
    from simulators.semantic import PLACEHOLDER
    from simulators.tables import ORDERS

    db = SourceDatabase(TABLE_SETS["shop"], seed=2, rows_per_table=20, truncate_every=40)
    live = itertools.chain.from_iterable(itertools.islice(db.transactions(), 100))
    changes = list(itertools.chain(db.snapshot(), live))
    row = DebeziumEnvelope().value_schema(ORDERS, 1)["fields"][0]["type"][1]
    after = {f["name"]: f["type"][1] for f in row["fields"] if isinstance(f["type"], list)}
    assert after["updated_at"]["connect.name"] == "io.debezium.time.MicroTimestamp"
    assert after["amount"]["logicalType"] == "decimal" and after["tags"]["connect.name"] == "io.debezium.data.Json"
    envelope = DebeziumEnvelope()
    schema = avro_schema(envelope.value_schema(ORDERS, 1))
    placeholders = 0
    for change in changes:
        value = envelope.value(change)
        fastavro.schemaless_writer(BytesIO(), schema.parsed, value)  # every record encodes with the schema
        if change.op == "u":
            sent = value["after"][1]
            unchanged = change.before["notes"] == change.after["notes"]
            assert (sent["notes"] == PLACEHOLDER) == unchanged
            placeholders += unchanged
    assert placeholders > 0
    truncates = [c for c in changes if c.op == "t"]
    assert len(truncates) == 2 and all(c.truncated for c in truncates)
    assert envelope.value(truncates[0])["op"] == "t" and envelope.value(truncates[0])["after"] is None
    truth = TruthStore(tmp_path / "truth.db")
    truth.record(changes)
    as_text = {key: json.loads(json.dumps(row, default=str)) for key, row in db.rows["orders"].items()}
    assert truth.state_at("shop.public.orders") == as_text
    assert truth.state_at("shop.public.orders", truncates[0].commit_us) == {}  # the truncate emptied it
