"""How long `pipeline status` takes to answer on the demo lake (the target is under 5 s on 2 cores).

Run `make demo` first: this reads its lake, its changelog checkpoint and the embedded stack's Kafka. Each
collection runs five times in one process, as a scheduler's check would run it (no Spark session for Iceberg);
the figure is the median, and the command's own wall time (a new Python process) is printed too.
Usage: bench/status.py [--set k=v ...]
Ends with: `status: <s> s on <n> tables (median of 5; command <s> s)`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.config.settings import load_config  # noqa: E402
from pipeline.ops.status import collect  # noqa: E402
from pipeline.runtime import logs  # noqa: E402

DEMO = ["changelog.checkpoint=.pipeline/checkpoints/demo"]  # the Makefile's demo settings
RUNS = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    logs.configure("WARNING")
    overrides = [*DEMO, *args.overrides]
    cfg = load_config(overrides=overrides)
    times, tables = [], 0
    for _ in range(RUNS):
        started = time.perf_counter()
        tables = len(collect(cfg).tables)
        times.append(time.perf_counter() - started)
    if not tables:
        sys.exit("no changelog tables in this lake: run `make demo` first")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipeline", *(a for o in overrides for a in ("--set", o)), "status"],
                   cwd=REPO, check=True, capture_output=True)
    command = time.perf_counter() - started
    print(f"collect runs: {', '.join(f'{t:.2f}' for t in times)} s")
    print(f"status: {statistics.median(times):.2f} s on {tables} tables (median of {RUNS}; command {command:.2f} s)")


if __name__ == "__main__":
    main()
