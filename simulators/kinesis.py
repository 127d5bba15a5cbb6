"""The simulator's Kinesis transport: DMS's Kinesis target, one stream per source database.

A DMS task writes every table of its database into one stream as JSON; the partition key here is
`<schema>.<table>.<primary key>`, so one key's changes stay in one shard (in order) and a record's table is
known even when its body cannot be decoded. Streams are created with the asked shard count when missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.config.settings import AwsSettings
from pipeline.stages.changelog.transports.kinesis import client_options_for
from pipeline.sources.kinesis.client import Kinesis
from pipeline.sources.kinesis.put import RecordBatcher
from simulators.faults import Message
from simulators.transport import Delivery, TransportError

FORMATS = ("dms-json",)  # what DMS's Kinesis target writes


@dataclass
class KinesisTransport:
    settings: AwsSettings
    shards: int = 4
    delivery: Delivery = field(default_factory=Delivery)

    def __post_init__(self) -> None:
        self.kinesis = Kinesis(client_options_for(self.settings))
        self._batchers: dict[str, RecordBatcher] = {}

    def prepare(self, topics: list[str]) -> None:
        """Create the missing streams (`<database>` of each `<database>.<schema>.<table>`) and wait until active."""
        streams = sorted({topic.split(".")[0] for topic in topics})
        for stream in streams:
            try:  # asked of the stream itself: `list_streams` answers a page of 100 streams at most
                self.kinesis.call("describe_stream_summary", StreamName=stream)
            except self.kinesis.client.exceptions.ResourceNotFoundException:
                self.kinesis.call("create_stream", StreamName=stream, ShardCount=self.shards)
            self.kinesis.client.get_waiter("stream_exists").wait(StreamName=stream)
            self._batchers[stream] = RecordBatcher(self.kinesis, stream)

    def send(self, message: Message) -> None:
        stream, schema, table = message.topic.split(".", 2)
        key = (message.key or b"").decode(errors="replace")
        self._batchers[stream].add(message.value or b"", f"{schema}.{table}.{key}")

    def close(self) -> Delivery:
        try:
            for batcher in self._batchers.values():
                batcher.flush()
        except Exception as exc:
            raise TransportError(f"Kinesis at {self.kinesis.address}: {exc}") from exc
        self.delivery.acknowledged = sum(batcher.sent for batcher in self._batchers.values())
        return self.delivery
