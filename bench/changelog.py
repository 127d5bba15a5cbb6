"""Changelog stage throughput: Debezium Avro events drained from Kafka into Iceberg, against a plain-Spark
baseline measured in the same run on the same machine.

1. The simulator (`Simulation`, the project's serde and Debezium encoder) writes a pool of distinct changes of
   the `employee` table, evolving its schema a tenth of the way in, so old and new writer versions interleave.
   The pool is captured, then replayed to Kafka until each topic holds its events: every message is a real,
   registry-framed Debezium event (its writer schemas registered under the topic's subject, in order); repeats
   of the pool are redeliveries, as a replaying producer makes.
2. The stage (`ChangelogStage(...).run(until_caught_up=True)`) drains the topic into its changelog table.
3. The baseline drains a topic of as many version-1 messages with one fixed schema: Kafka -> `from_avro` ->
   an Iceberg append, no normalisation, no routing, no dead letters, no idempotency check.
4. The same over `--topics` topics (tables) of `--topic-events` events each: the stage drains them all in one
   run; the baseline drains each topic into its own table, one plain query after the other.

Both sides are first run untimed on `--warmup` events of their own topics (class loading). Then each case is
raced `--rounds` times, each round on new topics: the first round is the first run of its size in this JVM,
which still pays the JIT's compiling of the new code (the stage's four generated stages take longer to compile
than the baseline's one); the last round is the steady state a running stream sees, and the closing line's
figure.

Needs the stack (`python -m pipeline stack up`). Usage: bench/changelog.py [--events 1000000] [--topics 10]
[--topic-events 100000] [--warmup 50000] [--rounds 2] [--set k=v ...]
Ends with: `changelog: <events/s> events/s, <ratio>x baseline; <topics> topics <ratio>x` (the last rounds).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.config import kafka  # noqa: E402
from pipeline.runtime import logs  # noqa: E402
from cdc.framing import Framing  # noqa: E402
from pipeline.stages.changelog import ChangelogStage  # noqa: E402
from pipeline.config.settings import PipelineConfig, load_config  # noqa: E402
from pipeline.runtime.spark import get_spark  # noqa: E402
from registry.factory import serde_from_settings  # noqa: E402
from registry.wire import confluent_frame, confluent_unframe  # noqa: E402
from simulators.faults import Message  # noqa: E402
from simulators.simulation import Simulation, SimulationOptions  # noqa: E402
from simulators.transport import Delivery, KafkaTransport  # noqa: E402
from simulators.truth import TruthStore  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import Column

POOL = 200_000  # distinct changes simulated; the stream replays them


@dataclass
class Capture:
    """A transport that keeps the messages, to replay them to Kafka as fast as the producer goes."""

    messages: list[Message] = field(default_factory=list)

    def prepare(self, topics: list[str]) -> None:
        pass

    def send(self, message: Message) -> None:
        self.messages.append(message)

    def close(self) -> Delivery:
        return Delivery(acknowledged=len(self.messages))


def simulate_pool(cfg: PipelineConfig, prefix: str, events: int, tables: str = "employees", seed: int = 7
                  ) -> list[Message]:
    """`events` distinct changes of `tables` (one table), its schema evolving a tenth of the way in."""
    with tempfile.TemporaryDirectory() as folder:
        options = SimulationOptions(format="debezium", tables=tables, seed=seed, events=events, snapshot_rows=10_000,
                                    evolve_at=events // 10, topic_prefix=prefix)
        capture = Capture()
        Simulation(options, capture, TruthStore(Path(folder) / "truth.db"),
                   serde_from_settings(cfg.registry, cfg.aws)).run(progress=True)
    return capture.messages


def produce(cfg: PipelineConfig, topic: str, pool: list[Message], count: int) -> None:
    """`count` messages cycling through `pool`, acknowledged by the broker, into `topic`."""
    transport = KafkaTransport(cfg.kafka, partitions=cfg.stack.kafka_partitions)
    transport.prepare([topic])
    started = time.perf_counter()
    for sent, message in enumerate(itertools.islice(itertools.cycle(pool), count), start=1):
        transport.send(Message(topic, message.key, message.value))
        if sent % 500_000 == 0:
            print(f"  produced {sent:,} to {topic}", flush=True)
    transport.close(timeout_s=300)
    print(f"  produced {count:,} to {topic} in {time.perf_counter() - started:.1f} s", flush=True)


def reframed(serde, pool: list[Message], topic: str) -> list[Message]:
    """The pool's messages with their writer schemas registered under `topic`'s subject, in order, and each
    frame naming the id the registry gave it there."""
    ids = {}
    for writer in sorted({confluent_unframe(m.value)[0] for m in pool if m.value}):
        ids[writer] = serde.registry.register(f"{topic}-value", serde.registry.schema(writer))
    return [Message(topic, m.key, m.value and confluent_frame(ids[confluent_unframe(m.value)[0]],
                                                            confluent_unframe(m.value)[1])) for m in pool]


def time_stage(cfg: PipelineConfig, spark, pattern: str, home: Path) -> float:
    changelog = cfg.changelog.model_copy(update={"topic_pattern": pattern, "topics": [],
                                                 "checkpoint": str(home / "stage-checkpoint")})
    stage = ChangelogStage(cfg.model_copy(update={"changelog": changelog}), spark)
    started = time.perf_counter()
    stage.run(until_caught_up=True)
    return time.perf_counter() - started


def time_baseline(cfg: PipelineConfig, spark, topics: list[str], schema: str, home: Path,
                  columns: Callable[[Column], list[Column]] | None = None, namespace: str = "bench") -> float:
    """Kafka -> from_avro with one fixed schema -> `columns` of the decoded value (by default its fields as they
    are) -> an Iceberg table per topic in `namespace`, in the same trigger as the stage."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.{namespace}")
    started = time.perf_counter()
    for topic in topics:
        reader = (spark.readStream.format("kafka").options(**kafka.spark_options(cfg.kafka))
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
        if cfg.changelog.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(cfg.changelog.max_offsets_per_trigger))
        body = Framing.of(cfg.registry.written_wire_format).body()
        decoded = reader.load().select(from_avro(body, schema).alias("v"))
        rows = decoded.select(*columns(F.col("v"))) if columns else decoded.select("v.*")
        table = f"{cfg.catalog.name}.{namespace}.{topic.replace('-', '_').replace('.', '_')}"
        (rows.writeStream.format("iceberg").trigger(availableNow=True)
         .option("checkpointLocation", str(home / f"{namespace}-{topic}")).toTable(table).awaitTermination())
    return time.perf_counter() - started


