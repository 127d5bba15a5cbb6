"""Simulator throughput: N Debezium Avro events into Kafka (registry-framed, ground truth recorded), against
the Python ceiling measured in the same run: fastavro's raw schemaless encode of the same records.

Needs the stack (`python -m pipeline stack up`). Usage: bench/simulate.py [--events 1000000] [--set k=v ...]
Also compares the two per second of CPU time (the process's, librdkafka's threads included): on a machine
shared with other work that figure moves far less than wall time does.
Ends with: `simulate: <events/s> events/s, <ratio>x raw encode (<raw/s> records/s)`.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
import uuid
from io import BytesIO
from pathlib import Path

import fastavro

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.runtime import logs  # noqa: E402
from pipeline.config.settings import load_config  # noqa: E402
from registry.avro import avro_schema  # noqa: E402
from registry.ccompat import ConfluentCompatClient  # noqa: E402
from registry.serde import AvroSerde  # noqa: E402
from simulators.formats import DebeziumEnvelope  # noqa: E402
from simulators.simulation import Simulation, SimulationOptions  # noqa: E402
from simulators.source import SourceDatabase  # noqa: E402
from simulators.tables import TABLE_SETS  # noqa: E402
from simulators.transport import KafkaTransport  # noqa: E402
from simulators.truth import TruthStore  # noqa: E402


def raw_encode_rate(events: int, seed: int) -> tuple[float, float]:
    """fastavro schemaless encode of the same change records, nothing else: the Python ceiling, as records per
    second of wall time and per second of CPU time."""
    source = SourceDatabase(TABLE_SETS["all"], seed=seed, rows_per_table=10_000)
    envelope = DebeziumEnvelope()
    changes = itertools.chain(source.snapshot(), itertools.chain.from_iterable(source.transactions()))
    records = [(c.table.name, envelope.value(c)) for c in itertools.islice(changes, min(events, 300_000))]
    schemas = {table.name: avro_schema(envelope.value_schema(table, 1)).parsed for table in TABLE_SETS["all"]}
    started, cpu_started = time.perf_counter(), time.process_time()
    for table, record in records:
        fastavro.schemaless_writer(BytesIO(), schemas[table], record)
    return len(records) / (time.perf_counter() - started), len(records) / (time.process_time() - cpu_started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    logs.configure("WARNING")
    cfg = load_config(overrides=args.overrides)
    options = SimulationOptions(format="debezium", events=args.events, snapshot_rows=10_000,
                                topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    # The ceiling first, on a clean heap: measured after the run it shared the process with the simulation's state
    # (every live row, the key cache), whose garbage-collector passes slowed it by a third and flattered the ratio.
    raw, raw_cpu = raw_encode_rate(args.events, options.seed)
    with tempfile.TemporaryDirectory() as folder:
        simulation = Simulation(options, KafkaTransport(cfg.kafka), TruthStore(Path(folder) / "truth.db"),
                                AvroSerde(ConfluentCompatClient.from_settings(cfg.registry)))
        cpu_started = time.process_time()
        summary = simulation.run(progress=True)
        cpu_seconds = time.process_time() - cpu_started
    rate = summary.total_events / summary.seconds
    cpu_rate = summary.total_events / cpu_seconds
    print(f"simulator end to end   {rate:12,.0f} events/s  ({summary.total_events} events, {summary.seconds:.1f} s, "
          f"{summary.messages_acknowledged} acknowledged)")
    print(f"fastavro raw encode    {raw:12,.0f} records/s")
    print(f"per CPU second         {cpu_rate:12,.0f} events/s against {raw_cpu:,.0f} records/s raw: "
          f"{cpu_rate / raw_cpu:.2f}x (process CPU time, librdkafka's threads included)")
    print(f"simulate: {rate:.0f} events/s, {rate / raw:.2f}x raw encode ({raw:.0f} records/s)")


if __name__ == "__main__":
    main()
