"""The `aws-kinesis` options: the seed connector's names, meanings and defaults, parsed and checked once.

Option names are case-insensitive and carry the `kinesis.` prefix, as in the seed connector. Options of the
seed that do not apply here (EFO, the KPL sink's settings) are rejected by name with the reason, and unknown
names (a typo) with the list of options, so nobody believes they took effect. One addition to the seed's
names: `kinesis.metadataEndpointUrl`, the S3 or DynamoDB endpoint of the metadata store (moto, a VPC endpoint).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Mapping

PREFIX = "kinesis."
CONSUMER_TYPES = ("GetRecords", "SubscribeToShard")
_SYNCHRONOUS_SINK = "the sink sends PutRecords itself, synchronously, and flushes when each task ends (no KPL producer)"
UNSUPPORTED = {
    "consumername": "SubscribeToShard (enhanced fan-out) is not supported: the local AWS (moto) does not "
                    "implement it, so it could not be tested",
    "sink.aggregationenabled": "the sink writes one Kinesis record per row (no KPL aggregation on write)",
    "sink.flushwaittimems": _SYNCHRONOUS_SINK,
    "sink.recordmaxbufferedtimems": _SYNCHRONOUS_SINK,
    "sink.maxconnections": _SYNCHRONOUS_SINK,
}
CLIENT_OPTIONS = {"streamname", "endpointurl", "region", "stsrolearn", "stssessionname", "stsendpointurl",
                  "clientnumretries", "clientretryintervalsms", "clientmaxretryintervalms"}
SOURCE_OPTIONS = CLIENT_OPTIONS | {"consumertype", "startingposition", "failondataloss", "maxfetchrecordspershard",
                                   "maxfetchtimepershardsec", "describeshardinterval",
                                   "getrecords.numberofrecordsperfetch", "getrecords.fetchintervalms",
                                   "checknewrecordthreads", "metadatacommittertype", "metadatapath",
                                   "dynamodb.tablename", "metadatanumretries", "metadataretryintervalsms",
                                   "metadatamaxretryintervalms", "minbatchestoretain", "metadataendpointurl"}
COMMITTER_TYPES = ("HDFS", "DYNAMODB")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class KinesisOptionError(ValueError):
    """An `aws-kinesis` option is missing or invalid; the message names it and what to set."""


@dataclass(frozen=True)
class StartingPosition:
    """Where a shard first seen at the query's start is read from: TRIM_HORIZON, LATEST or AT_TIMESTAMP."""

    kind: str
    timestamp: float | None = None  # epoch seconds, AT_TIMESTAMP only

    @classmethod
    def parse(cls, text: str) -> StartingPosition:
        words = text.strip().split(None, 1)
        kind = words[0].upper() if words else ""
        if kind in ("TRIM_HORIZON", "EARLIEST") and len(words) == 1:
            return cls("TRIM_HORIZON")
        if kind == "LATEST" and len(words) == 1:
            return cls("LATEST")
        if kind == "AT_TIMESTAMP" and len(words) == 2:
            try:
                at = datetime.fromisoformat(words[1].strip())
            except ValueError:
                at = None
            if at is not None and at.tzinfo is not None:
                return cls("AT_TIMESTAMP", at.astimezone(timezone.utc).timestamp())
        raise KinesisOptionError(
            f"kinesis.startingPosition {text!r} is not one of LATEST, TRIM_HORIZON, EARLIEST or "
            "'AT_TIMESTAMP <ISO time with zone>' (e.g. 'AT_TIMESTAMP 2023-08-30T19:00:05Z')")


@dataclass(frozen=True)
class ClientOptions:
    """How to reach Kinesis: endpoint, region, an STS role (else the default credential chain), retries."""

    endpoint_url: str | None = None
    region: str = "us-east-1"
    keys: tuple[str, str] | None = None  # (access key id, secret key) from the pipeline's config; not an option
    sts_role_arn: str | None = None
    sts_session_name: str | None = None
    sts_endpoint_url: str | None = None
    num_retries: int = 5
    retry_interval_s: float = 1.0
    max_retry_interval_s: float = 10.0


