"""Structured logs (key=value for people, JSON lines for machines) that never print a secret."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from pipeline.config.redaction import redact, redact_text


def _redact_processor(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    return {key: redact(value, "" if key == "event" else key) for key, value in event.items()}


class _RedactingFormatter(logging.Formatter):
    """The standard library's log lines (py4j, botocore, the stages' own loggers) through the same rule."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


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
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_RedactingFormatter("%(asctime)s [%(levelname)s] %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    for noisy in ("py4j", "botocore", "urllib3", "s3transfer"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    quiet = not verbose and level.upper() != "DEBUG"
    logging.getLogger("librdkafka").setLevel(logging.ERROR if quiet else logging.NOTSET)