def race(cfg: PipelineConfig, spark, pool: list[Message], topics: int, events: int, tag: str, home: Path,
         columns: Callable[[Column], list[Column]] | None = None,
         also: Sequence[Callable[[Column], list[Column]]] = ()) -> tuple[float, ...]:
    """Seconds the stage and the baseline take to drain `events` messages from each of `topics` topics of their
    own, named after the pool's prefix and `tag`: new for a new tag; a tag given again sends to the same topics
    and drains from the same checkpoints into the same tables (an append); `columns`: what the baseline makes of
    each decoded value (`time_baseline`). Each of `also` is another baseline's columns, drained from the same
    topics into tables of its own after it; its seconds follow."""
    serde = serde_from_settings(cfg.registry, cfg.aws)
    prefix = pool[0].topic.split(".", 1)[0]
    first = confluent_unframe(pool[0].value or b"")[0]  # snapshot reads precede the evolution: version 1
    stage_topics = [pool[0].topic.replace(prefix, f"{prefix}{tag}t{n}", 1) for n in range(topics)]
    baseline_topics = [f"{prefix}{tag}-baseline{n}" for n in range(topics)]
    v1 = [m for m in pool if m.value and confluent_unframe(m.value)[0] == first]
    for stage_topic, baseline_topic in zip(stage_topics, baseline_topics):
        produce(cfg, stage_topic, reframed(serde, pool, stage_topic), events)
        produce(cfg, baseline_topic, v1, events)
    schema = serde.registry.schema(first)
    print(f"stage: draining {topics} topic(s) ...", flush=True)
    stage_s = time_stage(cfg, spark, rf"{prefix}{tag}t\d+\..*", home / f"{prefix}{tag}")
    print(f"baseline: draining {topics} topic(s) ...", flush=True)
    folder = home / f"{prefix}{tag}"
    return (stage_s, time_baseline(cfg, spark, baseline_topics, schema, folder, columns),
            *(time_baseline(cfg, spark, baseline_topics, schema, folder, other, f"bench{n}")
              for n, other in enumerate(also, start=2)))


def report(name: str, events: int, stage_s: float, baseline_s: float) -> tuple[float, float]:
    """Prints both rates; returns the stage's rate and its ratio to the baseline's."""
    stage_rate, baseline_rate = events / stage_s, events / baseline_s
    print(f"{name}: stage    {stage_rate:12,.0f} events/s  ({events:,} events, {stage_s:.1f} s)", flush=True)
    print(f"{name}: baseline {baseline_rate:12,.0f} events/s  ({events:,} events, {baseline_s:.1f} s)", flush=True)
    return stage_rate, stage_rate / baseline_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--topic-events", type=int, default=100_000)
    parser.add_argument("--warmup", type=int, default=50_000, help="events of the untimed first run of each")
    parser.add_argument("--rounds", type=int, default=2, help="races of each case; the last one is the figure")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    logs.configure("INFO")  # the stage's progress line per batch
    cfg = load_config(overrides=args.overrides)
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min average, {os.cpu_count()} CPUs)", flush=True)
    spark = get_spark(cfg)
    pool = simulate_pool(cfg, f"bench{uuid.uuid4().hex[:6]}", POOL)
    writers = sorted({confluent_unframe(m.value)[0] for m in pool if m.value})
    print(f"simulated {len(pool):,} distinct changes, writer schema ids {writers}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        if args.warmup:
            print(f"warm-up: {args.warmup:,} events each, untimed", flush=True)
            race(cfg, spark, pool, 1, args.warmup, "w", Path(folder))
        cases = [("1 topic", 1, args.events), (f"{args.topics} topics", args.topics, args.topic_events)]
        ratios = {}
        for case, (name, topics, events) in enumerate(cases):
            for round_ in range(1, args.rounds + 1):
                ratios[name] = report(f"{name}, round {round_}", topics * events,
                                      *race(cfg, spark, pool, topics, events, f"c{case}r{round_}", Path(folder)))
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min average)")
    (stage_rate, one), (_, many) = ratios["1 topic"], ratios[f"{args.topics} topics"]
    print(f"changelog: {stage_rate:.0f} events/s, {one:.2f}x baseline; {args.topics} topics {many:.2f}x")


if __name__ == "__main__":
    main()
