"""Kafka: registry-framed Avro (or DMS JSON) records of the subscribed topics, read by Spark's Kafka source.

A run until caught up drains with `availableNow`, which stops the query by itself. A batch is not read as the
streaming source hands it over: its topics and their offset ranges come from the query's offset log
(`kafka_offsets`), and each topic's records are read once, by a batch query over just its ranges, then landed
in one pass (`Landing.land_topics`), the quiet ones by one job. Kafka and the registry must answer; either one's
outage is named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cdc.framing import Framing
from pipeline.config import kafka
from pipeline.stages.changelog.errors import StageError
from pipeline.stages.changelog.transports import Outage
from pipeline.stages.changelog.transports.kafka_offsets import BatchReads, batch_ranges
from pipeline.config.settings import PipelineConfig
from pipeline.runtime.cluster import is_local
from registry.backend import RegistryError
from registry.resolver import resolver_from_settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from pipeline.stages.changelog.landing import Landing
    from pipeline.stages.changelog.report import BatchReport


class KafkaTransport:
    def __init__(self, cfg: PipelineConfig) -> None:
        if not (cfg.changelog.topics or cfg.changelog.topic_pattern):
            raise StageError("no topics to read: set changelog.topics or changelog.topic_pattern "
                             "(e.g. --set changelog.topic_pattern='moma\\..*')")
        self.cfg = cfg
        self.headers = Framing.of(cfg.registry.wire_format).reads_headers
        self.registry = resolver_from_settings(cfg.registry, cfg.aws)

    def subscription(self) -> dict[str, str | None]:
        settings = self.cfg.changelog
        return {"topics": ",".join(settings.topics) or None, "topic_pattern": settings.topic_pattern}

    def check(self) -> None:
        kafka.topic_names(self.cfg.kafka)
        self.registry.check()

    def outage(self) -> Outage | None:
        try:
            kafka.topic_names(self.cfg.kafka)
        except kafka.KafkaUnavailable as exc:
            return Outage("kafka", str(self.cfg.kafka.bootstrap_servers), str(exc))
        try:
            self.registry.check()
        except RegistryError as exc:
            return Outage("registry", self.registry.address, str(exc))
        return None

    def open(self, spark: SparkSession) -> DataFrame:
        settings = self.cfg.changelog
        reader = (spark.readStream.format("kafka").options(**kafka.spark_options(self.cfg.kafka, headers=self.headers))
                  .option("startingOffsets", settings.starting_offsets).option("failOnDataLoss", "false"))
        if settings.topics:
            reader = reader.option("subscribe", ",".join(settings.topics))
        else:
            reader = reader.option("subscribePattern", settings.topic_pattern)
        if settings.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
        return reader.load()

    def trigger(self, until_caught_up: bool) -> dict[str, Any]:
        return {"availableNow": True} if until_caught_up else {"processingTime": self.cfg.changelog.trigger_interval}

    def query_conf(self, until_caught_up: bool) -> dict[str, str]:
        return {}  # available-now stops the query by itself

    def drained(self, query: StreamingQuery) -> bool:
        return False  # available-now stops the query by itself

    def land(self, landing: Landing, batch: DataFrame, report: BatchReport) -> None:
        """The streaming batch is not read: each topic's records are, once, by their offset ranges."""
        spark = landing.spark
        ranges = batch_ranges(spark, str(self.cfg.changelog.checkpoint), report.batch_id)
        parallelism = None if is_local(spark.sparkContext.master) else spark.sparkContext.defaultParallelism
        group = kafka.reader_group(self.cfg.kafka, str(self.cfg.changelog.checkpoint))
        landing.land_topics(BatchReads(ranges, spark, self.cfg.kafka, self.headers, parallelism, group), report)

    def replay(self, landing: Landing, letters: DataFrame, report: BatchReport) -> None:
        landing.land(letters, report, store_dead_letters=False)
