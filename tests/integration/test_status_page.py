"""`pipeline status --html` over a whole database (issue 41): the page of 500 tables, opened in headless Chromium
(Debian's `chromium` package, found on PATH as PostgreSQL's binaries are), shows every table and renders.

The status is a model of 500 tables (landing as many in the suite would take minutes): what `collect` builds, with
a commit history, a mirror, a transport lag and dead letters per table, so the page has all its parts."""

from __future__ import annotations

import shutil
import struct
import subprocess
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pipeline.ops.status.model import Commit, LakeStatus, MirrorState, SourceLag, TableStatus
from pipeline.ops.status.render import as_html

pytestmark = pytest.mark.integration

TABLES = 500
COMMITS = 12  # changelog commits a table's chart draws
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chromium() -> str:
    """Debian's Chromium; missing, the test fails with the package to install (it is never skipped)."""
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("Chromium is not on PATH: install Debian's package (apt-get install chromium)")
    return found


def database(now: datetime) -> LakeStatus:
    """The status of `TABLES` tables, each with `COMMITS` changelog commits, a mirror and a Kafka topic."""
    tables = []
    for i in range(TABLES):
        history = [Commit(now - timedelta(minutes=5 * (COMMITS - c)), 10 + i % 7, float((i + c) % 30), 1.5)
                   for c in range(COMMITS)]
        topic = SourceLag("kafka", f"synth.public.table_{i:04d}", i % 3, float(i % 3))
        tables.append(TableStatus(
            table=f"synth_table_{i:04d}", changelog_rows=100 + i, last_batch_at=history[-1].at, last_batch_rows=10,
            last_batch_rate=6.7, history=history, transport=topic,
            mirror=MirrorState(watermark=1000 + i, merged_at=history[-2].at, pending_commits=1, lag_seconds=300.0),
            dead_letters={"AvroDecodeError": 1} if i % 50 == 0 else {}))
    return LakeStatus(now, tables, [t.transport for t in tables if t.transport], max_lag=600.0)


class Sections(HTMLParser):
    """The tables a rendered page shows: each `<section class='table'>`'s heading, and whether it holds a chart."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, bool] = {}
        self._section: str | None = None
        self._heading = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "section" and ("class", "table") in attrs:
            self._section = ""
        elif tag == "h2" and self._section == "":
            self._heading = True
        elif tag == "polyline" and self._section:
            self.tables[self._section] = True

    def handle_data(self, data: str) -> None:
        if self._heading:
            self._section = data
            self.tables[data] = False

    def handle_endtag(self, tag: str) -> None:
        if tag == "h2":
            self._heading = False
        elif tag == "section":
            self._section = None


def test_the_status_page_of_500_tables_renders_every_table_in_chromium(tmp_path: Path) -> None:
    status = database(datetime(2026, 1, 1, 12, tzinfo=UTC))
    page, screenshot = tmp_path / "status.html", tmp_path / "status.png"
    page.write_text(as_html(status))

    done = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2400", "--hide-scrollbars",
                           f"--screenshot={screenshot}", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]

    shown = Sections()
    shown.feed(done.stdout)  # the DOM Chromium built from the page
    assert list(shown.tables) == [t.table for t in status.tables]
    assert all(shown.tables.values())  # every table's chart was drawn
    assert all(t.table in done.stdout.split("</pre>")[0] for t in status.tables)  # and its line in the overview
    image = screenshot.read_bytes()
    assert image.startswith(PNG_SIGNATURE) and len(image) > 10_000
    assert struct.unpack(">II", image[16:24]) == (1280, 2400)  # the IHDR chunk: the window's width and height
