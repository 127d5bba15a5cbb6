"""The stream reader. Offsets are the source's own batch ids: `{"batch": n}` covers every file of batches <= n.

On the driver, `latestOffset` either returns a batch planned earlier that Spark has not been given yet (the
query crashed between the two), or polls SQS for up to maxFilesPerTrigger new files (Spark 4.1 hands Python
sources no read limit, so the budget is enforced here), records them as the next batch in RocksDB, and only then
deletes their messages. `partitions` reads a batch range back from RocksDB, so a replay reads the same files.
A reprocess run plans one batch holding the files of batches start..end (or, dry, only lists them) and reads
nothing from SQS. Executors read the files (`files.py`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterator

import structlog
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from pipeline.sources.s3sqs.admission import admit
from pipeline.sources.s3sqs.files import FileSlice, pack, read_files
from pipeline.sources.s3sqs.options import S3SqsOptionError, S3SqsOptions
from pipeline.sources.s3sqs.folder import SourceFolder, source_folder
from pipeline.sources.s3sqs.status import SourceStatus, write_status
from pipeline.sources.s3sqs.tracker import NO_BATCH, FileTracker

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from pipeline.sources.s3sqs.queue import Message, SqsQueue

log = structlog.get_logger(__name__)


def _offset(batch_id: int) -> dict[str, int]:
    return {"batch": batch_id}


class S3SqsStreamReader(DataSourceStreamReader):
    def __init__(self, options: S3SqsOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._folder: SourceFolder | None = None  # driver-only state, opened on first use
        self._tracker: FileTracker | None = None
        self._queue: SqsQueue | None = None
        self._last_poll = (1, 1)  # (new files, messages waiting) of the last poll; none yet: not drained
        self._kept: dict[str, float] = {}  # consumer errors this reader left in flight -> when they come back

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "schema": self.schema, "_folder": None, "_tracker": None, "_queue": None,
                "_last_poll": self._last_poll, "_kept": {}}

    # -- driver --------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, int]:
        return _offset(NO_BATCH)

    def latestOffset(self) -> dict[str, int]:
        tracker = self.tracker
        if self.options.reprocessing:
            return _offset(self._reprocess())
        planned = tracker.meta("planned")
        if planned > tracker.meta("handed"):
            self._write_status()
            return _offset(planned)  # planned before a crash, not yet run: Spark gets it again, unchanged
        return _offset(self._poll())

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        tracker = self.tracker
        files = [f for batch in range(start["batch"] + 1, end["batch"] + 1) for f in tracker.batch_files(batch)]
        if end["batch"] > tracker.meta("handed"):
            tracker.mark("handed", end["batch"])
        return pack(files)

    def stop(self) -> None:
        if self._queue is not None:
            self._queue.close()
        if self._tracker is not None:
            self._tracker.close()
            self._tracker = None

    @property
    def folder(self) -> SourceFolder:
        if self._folder is None:
            self._folder = source_folder(self.options.checkpoint_location, self.options.boto3_kwargs())
        return self._folder

    @property
    def tracker(self) -> FileTracker:
        if self._tracker is None:
            self._tracker = FileTracker(self.folder)
        return self._tracker

    @property
    def queue(self) -> SqsQueue:
        from pipeline.sources.s3sqs.queue import SqsQueue

        if self._queue is None:
            self._queue = SqsQueue(self.options)
        return self._queue

    def _poll(self) -> int:
        """Held files first, then new ones from SQS, up to the budget; record the batch, then delete."""
        tracker, options, started = self.tracker, self.options, time.monotonic()
        held = tracker.held()
        limit = options.max_files_per_trigger
        budget = None if limit < 0 else limit - len(held)
        messages = self.queue.receive(budget) if budget is None or budget > 0 else []
        now_ms = int(time.time() * 1000)
        admission = admit(messages, tracker.seen, options, now_ms)
        files = held + admission.files
        take, rest = (files, []) if limit < 0 else (files[:limit], files[limit:])
        batch_id = tracker.plan(take, rest) if take else tracker.meta("planned")
        self.queue.delete(admission.delete)  # after the synced write: the files are never lost
        tracker.purge_older_than(int(now_ms - options.max_file_age_s * 1000))
        if messages or take:
            log.info("s3sqs.poll", batch=batch_id if take else None, files=len(take), held=len(rest),
                     messages=len(messages), deleted=len(admission.delete), kept=len(admission.keep),
                     refused=dict(admission.refused), seconds=round(time.monotonic() - started, 2))
        self._remember_kept(admission.keep)
        self._last_poll = (len(take), 0 if admission.files or rest else self._waiting())
        self._write_status()
        return batch_id

    def _remember_kept(self, kept: list[Message]) -> None:
        """Consumer errors left in flight, until their visibility timeout brings them back."""
        now = time.monotonic()
        self._kept.update((m.message_id, now + self.options.visibility_timeout_s) for m in kept)
        self._kept = {message: until for message, until in self._kept.items() if until > now}

    def _waiting(self) -> int:
        """Messages the queue still holds for someone: visible ones, and those in flight that this reader did
        not keep itself (a consumer that died mid-poll: its messages come back after the visibility timeout)."""
        visible, in_flight = self.queue.waiting_messages()
        return visible + max(0, in_flight - len(self._kept))

    def _reprocess(self) -> int:
        """Plan (once) a batch of the files of batches start..end, or in a dry run only list them."""
        tracker, options = self.tracker, self.options
        start, end = options.reprocess_start_batch_id, options.reprocess_end_batch_id
        assert start is not None and end is not None
        done = tracker.reprocess_batch(start, end)
        if done is not None:
            self._last_poll = (0, 0)
            self._write_status()
            return done
        last = tracker.meta("planned")
        if end > last:
            raise S3SqsOptionError(f"reprocessEndBatchId {end} is beyond the last batch ({last}) recorded in "
                                   f"{self.folder.address}")
        files = [f for batch in range(start, end + 1) for f in tracker.batch_files(batch)]
        if options.reprocess_dry_run:
            report = f"reprocess-{start}-{end}-dry-run.txt"
            self.folder.write_text(report, "".join(f"{f.path}\n" for f in files))
            log.info("s3sqs.reprocess_dry_run", start=start, end=end, files=len(files),
                     listed_in=f"{self.folder.address}{report}")
            self._last_poll = (0, 0)
            self._write_status()
            return last
        batch_id = tracker.plan(files, tracker.held(), reprocess=(start, end))
        log.info("s3sqs.reprocess", start=start, end=end, files=len(files), batch=batch_id)
        self._last_poll = (0, 0)  # a reprocess run reads nothing more: drained once its batch commits
        self._write_status()
        return batch_id

    def _write_status(self) -> None:
        write_status(self.folder, SourceStatus(
            self.tracker.meta("planned"), self.tracker.meta("handed"), *self._last_poll))

    # -- executors -----------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FileSlice)
        yield from read_files(self.options, self.schema, partition.files)