@dataclass(frozen=True)
class MetadataOptions:
    """Where executors record how far each shard was read in each batch (the seed's metadata committer)."""

    committer_type: str  # HDFS (files under `path`: local, s3:// or s3a://) or DYNAMODB (`table_name`)
    stream_name: str
    path: str | None = None
    table_name: str | None = None
    endpoint_url: str | None = None  # S3 or DynamoDB endpoint override; None: AWS's
    region: str = "us-east-1"
    num_retries: int = 5
    retry_interval_s: float = 1.0
    max_retry_interval_s: float = 10.0
    min_batches_to_retain: int = 100  # Spark's spark.sql.streaming.minBatchesToRetain default


@dataclass(frozen=True)
class SourceOptions:
    stream_name: str
    client: ClientOptions
    metadata: MetadataOptions
    starting_position: StartingPosition = StartingPosition("LATEST")
    fail_on_data_loss: bool = False
    max_fetch_records_per_shard: int = 100_000
    max_fetch_time_per_shard_s: float | None = None
    describe_shard_interval_s: float = 1.0
    records_per_fetch: int = 10_000
    fetch_interval_s: float = 0.2
    check_new_record_threads: int = 8


@dataclass(frozen=True)
class SinkOptions:
    stream_name: str
    client: ClientOptions


class _Options:
    """The `kinesis.*` options, lower-cased, with typed getters that name the option on bad input."""

    def __init__(self, raw: Mapping[str, str], known: set[str]) -> None:
        self.values = {k.lower()[len(PREFIX):]: str(v) for k, v in raw.items() if k.lower().startswith(PREFIX)}
        for name in self.values:
            if name in UNSUPPORTED:
                raise KinesisOptionError(f"kinesis.{name} is not supported: {UNSUPPORTED[name]}")
            if name not in known:
                raise KinesisOptionError(f"kinesis.{name} is not an option here; the options are "
                                         f"{', '.join(sorted(known))} (case-insensitive, with the kinesis. prefix)")

    def text(self, name: str, default: str | None = None) -> str | None:
        return self.values.get(name.lower(), default) or default

    def required(self, name: str) -> str:
        value = self.text(name)
        if not value:
            raise KinesisOptionError(f"kinesis.{name} is required: set .option('kinesis.{name}', ...)")
        return value

    def number(self, name: str, default: float, minimum: float = 1) -> float:
        text = self.text(name)
        try:
            value = float(text.replace(",", "")) if text is not None else default
        except ValueError:
            raise KinesisOptionError(f"kinesis.{name} must be a number, got {text!r}") from None
        if value < minimum:
            raise KinesisOptionError(f"kinesis.{name} must be at least {minimum:g}, got {text!r}")
        return value

    def duration_s(self, name: str, default: float) -> float:
        text = self.text(name)
        if text is None:
            return default
        match = _DURATION.match(text)
        if not match:
            raise KinesisOptionError(f"kinesis.{name} must be a duration like 1s, 500ms or 2m, got {text!r}")
        return float(match.group(1)) * _UNITS[match.group(2)]

    def flag(self, name: str, default: bool) -> bool:
        text = (self.text(name) or str(default)).strip().lower()
        if text not in ("true", "false"):
            raise KinesisOptionError(f"kinesis.{name} must be true or false, got {text!r}")
        return text == "true"

    def client(self) -> ClientOptions:
        endpoint = self.text("endpointUrl")
        region = self.text("region") or _region_of(endpoint)
        retries = int(self.number("clientNumRetries", 5, minimum=0))
        return ClientOptions(
            endpoint_url=endpoint, region=region, sts_role_arn=self.text("stsRoleArn"),
            sts_session_name=self.text("stsSessionName"), sts_endpoint_url=self.text("stsEndpointUrl"),
            num_retries=retries, retry_interval_s=self.number("clientRetryIntervalsMs", 1000, minimum=0) / 1000,
            max_retry_interval_s=self.number("clientMaxRetryIntervalMs", 10_000, minimum=0) / 1000)


