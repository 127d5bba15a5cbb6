"""A small JSON file beside the RocksDB log, rewritten whenever Spark asks for new data: how far the source got and
whether the queue looked empty. The reader runs in its own process; this is how the query's driver learns that
the queue is drained: the last poll found nothing new and no message waiting (visible, or in flight at a consumer
that died; messages this reader keeps for a dead-letter queue do not count), and every planned batch had been
given to Spark before it. Spark polls only between batches, so those batches have then finished; a poll in flight
that plans a new batch leaves it in RocksDB for the next run. It lives in the source's folder of the checkpoint,
on a local disk or on S3 (`folder.py`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.sources.s3sqs.folder import SUBFOLDER, SourceFolder

STATUS = "status.json"


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
    """The status file of a checkpoint on a local disk."""
    return Path(checkpoint_location) / SUBFOLDER / STATUS


def write_status(folder: SourceFolder, status: SourceStatus) -> None:
    folder.write_text(STATUS, json.dumps(asdict(status)))


def clear_status(folder: SourceFolder) -> None:
    """Forget an earlier query's status, before starting one that waits for this query's drain."""
    folder.delete(STATUS)


def read_status(folder: SourceFolder) -> SourceStatus | None:
    text = folder.read_text(STATUS)
    return SourceStatus(**json.loads(text)) if text is not None else None
