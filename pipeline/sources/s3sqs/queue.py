"""The SQS side, on the driver: parallel long polls up to a file budget and a deadline, and batched deletes.

`sqs.maxConcurrency` bounds the parallel receive calls (and the HTTP pool), `sqs.maxRetries` is botocore's retry
budget per call, `sqs.visibilityTimeoutSeconds` hides received messages from other consumers until they are
deleted, and messages that are not deleted come back after it (to a dead-letter queue, if the queue has one).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import boto3
import structlog
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from pipeline.sources.s3sqs.options import S3SqsOptions

log = structlog.get_logger(__name__)
SQS_MAX_BATCH = 10  # messages per ReceiveMessage / DeleteMessageBatch call


@dataclass(frozen=True)
class Message:
    message_id: str
    receipt_handle: str
    body: str


class SqsQueue:
    def __init__(self, options: S3SqsOptions) -> None:
        self.options = options
        config = Config(max_pool_connections=options.max_concurrency,
                        retries={"max_attempts": options.max_retries, "mode": "standard"})
        self.client: Any = boto3.client("sqs", config=config, **options.boto3_kwargs())
        self._pool = ThreadPoolExecutor(max_workers=options.max_concurrency, thread_name_prefix="s3-sqs-receive")

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    def receive(self, wanted: int | None) -> list[Message]:
        """Messages until about `wanted` (None: no limit) have arrived, the queue answers empty, or
        queueFetchWaitTimeoutSeconds passes.

        One long poll waits for the first messages: it returns as soon as there are any (parallel long polls
        would hold the round until the slowest of them gave up, a whole wait when fewer messages than calls
        arrive). Once messages come, parallel receives that do not wait take what else is there, round after
        round, and the first empty round ends the poll: a trigger never waits for messages that are not there.
        """
        deadline = time.monotonic() + self.options.queue_fetch_wait_timeout_s
        messages: dict[str, Message] = {}
        while wanted is None or len(messages) < wanted:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            needed = self.options.max_concurrency * SQS_MAX_BATCH if wanted is None else wanted - len(messages)
            if messages:  # draining: as many calls as the budget needs, none of them waiting
                calls, wait = min(self.options.max_concurrency, -(-needed // SQS_MAX_BATCH)), 0
            else:  # waiting for the first messages: one long poll
                calls, wait = 1, int(min(self.options.long_polling_wait_s, max(0, left)))
            rounds = list(self._pool.map(lambda n: self._receive_once(n, wait),
                                         [min(SQS_MAX_BATCH, needed - i * SQS_MAX_BATCH) for i in range(calls)]))
            got = [m for batch in rounds for m in batch]
            messages.update((m.message_id, m) for m in got)
            if not got:
                break  # the queue is empty now: plan with what arrived rather than wait out the deadline
        return list(messages.values())

    def delete(self, messages: list[Message]) -> None:
        """Delete in batches of ten; a failure is logged, not raised: the message comes back and is then
        recognised as a duplicate."""
        for start in range(0, len(messages), SQS_MAX_BATCH):
            chunk = messages[start:start + SQS_MAX_BATCH]
            entries = [{"Id": str(n), "ReceiptHandle": m.receipt_handle} for n, m in enumerate(chunk)]
            try:
                failed = self.client.delete_message_batch(QueueUrl=self.options.queue_url, Entries=entries).get("Failed", [])
            except (BotoCoreError, ClientError) as exc:
                log.warning("s3sqs.delete_failed", messages=len(chunk), error=str(exc))
                continue
            for failure in failed:
                log.warning("s3sqs.delete_failed", message=chunk[int(failure["Id"])].message_id,
                            error=failure.get("Message") or failure.get("Code"))

    def waiting_messages(self) -> tuple[int, int]:
        """(visible, in flight): in flight are received by some consumer and neither deleted nor back yet."""
        attributes = self.client.get_queue_attributes(QueueUrl=self.options.queue_url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])

    def _receive_once(self, count: int, wait_s: int) -> list[Message]:
        answer = self.client.receive_message(
            QueueUrl=self.options.queue_url, MaxNumberOfMessages=max(1, count), WaitTimeSeconds=wait_s,
            VisibilityTimeout=self.options.visibility_timeout_s)
        return [Message(m["MessageId"], m["ReceiptHandle"], m["Body"]) for m in answer.get("Messages", [])]