def source_options(raw: Mapping[str, str]) -> SourceOptions:
    options = _Options(raw, SOURCE_OPTIONS)
    consumer = options.text("consumerType", "GetRecords")
    if consumer not in CONSUMER_TYPES:
        raise KinesisOptionError(f"kinesis.consumerType {consumer!r} is not one of {', '.join(CONSUMER_TYPES)}")
    if consumer == "SubscribeToShard":
        raise KinesisOptionError("kinesis.consumerType SubscribeToShard (enhanced fan-out) is not supported: the "
                                 "local AWS (moto) does not implement it, so it could not be tested; use GetRecords")
    max_time = options.text("maxFetchTimePerShardSec")
    stream, client = options.required("streamName"), options.client()
    return SourceOptions(
        stream_name=stream, client=client,
        starting_position=StartingPosition.parse(options.text("startingPosition", "LATEST") or "LATEST"),
        fail_on_data_loss=options.flag("failOnDataLoss", False),
        max_fetch_records_per_shard=int(options.number("maxFetchRecordsPerShard", 100_000)),
        max_fetch_time_per_shard_s=options.number("maxFetchTimePerShardSec", 0, minimum=0.001) if max_time else None,
        describe_shard_interval_s=options.duration_s("describeShardInterval", 1.0),
        records_per_fetch=min(10_000, int(options.number("getRecords.numberOfRecordsPerFetch", 10_000))),
        fetch_interval_s=options.number("getRecords.fetchIntervalMs", 200, minimum=0) / 1000,
        check_new_record_threads=int(options.number("checkNewRecordThreads", 8)),
        metadata=_metadata(options, stream, client.region, _checkpoint_location(raw)))


def _metadata(options: _Options, stream: str, region: str, checkpoint: str | None) -> MetadataOptions:
    kind = (options.text("metadataCommitterType", "HDFS") or "HDFS").upper()
    if kind not in COMMITTER_TYPES:
        raise KinesisOptionError(f"kinesis.metadataCommitterType {kind!r} is not one of {', '.join(COMMITTER_TYPES)}")
    path, table = options.text("metadataPath") or checkpoint, options.text("dynamodb.tableName")
    if kind == "HDFS" and not path:
        raise KinesisOptionError(
            "kinesis.metadataPath is required with the HDFS metadata committer: a Python data source is not told "
            "the query's checkpointLocation, so set kinesis.metadataPath (or the reader option checkpointLocation) "
            "to it, or another local, s3:// or s3a:// path")
    if kind == "DYNAMODB" and not table:
        raise KinesisOptionError("kinesis.dynamodb.tableName is required with kinesis.metadataCommitterType=DYNAMODB")
    return MetadataOptions(
        committer_type=kind, stream_name=stream, path=path if kind == "HDFS" else None,
        table_name=table if kind == "DYNAMODB" else None, endpoint_url=options.text("metadataEndpointUrl"),
        region=region, num_retries=int(options.number("metadataNumRetries", 5, minimum=0)),
        retry_interval_s=options.number("metadataRetryIntervalsMs", 1000, minimum=0) / 1000,
        max_retry_interval_s=options.number("metadataMaxRetryIntervalMs", 10_000, minimum=0) / 1000,
        min_batches_to_retain=int(options.number("minBatchesToRetain", 100)))


def _checkpoint_location(raw: Mapping[str, str]) -> str | None:
    """The `checkpointLocation` reader option, if given: the seed's default metadata path."""
    return next((str(v) for k, v in raw.items() if k.lower() == "checkpointlocation" and v), None)


def sink_options(raw: Mapping[str, str]) -> SinkOptions:
    options = _Options(raw, CLIENT_OPTIONS)
    return SinkOptions(stream_name=options.required("streamName"), client=options.client())


def _region_of(endpoint: str | None) -> str:
    """`kinesis.<region>.amazonaws.com` names its region; anything else (a local endpoint) gets us-east-1."""
    match = re.search(r"kinesis[.-]([a-z]{2}(?:-[a-z]+)+-\d)\.", endpoint or "")
    return match.group(1) if match else "us-east-1"
