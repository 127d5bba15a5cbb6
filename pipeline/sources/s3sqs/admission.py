"""Which announced files a batch takes, and what happens to each message: a pure decision, no I/O.

A file is refused when it is already known (a duplicate notification, or a file seen before), older than
maxFileAge, or its name does not match pathGlobFilter. A message whose files were all refused, or that is
malformed, is a consumer error: deleted, or kept (to reach a dead-letter queue) with
`sqs.keepMessageForConsumerError`. Messages that announce nothing (S3 test events, removals) are deleted.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from pipeline.sources.s3sqs.events import S3File, parse_message
from pipeline.sources.s3sqs.options import S3SqsOptions

if TYPE_CHECKING:
    from pipeline.sources.s3sqs.queue import Message  # boto3: the driver's, not needed where files are read


@dataclass
class Admission:
    files: list[S3File] = field(default_factory=list)  # new files, in arrival order
    delete: list[Message] = field(default_factory=list)  # once the files are recorded
    keep: list[Message] = field(default_factory=list)  # consumer errors left for redelivery / a DLQ
    refused: Counter = field(default_factory=Counter)  # reason -> files or messages


def admit(messages: list[Message], seen: Callable[[str], bool], options: S3SqsOptions, now_ms: int) -> Admission:
    result = Admission()
    taken: set[str] = set()
    oldest_ms = now_ms - options.max_file_age_s * 1000
    for message in messages:
        parsed = parse_message(message.body)
        if parsed.malformed:
            result.refused["malformed"] += 1
            _consumer_error(result, message, options)
            continue
        if parsed.ignored:
            result.refused["ignored"] += 1
            result.delete.append(message)
            continue
        accepted = 0
        for item in parsed.files:
            reason = _refusal(item, seen, taken, options, oldest_ms)
            if reason:
                result.refused[reason] += 1
                continue
            taken.add(item.path)
            result.files.append(item)
            accepted += 1
        if accepted:
            result.delete.append(message)
        else:
            _consumer_error(result, message, options)
    return result


def _refusal(item: S3File, seen: Callable[[str], bool], taken: set[str], options: S3SqsOptions,
             oldest_ms: float) -> str | None:
    if item.path in taken or seen(item.path):
        return "duplicate"
    if item.event_time_ms < oldest_ms:
        return "too old"
    if options.path_glob_filter and not fnmatch.fnmatchcase(posixpath.basename(item.path), options.path_glob_filter):
        return "glob mismatch"
    return None


def _consumer_error(result: Admission, message: Message, options: S3SqsOptions) -> None:
    (result.keep if options.keep_message_for_consumer_error else result.delete).append(message)
