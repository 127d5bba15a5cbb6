"""The source's options: the seed connector's configuration table (same names, meanings, defaults), plus an
endpoint override, credentials, CSV parsing and a row format for folders of mixed files.

Names are accepted with or without the connector's `spark.s3conn.` prefix, in any letter case (Spark options are
case-insensitive). Every problem is reported with the option's name and what a valid value looks like.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

PREFIX = "spark.s3conn."
FILE_FORMATS = ("csv", "json", "parquet", "avro")
ROW_FORMATS = ("columns", "json", "files")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class S3SqsOptionError(ValueError):
    """An option is missing or malformed; the message names it and the fix."""


@dataclass(frozen=True)
class S3SqsOptions:
    file_format: str
    queue_url: str
    queue_region: str
    checkpoint_location: str  # the query's checkpoint (a path, file:, s3:// or s3a://): <it>/sources/s3-sqs
    max_files_per_trigger: int = 100  # -1: unlimited
    max_file_age_s: float = 15 * 86400.0
    path_glob_filter: str | None = None
    partition_columns: tuple[str, ...] = ()
    base_path: str | None = None
    reprocess_start_batch_id: int | None = None
    reprocess_end_batch_id: int | None = None
    reprocess_dry_run: bool = True
    long_polling_wait_s: int = 10
    queue_fetch_wait_timeout_s: float = 20.0  # default: 2 x long polling
    max_concurrency: int = 50
    max_retries: int = 10
    visibility_timeout_s: int = 60
    keep_message_for_consumer_error: bool = False
    endpoint_url: str | None = None  # S3-compatible stores and local AWS (moto); None: AWS
    aws_access_key_id: str | None = None  # None: boto3's default credential chain
    aws_secret_access_key: str | None = None
    row_format: str = "columns"  # json: each row one JSON object in `value`, for folders of mixed tables;
    # files: one row per announced file (FILE_ROWS_SCHEMA), none read, for a reader that reads them itself
    header: bool = False  # csv: the first line names the columns
    delimiter: str = ","

    @property
    def reprocessing(self) -> bool:
        return self.reprocess_start_batch_id is not None

    def boto3_kwargs(self) -> dict[str, str]:
        kwargs = {"region_name": self.queue_region}
        if self.endpoint_url:
            kwargs["endpoint_url"] = self.endpoint_url
        if self.aws_access_key_id and self.aws_secret_access_key:
            kwargs["aws_access_key_id"] = self.aws_access_key_id
            kwargs["aws_secret_access_key"] = self.aws_secret_access_key
        return kwargs


def parse_options(raw: Mapping[str, str]) -> S3SqsOptions:
    """Validate the user's options (as Spark hands them over) into `S3SqsOptions`."""
    given = {_short(name): str(value) for name, value in raw.items()}
    fmt = _required(given, "fileFormat").lower()
    if fmt not in FILE_FORMATS:
        raise S3SqsOptionError(f"fileFormat {fmt!r} is not supported: use one of {', '.join(FILE_FORMATS)}")
    long_poll = _int(given, "sqs.longPollingWaitTimeSeconds", 10, low=0, high=20)
    options = S3SqsOptions(
        file_format=fmt,
        queue_url=_required(given, "queueUrl"),
        queue_region=_required(given, "queueRegion"),
        checkpoint_location=_checkpoint(_required(given, "checkpointLocation")),
        max_files_per_trigger=_max_files(given),
        max_file_age_s=_age(given.get("maxfileage", "15d")),
        path_glob_filter=given.get("pathglobfilter") or None,
        partition_columns=tuple(c.strip() for c in given.get("partitioncolumns", "").split(",") if c.strip()),
        base_path=given.get("basepath") or None,
        reprocess_start_batch_id=_optional_int(given, "reprocessStartBatchId"),
        reprocess_end_batch_id=_optional_int(given, "reprocessEndBatchId"),
        reprocess_dry_run=_bool(given, "reprocessDryRun", True),
        long_polling_wait_s=long_poll,
        queue_fetch_wait_timeout_s=float(_int(given, "queueFetchWaitTimeoutSeconds", max(1, 2 * long_poll), low=1)),
        max_concurrency=_int(given, "sqs.maxConcurrency", 50, low=1),
        max_retries=_int(given, "sqs.maxRetries", 10, low=0),
        visibility_timeout_s=_int(given, "sqs.visibilityTimeoutSeconds", 60, low=0, high=43200),
        keep_message_for_consumer_error=_bool(given, "sqs.keepMessageForConsumerError", False),
        endpoint_url=given.get("endpointurl") or None,
        aws_access_key_id=given.get("awsaccesskeyid") or None,
        aws_secret_access_key=given.get("awssecretaccesskey") or None,
        row_format=_choice(given, "rowFormat", ROW_FORMATS),
        header=_bool(given, "header", False),
        delimiter=given.get("delimiter", given.get("sep", ",")),
    )
    _check_together(options)
    return options


