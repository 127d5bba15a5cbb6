"""A small JSON file beside the RocksDB log, rewritten whenever Spark asks for new data: how far the source got and
whether the queue looked empty. The reader runs in its own process; this is how the query's driver learns that
the queue is drained: the last poll found nothing new and no message waiting (visible, or in flight at a consumer
that died; messages this reader keeps for a dead-letter queue do not count), and every planned batch had been
given to Spark before it. Spark polls only between batches, so those batches have then finished; a poll in flight
that plans a new batch leaves it in RocksDB for the next run."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.sources.s3sqs.options import local_path


@dataclass(frozen=True)
class SourceStatus:
    planned: int
    handed: int  # the last batch Spark asked for
    last_poll_files: int  # new files the last poll found
    queue_visible: int  # messages the queue still held for someone after that poll (0 when not asked)

    @property
    def drained(self) -> bool:
        return self.last_poll_files == 0 and self.queue_visible == 0 and self.handed == self.planned


def status_path(checkpoint_location: str) -> Path:
    return Path(local_path(checkpoint_location)) / "sources" / "s3-sqs" / "status.json"


def write_status(checkpoint_location: str, status: SourceStatus) -> None:
    path = status_path(checkpoint_location)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(status)))
    os.replace(temporary, path)  # readers see the old file or the new one, never half of one


def clear_status(checkpoint_location: str) -> None:
    """Forget an earlier query's status, before starting one that waits for this query's drain."""
    status_path(checkpoint_location).unlink(missing_ok=True)


def read_status(checkpoint_location: str) -> SourceStatus | None:
    path = status_path(checkpoint_location)
    return SourceStatus(**json.loads(path.read_text())) if path.is_file() else None
