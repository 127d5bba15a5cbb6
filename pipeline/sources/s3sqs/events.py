"""SQS message bodies into the S3 objects they announce.

Three shapes carry the same news: an S3 event notification (`Records[].s3`), the same wrapped by SNS for fan-out
(`Type: Notification`, the event as text in `Message`), and an EventBridge event (`source: aws.s3`,
`detail-type: Object Created`). Both carry the object key URL-encoded as a form value (S3's notification
documentation: "red flower.jpg" becomes "red+flower.jpg"; `%2B` is a `+`, `%25` a `%`, UTF-8 bytes as `%XX`), and
both are decoded by that one rule, as AWS's own Lambda Powertools decodes both. A key decoded wrong names no
object, and its file is dead-lettered by the changelog stage, never skipped. S3's `s3:TestEvent`, sent when
notifications are configured, announces nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote_plus


@dataclass(frozen=True)
class S3File:
    path: str  # s3://bucket/key, the key decoded
    size: int
    event_time_ms: int  # when S3 says the object was created


@dataclass(frozen=True)
class Parsed:
    """What one message says: files created, or nothing worth reading (`ignored`), or nonsense (`malformed`)."""

    files: list[S3File] = field(default_factory=list)
    ignored: str | None = None
    malformed: str | None = None


def parse_message(body: str) -> Parsed:
    try:
        event = json.loads(body)
    except ValueError:
        return Parsed(malformed="the body is not JSON")
    if not isinstance(event, dict):
        return Parsed(malformed="the body is not a JSON object")
    try:
        return _parse(event)
    except (KeyError, TypeError, ValueError) as exc:
        return Parsed(malformed=f"not an S3 event notification: {type(exc).__name__} {exc}")


def _parse(event: dict[str, Any]) -> Parsed:
    if event.get("Type") == "Notification" and "Message" in event:  # SNS fan-out
        return parse_message(event["Message"])
    if event.get("Event") == "s3:TestEvent":
        return Parsed(ignored="S3 test event")
    if event.get("source") == "aws.s3" and "detail" in event:
        return _eventbridge(event)
    if "Records" in event:
        return _s3_records(event["Records"])
    raise ValueError("no Records, no SNS Message, no EventBridge detail")


def _s3_records(records: list[dict[str, Any]]) -> Parsed:
    files, others = [], []
    for record in records:
        name = record["eventName"]
        if not name.startswith("ObjectCreated:"):
            others.append(name)
            continue
        s3 = record["s3"]
        files.append(S3File(_path(s3["bucket"]["name"], s3["object"]["key"]), int(s3["object"].get("size") or 0),
                            _epoch_ms(record["eventTime"])))
    return Parsed(files=files, ignored=None if files else f"not an object creation: {', '.join(others)}")


def _eventbridge(event: dict[str, Any]) -> Parsed:
    if event.get("detail-type") != "Object Created":
        return Parsed(ignored=f"not an object creation: {event.get('detail-type')}")
    detail = event["detail"]
    path = _path(detail["bucket"]["name"], detail["object"]["key"])
    return Parsed(files=[S3File(path, int(detail["object"].get("size") or 0), _epoch_ms(event["time"]))])


def _path(bucket: str, encoded_key: str) -> str:
    """`s3://bucket/key` of a key as events carry it: form-URL-encoded (`+` a space, `%XX` UTF-8 bytes)."""
    return f"s3://{bucket}/{unquote_plus(encoded_key, errors='strict')}"


def _epoch_ms(text: str) -> int:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)
