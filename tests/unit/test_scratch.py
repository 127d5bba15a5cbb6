"""A local session's scratch folder: one per process under the home, the folders of dead processes swept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pipeline.runtime import scratch


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


def test_claim_sweeps_the_folders_of_processes_that_are_gone(tmp_path: Path) -> None:
    root = tmp_path / scratch.FOLDER
    dead = root / str(_dead_pid()) / "spark-1234" / "blockmgr"
    dead.mkdir(parents=True)
    (dead / "shuffle_0.data").write_bytes(b"x" * 1024)
    running = root / "1"  # init: always running
    running.mkdir()
    foreign = root / "not-a-pid"
    foreign.mkdir()

    mine = scratch.claim(tmp_path)

    assert mine == root.resolve() / str(os.getpid()) and mine.is_dir()
    assert not dead.parents[1].exists()
    assert running.is_dir() and foreign.is_dir()
    assert scratch.claim(tmp_path) == mine  # a second session of the process keeps its folder
