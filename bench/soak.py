"""Changelog soak: Debezium events with duplicates and reordering, the stage SIGKILLed again and again, then
run until caught up, mirrored and verified. Exactly-once is the claim; this counts what a crash loses or doubles.

1. The simulator sends `--events` Debezium envelope events of the MoMA tables to Kafka with `--duplicates`
   redeliveries and `--reorder`ed neighbours, logging every change to a ground-truth store.
2. `--kills` times, `python -m pipeline changelog` starts in its own process group and is SIGKILLed at a random
   time of one of three phases, chosen in turn from a seeded generator: during start-up (before its first
   batch), mid-batch (a random delay after a batch's progress line), or right after a batch's progress line
   (while the next batch reads and commits).
3. The stage then runs until caught up (in this process's Spark), `mirror` merges it and `verify` compares the
   mirrors with the truth.

Lost: truth changes with no changelog row (by table, key, op and LSN). Doubled: changelog rows beyond the
distinct Kafka offsets (topic, partition, offset) they came from; a redelivery is its own offset and lands as
its own row, which the mirror's `_seq` order absorbs. Mismatches: `verify`'s.

Needs the stack (`python -m pipeline stack up`). Usage: bench/soak.py [--events 1000000] [--kills 20]
[--seed 38] [--set k=v ...]
Ends with: `soak: <events> events, <kills> kills, <lost> lost, <doubled> doubled`; exits 1 when any is lost,
doubled or mismatched.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.config.settings import PipelineConfig, load_config  # noqa: E402
from pipeline.ops.verify import verify_lake  # noqa: E402
from pipeline.runtime import logs  # noqa: E402
from pipeline.runtime.spark import get_spark  # noqa: E402
from pipeline.stages.changelog import ChangelogStage  # noqa: E402
from pipeline.stages.mirror import MirrorStage  # noqa: E402
from registry.factory import serde_from_settings  # noqa: E402
from simulators.simulation import Simulation, SimulationOptions  # noqa: E402
from simulators.transport import KafkaTransport  # noqa: E402
from simulators.truth import TruthStore  # noqa: E402
from tables.lake import table_names  # noqa: E402
from tables.names import quote  # noqa: E402

PHASES = ("start-up", "mid-batch", "after-batch")
BATCHES = 60  # batches the events make at the killed stage's trigger size: kills fall among many batches
START_TIMEOUT_S = 300.0


class StageProcess:
    """`python -m pipeline changelog` in its own process group, its output lines collected."""

    def __init__(self, overrides: list[str], pattern: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", *[a for s in overrides for a in ("--set", s)], "changelog",
             "--topic-pattern", pattern], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.lines: list[str] = []
        collect = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout))  # type: ignore[arg-type]
        collect.daemon = True
        collect.start()

    def batches(self) -> int:
        return sum("changelog.batch" in line for line in list(self.lines))

    def wait_for_batch(self, after: int) -> None:
        """Until the stage logs a batch beyond its `after`th; fails with its last lines if it exits first."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.batches() <= after:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("soak: the stage exited or stalled before its batch:\n" + "".join(self.lines[-30:]))
            time.sleep(0.1)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def simulate(cfg: PipelineConfig, prefix: str, events: int, seed: int, truth: TruthStore) -> None:
    options = SimulationOptions(format="debezium", tables="moma", events=events, seed=seed, duplicates=0.02,
                                reorder=0.05, snapshot_rows=max(100, events // 100), topic_prefix=prefix)
    summary = Simulation(options, KafkaTransport(cfg.kafka), truth, serde_from_settings(cfg.registry, cfg.aws)
                         ).run(progress=False)
    print(f"simulated {summary.total_events:,} changes, {summary.messages_acknowledged:,} messages "
          f"(faults: {dict(summary.faults)})", flush=True)


def kill_repeatedly(overrides: list[str], pattern: str, kills: int, rng: random.Random) -> None:
    for kill in range(1, kills + 1):
        phase = rng.choice(PHASES)
        stage = StageProcess(overrides, pattern)
        if phase == "start-up":
            time.sleep(rng.uniform(1.0, 15.0))
        else:
            stage.wait_for_batch(0)
            time.sleep(rng.uniform(0.0, 3.0) if phase == "mid-batch" else 0.0)
        stage.kill()
        print(f"kill {kill}/{kills}: {phase}, after {stage.batches()} batch(es) of this run", flush=True)


def lost_and_doubled(cfg: PipelineConfig, spark, prefix: str, truth: TruthStore) -> tuple[int, int]:
    from pyspark.sql import functions as F

    expected = {(c.table.split(".")[-1], str(c.key), c.op, c.lsn) for c in truth.changes()}
    landed: set[tuple] = set()
    doubled = 0
    for name in table_names(cfg, spark, cfg.changelog.namespace):
        if not name.startswith(f"{prefix}_"):
            continue
        rows = spark.table(quote(cfg.catalog.name, cfg.changelog.namespace, name))
        offsets = rows.select("_transport.topic", "_transport.partition", "_transport.offset")
        doubled += rows.count() - offsets.distinct().count()
        key = {"artists": "artist_id", "artworks": "artwork_id"}[name.removeprefix(f"{prefix}_")]
        landed |= {(name.removeprefix(f"{prefix}_"), str(r[0]), r[1], r[2])
                   for r in rows.select(F.col(key), "_op", "_seq.source_minor").distinct().collect()}
    return len(expected - landed), doubled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    logs.configure("WARNING")
    prefix = f"soak{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = Path(folder) / "checkpoint"
        overrides = [*args.overrides, f"changelog.checkpoint={checkpoint}", "changelog.trigger_interval=1 second",
                     f"changelog.max_offsets_per_trigger={max(1000, args.events // BATCHES)}",
                     f"mirror.tables={prefix}_artists,{prefix}_artworks"]
        cfg = load_config(overrides=overrides)
        truth = TruthStore(Path(folder) / "truth.db")
        started = time.perf_counter()
        simulate(cfg, prefix, args.events, args.seed, truth)
        kill_repeatedly(overrides, rf"{prefix}\..*", args.kills, random.Random(args.seed))
        spark = get_spark(cfg)
        changelog = cfg.changelog.model_copy(update={"topic_pattern": rf"{prefix}\..*", "topics": []})
        ChangelogStage(cfg.model_copy(update={"changelog": changelog}), spark).run(until_caught_up=True)
        print("caught up", flush=True)
        for report in MirrorStage(cfg, spark).run_once([]):
            print(report.line(), flush=True)
        verdicts = verify_lake(cfg, spark, truth, [])
        mismatches = sum(v.mismatches for v in verdicts)
        for verdict in verdicts:
            print("\n".join(verdict.lines()), flush=True)
        lost, doubled = lost_and_doubled(cfg, spark, prefix, truth)
    print(f"verify: {mismatches} mismatches ({len(verdicts)} tables); {time.perf_counter() - started:.0f} s, "
          f"{os.cpu_count()} CPUs", flush=True)
    print(f"soak: {args.events} events, {args.kills} kills, {lost} lost, {doubled} doubled")
    sys.exit(1 if lost or doubled or mismatches else 0)


if __name__ == "__main__":
    main()
