"""A Kinesis client for one reader or writer: optional STS role, and the seed's retry policy on throttling.

botocore's own retries are switched off so that `kinesis.clientNumRetries`, `clientRetryIntervalsMs` and
`clientMaxRetryIntervalMs` alone decide how long a throttled or unreachable call is retried (exponential
backoff from the interval, capped at the maximum).
"""

from __future__ import annotations

import binascii
import functools
import json
import time
from datetime import datetime, timezone
from typing import Any, Callable

import boto3
import botocore.session
import structlog
from botocore.config import Config
from botocore.credentials import AssumeRoleCredentialFetcher, DeferredRefreshableCredentials
from botocore.exceptions import ClientError, ConnectionError as BotoConnectionError
from botocore.utils import parse_timestamp

from pipeline.sources.kinesis.options import ClientOptions

log = structlog.get_logger(__name__)

RETRIED = {"ProvisionedThroughputExceededException", "LimitExceededException", "ThrottlingException",
           "KMSThrottlingException", "InternalFailure", "ServiceUnavailable"}


class KinesisUnavailable(RuntimeError):
    """Kinesis kept failing after every retry; names the call, the stream's endpoint and the last error."""


def error_code(exc: Exception) -> str | None:
    return exc.response.get("Error", {}).get("Code") if isinstance(exc, ClientError) else None


class Kinesis:
    def __init__(self, options: ClientOptions) -> None:
        self.options = options
        self.address = options.endpoint_url or f"the AWS endpoint of {options.region}"
        self.client = _session(options).client(
            "kinesis", endpoint_url=options.endpoint_url or None,
            config=Config(retries={"max_attempts": 1, "mode": "standard"}))
        self.client.meta.events.register("before-parse.kinesis.GetRecords", parse_records)

    def call(self, operation: str, **params: Any) -> dict[str, Any]:
        """`operation` with throttling and connection errors retried with backoff; other errors raise at once."""
        method: Callable[..., dict[str, Any]] = getattr(self.client, operation)
        delay = self.options.retry_interval_s
        for attempt in range(self.options.num_retries + 1):
            try:
                return method(**params)
            except (ClientError, BotoConnectionError) as exc:
                retried = isinstance(exc, BotoConnectionError) or error_code(exc) in RETRIED
                if not retried or attempt == self.options.num_retries:
                    if retried:
                        raise KinesisUnavailable(f"Kinesis {operation} at {self.address} failed after "
                                                 f"{attempt + 1} attempts: {exc}") from exc
                    raise
                log.warning("kinesis.retry", operation=operation, attempt=attempt + 1, wait_s=delay,
                            error=error_code(exc) or type(exc).__name__)
                time.sleep(delay)
                delay = min(self.options.max_retry_interval_s, max(delay * 2, 0.05))
        raise AssertionError("unreachable")


@functools.cache
def shared(options: ClientOptions) -> Kinesis:
    """One client per process and options, for the executors' shard reads: making one loads botocore's models
    anew (0.04-0.1 CPU-s), which every shard's read paid in every batch. Python workers serve task after task,
    one at a time, and a boto3 client may be used by any thread."""
    return Kinesis(options)


def epoch_timestamp(value: Any) -> datetime:
    """A timestamp of an answer as a UTC datetime. Kinesis sends epoch seconds (every record's
    `ApproximateArrivalTimestamp`), which botocore's own parser turns into a datetime in the local zone through
    dateutil's `tzlocal`: a third of an executor's Python time reading a shard went there. The same instant,
    from the C `fromtimestamp`; anything else (text) is botocore's."""
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, timezone.utc)
    return parse_timestamp(value)


def parse_records(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any) -> None:
    """GetRecords' answer parsed by `json` and `binascii`, into what botocore's parser gives (each record's `Data`
    as bytes, its arrival time by `epoch_timestamp`), through botocore's hook for parsing an answer itself.
    botocore's parser walks the operation's model for every field of every record in Python: 7.3 µs a record
    against 3.3, a quarter of an executor's Python time reading a shard. An error answer is left to botocore."""
    if response_dict["status_code"] != 200:
        return
    answer = json.loads(response_dict["body"])
    for record in answer.get("Records", ()):
        record["Data"] = binascii.a2b_base64(record["Data"])
        record["ApproximateArrivalTimestamp"] = epoch_timestamp(record["ApproximateArrivalTimestamp"])
    customized_response_dict.update(answer)
    response_dict["body"] = b"{}"  # what botocore parses itself: the answer's metadata, from its headers


def _botocore_session() -> botocore.session.Session:
    session = botocore.session.Session()
    session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=epoch_timestamp)
    return session


def _session(options: ClientOptions) -> boto3.Session:
    """The default credential chain (environment, profile, instance role), or with `stsRoleArn` the role's
    temporary credentials from STS (cross-account reads, as in the seed), renewed by botocore before they
    expire, so a query outlives its first hour. Timestamps are parsed by `epoch_timestamp`."""
    keys = dict(zip(("aws_access_key_id", "aws_secret_access_key"), options.keys or ()))
    session = boto3.Session(region_name=options.region, botocore_session=_botocore_session(), **keys)
    if not options.sts_role_arn:
        return session
    fetcher = AssumeRoleCredentialFetcher(
        client_creator=functools.partial(session.client, endpoint_url=options.sts_endpoint_url or None),
        source_credentials=session.get_credentials(), role_arn=options.sts_role_arn,
        extra_args={"RoleSessionName": options.sts_session_name or "spark-aws-kinesis"})
    assuming = _botocore_session()
    # botocore's own recipe for assumed-role sessions; it has no public setter for the credentials
    assuming._credentials = DeferredRefreshableCredentials(method="assume-role", refresh_using=fetcher.fetch_credentials)
    log.info("kinesis.role", role=options.sts_role_arn, sts=options.sts_endpoint_url or "the AWS endpoint")
    return boto3.Session(botocore_session=assuming, region_name=options.region)
