"""`LakeStatus` as plain text (people), JSON (scripts) and one self-contained HTML page (a lag chart a table);
each through the redaction rule, since an unreachable service's message may carry its address and credentials."""

from __future__ import annotations

import dataclasses
import html
import json
from datetime import UTC, datetime

from pipeline.config.redaction import redact_text
from pipeline.ops.status.model import Commit, LakeStatus, TableStatus

COLUMNS = ("table", "changelog rows", "last batch", "rows", "rows/s", "transport lag", "mirror watermark",
           "mirror lag", "dead letters", "last compaction")


def as_text(status: LakeStatus) -> str:
    rows = [COLUMNS] + [_cells(t, status.generated_at) for t in status.tables]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for source in status.sources:
        lines.append(f"{source.transport} {source.source}: {_count(source.records)} waiting, oldest "
                     f"{_age(source.seconds)}")
    lines += [f"dead letters of {name}, which has no changelog table: {_reasons(reasons)}"
              for name, reasons in sorted(status.dead_letters_elsewhere.items())]
    lines += [f"transport lag unknown: {problem}" for problem in status.unreachable]
    if status.max_lag is not None:
        stale = status.stale
        lines.append(f"stale (lag over status.max_lag = {status.max_lag:g} s): {', '.join(stale)}" if stale
                     else f"every table within status.max_lag = {status.max_lag:g} s")
    return redact_text("\n".join(lines))


def as_json(status: LakeStatus) -> str:
    def plain(value: object) -> object:
        if isinstance(value, datetime):
            return value.isoformat()
        raise TypeError(type(value))

    document = dataclasses.asdict(status)
    for table, source in zip(document["tables"], status.tables, strict=True):
        table["lag_seconds"] = source.lag_seconds
    document["stale"] = status.stale
    return redact_text(json.dumps(document, default=plain, indent=2))


def as_html(status: LakeStatus) -> str:
    """One page, no scripts or links to fetch: the text table, then a section a table with a chart of each
    changelog commit's lag behind its source (commit time minus the newest source time in it)."""
    charts = "\n".join(f"<section class='table'><h2>{html.escape(t.table)}</h2>\n{_chart(t.history)}</section>"
                       for t in status.tables)
    return (f"<!doctype html>\n<html><head><meta charset='utf-8'><title>pipeline status</title>"
            f"<style>body{{font-family:sans-serif;margin:2em}}pre{{background:#f6f6f6;padding:1em}}"
            f"svg{{border:1px solid #ccc}}</style></head><body>\n<h1>pipeline status, "
            f"{status.generated_at:%Y-%m-%d %H:%M:%S} UTC</h1>\n<pre>{html.escape(as_text(status))}</pre>\n"
            f"{charts}\n</body></html>\n")


def _chart(history: list[Commit], width: int = 720, height: int = 180, pad: int = 40) -> str:
    points = [(c.at.timestamp(), c.lag_seconds) for c in history if c.lag_seconds is not None]
    if not points:
        return "<p>no commit records its source time yet</p>"
    (t0, t1), top = (points[0][0], points[-1][0]), max(lag for _, lag in points) or 1.0
    def x(t: float) -> float:
        return pad + (t - t0) / ((t1 - t0) or 1.0) * (width - 2 * pad)
    def y(lag: float) -> float:
        return height - pad - lag / top * (height - 2 * pad)
    line = " ".join(f"{x(t):.1f},{y(lag):.1f}" for t, lag in points)
    dots = "".join(f"<circle cx='{x(t):.1f}' cy='{y(lag):.1f}' r='2'/>" for t, lag in points)
    return (f"<svg width='{width}' height='{height}' role='img' aria-label='lag over time'>"
            f"<polyline fill='none' stroke='#2a6' stroke-width='1.5' points='{line}'/>{dots}"
            f"<text x='4' y='{pad - 8}' font-size='11'>lag {_age(top)}</text>"
            f"<text x='4' y='{height - pad + 4}' font-size='11'>0</text>"
            f"<text x='{pad}' y='{height - 8}' font-size='11'>{datetime.fromtimestamp(t0, UTC):%Y-%m-%d %H:%M}</text>"
            f"<text x='{width - pad}' y='{height - 8}' font-size='11' text-anchor='end'>"
            f"{datetime.fromtimestamp(t1, UTC):%Y-%m-%d %H:%M}</text></svg>")


def _cells(t: TableStatus, now: datetime) -> tuple[str, ...]:
    mirror = ("-", "-") if t.mirror is None else (str(t.mirror.watermark), f"{_age(t.mirror.lag_seconds)} "
                                                  f"({t.mirror.pending_commits} commits)")
    return (t.table, str(t.changelog_rows), _ago(t.last_batch_at, now), str(t.last_batch_rows),
            f"{t.last_batch_rate:,.0f}" if t.last_batch_rate is not None else "-",
            "-" if t.transport is None else f"{_count(t.transport.records)} / {_age(t.transport.seconds)}",
            *mirror, _reasons(t.dead_letters) or "0", _ago(t.last_maintenance, now))


def _reasons(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items()))


def _ago(moment: datetime | None, now: datetime) -> str:
    return "-" if moment is None else f"{_age((now - moment).total_seconds())} ago"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def _count(records: int | None) -> str:
    return "unknown" if records is None else f"{records:,}"
