"""A local session's scratch space (`spark.local.dir`) under the pipeline's home, one folder per process.

Spark removes its temporary folders (shuffle and broadcast blocks, the Python files it ships) in a shutdown
hook, which a SIGKILL or an out-of-memory kill never runs: in `/tmp` each such driver left ~150 MB behind, and
a few hundred of them once filled the disk. Under `<home>/spark-scratch/<pid>` a session's folder is found
again by the next session in that home, which removes the folders of processes that are gone. (A folder whose
pid was taken by an unrelated process since is kept until that process ends too.) A session under spark-submit
on a cluster, or with `spark.local.dir` set, is left to its cluster manager.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

FOLDER = "spark-scratch"


def claim(home: Path) -> Path:
    """This process's scratch folder (created), after removing the folders of processes that no longer run;
    removed again when this process exits normally."""
    root = home.resolve() / FOLDER
    root.mkdir(parents=True, exist_ok=True)
    swept = [child for child in root.iterdir() if child.name != str(os.getpid()) and not _running(child.name)]
    for child in swept:
        shutil.rmtree(child, ignore_errors=True)
    if swept:
        log.info("spark.scratch_swept", folder=str(root), removed=len(swept))
    mine = root / str(os.getpid())
    mine.mkdir(exist_ok=True)
    _remove_at_exit(str(mine))
    return mine


def _running(name: str) -> bool:
    """Whether the folder's process runs (a name that is not a pid is not ours: kept)."""
    if not name.isdigit():
        return True
    try:
        os.kill(int(name), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@functools.cache
def _remove_at_exit(folder: str) -> None:
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
