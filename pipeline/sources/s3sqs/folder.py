"""The source's folder in the query's checkpoint, `<checkpointLocation>/sources/s3-sqs`, on a local disk or on S3.

RocksDB needs a local disk, but on a cluster the checkpoint is on S3 and a restarted driver (another host, or
a fresh container) must find the file log there. With an `s3://`/`s3a://` checkpoint the database therefore
lives in a local working copy, restored from S3 when the reader opens it and published back after every write:
a RocksDB checkpoint of it, its SST files (immutable) uploaded once each, the small files of the version
beside them, then one `rocksdb/LATEST` object naming the version: a single PutObject, so a reader finds the
old version or the new one, never half of one. The reader deletes SQS messages only after that write.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping, Protocol
from urllib.parse import urlparse

from rocksdict import Checkpoint, Rdict

SUBFOLDER = "sources/s3-sqs"
_LATEST = "rocksdb/LATEST"


class SourceFolder(Protocol):
    address: str

    def database(self) -> Path:
        """The local folder RocksDB opens (restored from the shared copy first, if there is one)."""

    def publish(self, db: Rdict) -> None:
        """Make the database's current state the one a restarted reader finds."""

    def release(self) -> None:
        """The database is closed: drop what only served it locally."""

    def read_text(self, name: str) -> str | None: ...

    def write_text(self, name: str, text: str) -> None: ...

    def delete(self, name: str) -> None: ...


def source_folder(location: str, boto3_kwargs: Mapping[str, Any] | None = None) -> SourceFolder:
    """The folder under `location` (a path, `file:`, `s3://` or `s3a://`); S3 is reached with `boto3_kwargs`."""
    scheme = urlparse(location).scheme.lower()
    if scheme in ("s3", "s3a"):
        return S3Folder(location, dict(boto3_kwargs or {}))
    return LocalFolder(Path(location.removeprefix("file://").removeprefix("file:")) / SUBFOLDER)


class LocalFolder:
    """The checkpoint on a local disk: RocksDB opens it in place, and its synced writes are the commit."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.address = str(root)

    def database(self) -> Path:
        return self.root / "rocksdb"

    def publish(self, db: Rdict) -> None:
        return None

    def release(self) -> None:
        return None

    def read_text(self, name: str) -> str | None:
        path = self.root / name
        return path.read_text() if path.is_file() else None

    def write_text(self, name: str, text: str) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(text)
        os.replace(temporary, path)  # readers see the old file or the new one, never half of one

    def delete(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)


class S3Folder:
    """The checkpoint on S3: small files are objects; RocksDB is a local working copy published as versions."""

    def __init__(self, location: str, boto3_kwargs: dict[str, Any]) -> None:
        import boto3

        parsed = urlparse(location)
        self.bucket = parsed.netloc
        self.prefix = "/".join(p for p in (parsed.path.strip("/"), SUBFOLDER) if p) + "/"
        self.address = f"s3://{self.bucket}/{self.prefix}"
        self.s3 = boto3.client("s3", **boto3_kwargs)
        digest = hashlib.sha1(self.address.encode()).hexdigest()[:16]
        self.work = Path(tempfile.gettempdir()) / f"pipeline-s3sqs-{digest}"
        self._version, self._uploaded = 0, set[str]()

    def database(self) -> Path:
        """A fresh working copy of the last published version: a copy left by an earlier process may be ahead
        of S3 (it crashed before publishing), and S3 is what every other driver would find."""
        shutil.rmtree(self.work, ignore_errors=True)
        db = self.work / "rocksdb"
        db.mkdir(parents=True)
        latest = self.read_text(_LATEST)
        if latest is not None:
            version = json.loads(latest)
            self._version = version["version"]
            for name in version["files"]:
                self.s3.download_file(self.bucket, self._key(name, self._version), str(db / name))
            self._uploaded = {name for name in version["files"] if name.endswith(".sst")}
        return db

    def publish(self, db: Rdict) -> None:
        snapshot = Path(tempfile.mkdtemp(dir=self.work)) / "snapshot"
        try:
            Checkpoint(db).create_checkpoint(str(snapshot))  # flushes first: the SST files hold every write
            version, files = self._version + 1, sorted(p.name for p in snapshot.iterdir())
            for name in files:
                if name not in self._uploaded:
                    self.s3.upload_file(str(snapshot / name), self.bucket, self._key(name, version))
            self.write_text(_LATEST, json.dumps({"version": version, "files": files}))
        finally:
            shutil.rmtree(snapshot.parent, ignore_errors=True)
        self._forget(files, self._version)
        self._version, self._uploaded = version, {name for name in files if name.endswith(".sst")}

    def release(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)

    def read_text(self, name: str) -> str | None:
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=self.prefix + name)["Body"].read().decode()
        except self.s3.exceptions.NoSuchKey:
            return None

    def write_text(self, name: str, text: str) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=text.encode())

    def delete(self, name: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=self.prefix + name)

    def _key(self, name: str, version: int) -> str:
        """SST files are shared by the versions that hold them; the rest (MANIFEST, CURRENT, OPTIONS, WAL) is
        rewritten by every version."""
        return f"{self.prefix}rocksdb/{'sst' if name.endswith('.sst') else version}/{name}"

    def _forget(self, kept: list[str], old_version: int) -> None:
        """Delete the previous version's own files and the SST files no version holds any more."""
        pages = self.s3.get_paginator("list_objects_v2")
        stale = [item["Key"] for prefix in (f"{self.prefix}rocksdb/{old_version}/", f"{self.prefix}rocksdb/sst/")
                 for page in pages.paginate(Bucket=self.bucket, Prefix=prefix) for item in page.get("Contents", ())
                 if not (prefix.endswith("/sst/") and item["Key"].rsplit("/", 1)[1] in kept)]
        for start in range(0, len(stale), 1000):
            self.s3.delete_objects(Bucket=self.bucket,
                                   Delete={"Objects": [{"Key": key} for key in stale[start:start + 1000]]})