def _short(name: str) -> str:
    name = name.lower()
    return name[len(PREFIX):] if name.startswith(PREFIX) else name


def _required(given: dict[str, str], name: str) -> str:
    value = given.get(name.lower(), "").strip()
    if not value:
        raise S3SqsOptionError(f"option {name} is required (also accepted as {PREFIX}{name})")
    return value


def _int(given: dict[str, str], name: str, default: int, low: int | None = None, high: int | None = None) -> int:
    text = given.get(name.lower())
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise S3SqsOptionError(f"option {name} must be a whole number, got {text!r}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise S3SqsOptionError(f"option {name} must be {bounds}, got {value}")
    return value


def _optional_int(given: dict[str, str], name: str) -> int | None:
    return _int(given, name, 0, low=0) if name.lower() in given else None


def _bool(given: dict[str, str], name: str, default: bool) -> bool:
    text = given.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise S3SqsOptionError(f"option {name} must be true or false, got {text!r}")
    return text.strip().lower() == "true"


def _choice(given: dict[str, str], name: str, choices: tuple[str, ...]) -> str:
    value = given.get(name.lower(), choices[0]).lower()
    if value not in choices:
        raise S3SqsOptionError(f"option {name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _max_files(given: dict[str, str]) -> int:
    value = _int(given, "maxFilesPerTrigger", 100, low=-1)
    if value == 0:
        raise S3SqsOptionError("option maxFilesPerTrigger must be positive, or -1 for unlimited, got 0")
    return value


def _age(text: str) -> float:
    """`15d`, `12h`, `30m`, `90s`, `2w` -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text.lower())
    if not match:
        raise S3SqsOptionError(f"option maxFileAge must look like 15d, 12h, 30m, 90s or 2w, got {text!r}")
    return float(match.group(1)) * _AGE_UNITS[match.group(2)]


def _checkpoint(location: str) -> str:
    """A local path, file:, s3:// or s3a://: the places `folder.py` keeps the file log."""
    scheme = re.match(r"^([a-z][a-z0-9+.-]*):", location, re.IGNORECASE)
    if scheme and scheme.group(1).lower() not in ("file", "s3", "s3a"):
        raise S3SqsOptionError(f"option checkpointLocation {location!r}: the source keeps its file log on a local "
                               "disk or on S3; use a path, file:, s3:// or s3a://")
    return location


def _check_together(options: S3SqsOptions) -> None:
    if options.partition_columns and not options.base_path:
        raise S3SqsOptionError("option partitionColumns needs basePath (the root above the key=value folders), "
                               "e.g. basePath=s3://bucket/root/")
    if (options.reprocess_start_batch_id is None) != (options.reprocess_end_batch_id is None):
        raise S3SqsOptionError("options reprocessStartBatchId and reprocessEndBatchId go together")
    if options.reprocessing and options.reprocess_start_batch_id > options.reprocess_end_batch_id:  # type: ignore[operator]
        raise S3SqsOptionError("option reprocessStartBatchId must not be greater than reprocessEndBatchId")
    if options.row_format == "json" and options.file_format == "csv" and not options.header:
        raise S3SqsOptionError("rowFormat=json names each value by its column: CSV files need header=true")
    if options.row_format != "columns" and options.partition_columns:
        raise S3SqsOptionError("option partitionColumns needs rowFormat=columns")
