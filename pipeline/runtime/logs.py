"""Structured logs (key=value for people, JSON lines for machines) that never print a secret."""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

import structlog

_SECRET_KEY = re.compile(r"pass(word)?|secret|token|credential|jaas|api[_-]?key|access[_-]?key", re.IGNORECASE)
_URL_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s:]+:[^/@\s]+@", re.IGNORECASE)
REDACTED = "***"


def redact(value: Any, key: str = "") -> Any:
    """Mask a value whose key names a secret, credentials in URLs, and secrets nested in mappings."""
    if key and _SECRET_KEY.search(key):
        return REDACTED
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    if isinstance(value, str):
        return _URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", value)
    return value


def _redact_processor(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    return {key: value if key == "event" else redact(value, key) for key, value in event.items()}


class _CurrentStderr:
    """Writes to `sys.stderr` as it is at each line, not as it was when logging was configured (pytest and
    embedding tools swap it; a bound stream may since have been closed)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str = "INFO", fmt: str = "text", verbose: bool = False) -> None:
    """Route structlog and the standard library's logging to stderr in one format. librdkafka's own lines
    (refused connections, retries) show only with `verbose` or at DEBUG: the pipeline names outages itself."""
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(
        colors=False, pad_event_to=0, pad_level=False
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact_processor,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(_CurrentStderr()),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=level.upper(), stream=sys.stderr, format="%(asctime)s [%(levelname)s] %(name)s: %(message)s")
    for noisy in ("py4j", "botocore", "urllib3", "s3transfer"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    quiet = not verbose and level.upper() != "DEBUG"
    logging.getLogger("librdkafka").setLevel(logging.ERROR if quiet else logging.NOTSET)
