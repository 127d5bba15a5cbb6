"""The source's memory, in RocksDB inside the query's checkpoint (on S3 through a published working copy:
`folder.py`): every file seen, and every batch's file list.

A batch's file list is written (synced) before Spark runs the batch, and read back whenever Spark asks for that
batch again, so a replay after a crash reads exactly the same files. A file is recorded once: a second
notification for it is a duplicate. Keys:
- `file/<path>` -> {size, event_time_ms, batch}   the files seen (purged after maxFileAge)
- `age/<event_time_ms>/<path>`                    the same, ordered by age, for the purge
- `batch/<id>` -> [file, ...]                      each planned batch's files, in order
- `held/<n>` -> file                               files received beyond maxFilesPerTrigger, for the next batch
- `reprocess/<start>-<end>` -> batch id            a reprocess run's batch, planned once
- `meta/planned`, `meta/handed`                    the last batch planned, and the last Spark asked for
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Iterable

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from pipeline.sources.s3sqs.events import S3File
from pipeline.sources.s3sqs.folder import SourceFolder

NO_BATCH = -1
_BATCH_DIGITS = 12
_TIME_DIGITS = 15


class FileTracker:
    def __init__(self, folder: SourceFolder) -> None:
        self.folder = folder
        path = folder.database()
        path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        self.db = Rdict(str(path), options)
        self._sync = WriteOptions()
        self._sync.sync = True  # a planned batch survives a power cut, not only a process crash

    def close(self) -> None:
        self.db.close()
        self.folder.release()

    # -- reading -----------------------------------------------------------------------------------

    def meta(self, name: str) -> int:
        value = self.db.get(f"meta/{name}".encode())
        return NO_BATCH if value is None else int(value)

    def seen(self, path: str) -> bool:
        return self.db.get(f"file/{path}".encode()) is not None

    def batch_files(self, batch_id: int) -> list[S3File]:
        value = self.db.get(_batch_key(batch_id))
        return [] if value is None else [S3File(**item) for item in json.loads(value)]

    def held(self) -> list[S3File]:
        return [S3File(**json.loads(v)) for _, v in self._range(b"held/")]

    def reprocess_batch(self, start: int, end: int) -> int | None:
        value = self.db.get(f"reprocess/{start}-{end}".encode())
        return None if value is None else int(value)

    # -- writing (each call one synced write batch) -------------------------------------------------

    def plan(self, files: list[S3File], held: list[S3File], reprocess: tuple[int, int] | None = None) -> int:
        """Record a new batch of `files` and the files `held` for later, atomically; return the batch id."""
        batch_id = self.meta("planned") + 1
        write = WriteBatch(raw_mode=True)
        for key, _ in self._range(b"held/"):
            write.delete(key)
        for n, item in enumerate(held):
            write.put(f"held/{n:08d}".encode(), json.dumps(asdict(item)).encode())
        for item in files if reprocess is None else ():
            record = {"size": item.size, "event_time_ms": item.event_time_ms, "batch": batch_id}
            write.put(f"file/{item.path}".encode(), json.dumps(record).encode())
            write.put(f"age/{item.event_time_ms:0{_TIME_DIGITS}d}/{item.path}".encode(), b"")
        for item in held:
            write.put(f"file/{item.path}".encode(), json.dumps({"held": True}).encode())
        write.put(_batch_key(batch_id), json.dumps([asdict(f) for f in files]).encode())
        if reprocess is not None:
            write.put(f"reprocess/{reprocess[0]}-{reprocess[1]}".encode(), str(batch_id).encode())
        write.put(b"meta/planned", str(batch_id).encode())
        self._commit(write)
        return batch_id

    def mark(self, name: str, batch_id: int) -> None:
        write = WriteBatch(raw_mode=True)
        write.put(f"meta/{name}".encode(), str(batch_id).encode())
        self._commit(write)

    def purge_older_than(self, cutoff_ms: int) -> int:
        """Forget files created before `cutoff_ms` (maxFileAge): their notifications are ignored as too old."""
        write, purged = WriteBatch(raw_mode=True), 0
        for key, _ in self._range(b"age/"):
            event_ms, path = key.decode()[4:].split("/", 1)
            if int(event_ms) >= cutoff_ms:
                break
            write.delete(key)
            write.delete(f"file/{path}".encode())
            purged += 1
        if purged:
            self._commit(write)
        return purged

    def _commit(self, write: WriteBatch) -> None:
        self.db.write(write, self._sync)
        self.folder.publish(self.db)

    def _range(self, prefix: bytes) -> Iterable[tuple[bytes, bytes]]:
        it = self.db.iter()
        it.seek(prefix)
        while it.valid() and it.key().startswith(prefix):
            yield it.key(), it.value()
            it.next()


def _batch_key(batch_id: int) -> bytes:
    return f"batch/{batch_id:0{_BATCH_DIGITS}d}".encode()
