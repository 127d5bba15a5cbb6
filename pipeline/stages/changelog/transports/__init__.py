"""How change records reach the changelog stage: one module per transport behind one interface.

The stage (`pipeline.stages.changelog.stage`) runs a streaming query, one micro-batch at a time, and lands each batch
through `Landing` (decode -> normalise -> route -> idempotent append -> dead letters). A transport says what is
particular to where the records come from: which services must answer and how an outage is named, how the
stream is opened and triggered, when a run until caught up is drained, and how a batch's rows reach `Landing`
(with which transport columns). `changelog.source` chooses one; adding a transport is adding a module here and
a line to `TRANSPORTS`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pipeline.config.settings import PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from pipeline.stages.changelog.landing import Landing
    from pipeline.stages.changelog.report import BatchReport

# Spark reports a trigger that planned no batch only this often; a run until caught up that stops on
# `found_nothing_new` sets it to 0 (`Transport.query_conf`), so that such a trigger is reported at once
NO_DATA_PROGRESS_INTERVAL = "spark.sql.streaming.noDataProgressEventInterval"

# changelog.source -> the module and class that carry it
TRANSPORTS = {"kafka": ("pipeline.stages.changelog.transports.kafka", "KafkaTransport"),
              "kinesis": ("pipeline.stages.changelog.transports.kinesis", "KinesisTransport"),
              "s3-sqs": ("pipeline.stages.changelog.transports.s3sqs", "S3SqsTransport")}


@dataclass(frozen=True)
class Outage:
    """A service the transport needs that does not answer, by name and address."""

    service: str
    address: str
    error: str


class Transport(Protocol):
    def subscription(self) -> dict[str, str | None]:
        """What the stage reads, as recorded in its checkpoint: a checkpoint is refused for another one."""
        ...

    def check(self) -> None:
        """Raise an error naming the service and its address when one the transport needs does not answer."""
        ...

    def outage(self) -> Outage | None:
        """The service that does not answer right now, or None."""
        ...

    def open(self, spark: SparkSession) -> DataFrame:
        """The streaming DataFrame of the transport's records."""
        ...

    def trigger(self, until_caught_up: bool) -> dict[str, Any]:
        """The keyword arguments of `DataStreamWriter.trigger` for a run that goes on, or one until caught up."""
        ...

    def query_conf(self, until_caught_up: bool) -> dict[str, str]:
        """Session settings the query starts with (read once, when it starts): what `drained` needs."""
        ...

    def drained(self, query: StreamingQuery) -> bool:
        """In a run until caught up: whether the query may stop now (a query that stops by itself: never)."""
        ...

    def land(self, landing: Landing, batch: DataFrame, report: BatchReport) -> None:
        """Land one micro-batch through `landing`, its dead letters included."""
        ...

    def replay(self, landing: Landing, letters: DataFrame, report: BatchReport) -> None:
        """Land dead letters again (their Kafka-shaped columns), only counting those that still fail."""
        ...


def found_nothing_new(query: StreamingQuery) -> bool:
    """Whether the query's last finished trigger planned no batch (each source's end offset is its start), and
    the trigger running now has not found data either.

    A progress report describes a trigger that has finished; the status, the one running now. Neither serves
    alone: Spark 4.1 gives every trigger a new execution context whose status says "no data available" until
    that trigger's offsets are planned (so a poll while the next batch is planned would stop a query with
    records still to read), and the last report stays that of an empty trigger while the next one lands a batch
    of records that arrived since (so a poll then would stop the query in the middle of landing it). The report
    is read first, so only a trigger that finds data in the milliseconds between the status read and the stop
    can be stopped as its batch starts; like any batch a stop cuts short, the next run replays it."""
    progress = query.lastProgress
    return (progress is not None and all(source["startOffset"] == source["endOffset"]
                                         for source in progress["sources"])
            and not query.status["isDataAvailable"])


def transport_for(cfg: PipelineConfig) -> Transport:
    """The transport `changelog.source` names; its constructor checks the subscription's settings."""
    module, name = TRANSPORTS[cfg.changelog.source]
    return getattr(importlib.import_module(module), name)(cfg)  # type: ignore[no-any-return]
