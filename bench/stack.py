"""Measure `stack up` cold (empty data folder) and warm (restart over existing data), and Spark session start.

Runs a throw-away stack on its own ports and folder, so a running demo or test stack is untouched.
Prints one line per measurement and ends with a summary line.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.runtime import logs  # noqa: E402
from pipeline.config.settings import load_config  # noqa: E402
from pipeline.stack import Stack  # noqa: E402

SETTINGS = [
    f"jars={REPO / '.pipeline' / 'jars'}",
    "stack.kafka_port=29092", "stack.kafka_controller_port=29093",
    "stack.registry_port=28081", "stack.registry_management_port=29001", "stack.moto_port=25001",
]


def timed(label: str, action) -> float:
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    print(f"{label:<22} {seconds:6.1f} s", flush=True)
    return seconds


def spark_start_seconds(home: Path) -> float:
    """A fresh Python process, so the JVM start is part of the figure, as it is for every job."""
    code = (
        "import time, sys; sys.path.insert(0, %r); t = time.perf_counter();"
        "from pipeline.config.settings import load_config; from pipeline.runtime.spark import get_spark;"
        "s = get_spark(load_config(overrides=%r, environ={})); s.range(1).count();"
        "print(time.perf_counter() - t); s.stop()"
    ) % (str(REPO), [f"home={home}", *SETTINGS])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    logs.configure("WARNING")
    home = Path(tempfile.mkdtemp(prefix="bench-stack-"))
    stack = Stack(load_config(overrides=[f"home={home}", *SETTINGS], environ={}))
    try:
        cold = timed("stack up (cold)", stack.up)
        stack.down()
        warm = timed("stack up (warm)", stack.up)
        noop = timed("stack up (running)", stack.up)
        spark = spark_start_seconds(home)
        print(f"{'spark session':<22} {spark:6.1f} s")
    finally:
        stack.down()
        shutil.rmtree(home, ignore_errors=True)
    print(f"stack: cold {cold:.1f} s, warm {warm:.1f} s, already running {noop:.1f} s; spark session {spark:.1f} s")


if __name__ == "__main__":
    main()
