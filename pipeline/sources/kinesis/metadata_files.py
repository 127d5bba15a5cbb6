"""The `HDFS` metadata committer's files: `<metadataPath>/kinesis-metadata/<stream>/<batch>/<shard id>.json`.

`metadataPath` is a local path (or `file://`) or an S3 URI (`s3://` or `s3a://`, as Spark checkpoints on S3
are written). A local record is written to a temporary file and renamed, an S3 record is one PutObject: a
reader never sees half a record.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pipeline.sources.kinesis.metadata import MetadataStore, store_client
from pipeline.sources.kinesis.options import KinesisOptionError, MetadataOptions

FOLDER = "kinesis-metadata"


def file_store(options: MetadataOptions) -> MetadataStore:
    path = options.path or ""
    scheme = urlparse(path).scheme.lower()
    if scheme in ("s3", "s3a"):
        return S3Store(options)
    if scheme in ("", "file"):
        return LocalStore(Path(path.removeprefix("file://")) / FOLDER / options.stream_name)
    raise KinesisOptionError(f"kinesis.metadataPath {path!r}: the HDFS metadata committer writes to a local path, "
                             "file://, s3:// or s3a:// (this reader has no HDFS client); use DYNAMODB otherwise")


class LocalStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.address = f"path {root}"

    def get(self, batch: int, shard_id: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.root / str(batch) / f"{shard_id}.json").read_text())
        except FileNotFoundError:
            return None

    def put(self, batch: int, shard_id: str, record: dict[str, Any]) -> None:
        folder = self.root / str(batch)
        folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{shard_id}.")
        with os.fdopen(handle, "w") as out:
            json.dump(record, out)
        os.replace(temporary, folder / f"{shard_id}.json")

    def batch(self, batch: int) -> dict[str, dict[str, Any]]:
        folder = self.root / str(batch)
        if not folder.is_dir():
            return {}
        return {path.stem: json.loads(path.read_text()) for path in folder.glob("*.json")}

    def purge(self, below: int) -> int:
        old = [f for f in self.root.iterdir() if f.name.isdigit() and int(f.name) < below] if self.root.is_dir() else []
        for folder in old:
            shutil.rmtree(folder, ignore_errors=True)
        return len(old)


class S3Store:
    def __init__(self, options: MetadataOptions) -> None:
        parsed = urlparse(options.path or "")
        self.bucket = parsed.netloc
        self.prefix = "/".join(p for p in (parsed.path.strip("/"), FOLDER, options.stream_name) if p) + "/"
        self.address = f"s3://{self.bucket}/{self.prefix} at {options.endpoint_url or 'the AWS endpoint'}"
        self.s3 = store_client("s3", options.region, options.endpoint_url)

    def get(self, batch: int, shard_id: str) -> dict[str, Any] | None:
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=f"{self.prefix}{batch}/{shard_id}.json")["Body"]
        except self.s3.exceptions.NoSuchKey:
            return None
        return json.loads(body.read())

    def put(self, batch: int, shard_id: str, record: dict[str, Any]) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=f"{self.prefix}{batch}/{shard_id}.json",
                           Body=json.dumps(record).encode())

    def batch(self, batch: int) -> dict[str, dict[str, Any]]:
        keys = self._keys(f"{self.prefix}{batch}/")
        return {key.rsplit("/", 1)[1].removesuffix(".json"): json.loads(
            self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()) for key in keys}

    def purge(self, below: int) -> int:
        old = [key for key in self._keys(self.prefix) if _batch_of(key[len(self.prefix):]) < below]
        for start in range(0, len(old), 1000):
            self.s3.delete_objects(Bucket=self.bucket,
                                   Delete={"Objects": [{"Key": key} for key in old[start:start + 1000]]})
        return len(old)

    def _keys(self, prefix: str) -> list[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", ())]


def _batch_of(relative_key: str) -> float:
    """The batch a key under the stream's prefix belongs to; a stranger key is never old."""
    head = relative_key.split("/", 1)[0]
    return int(head) if head.isdigit() else float("inf")
