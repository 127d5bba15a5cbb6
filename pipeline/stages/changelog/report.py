"""What one micro-batch did, for its progress line and for the dead-letter bound."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pipeline.config.settings import DeadLetterSettings


@dataclass
class BatchReport:
    batch_id: int
    writer: str = ""  # the id its appends commit under (with the batch id): the query's, or a replay's
    rows_in: int = 0
    tombstones: int = 0
    dead_letters: int = 0
    tables: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # tables this batch had already committed (a replay)
    records: dict[str, int] = field(default_factory=dict)  # topic -> records that are not tombstones
    dead_by_topic: dict[str, dict[str, int]] = field(default_factory=dict)  # topic -> error class -> count
    dead_letters_skipped: bool = False  # the batch's dead letters were already stored (a replay)
    control: dict[str, int] = field(default_factory=dict)  # Debezium heartbeats, transaction records: skipped
    seconds: float = 0.0  # how long the batch took to land
    one_pass: dict[str, int] = field(default_factory=dict)  # topic -> rows appended as they were read
    planned: list[str] = field(default_factory=list)  # topics (or what one pass left) landed the planned way
    one_plan: list[str] = field(default_factory=list)  # quiet topics decoded by one plan and one job (quiet.py)
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))  # wall clock, epoch ms

    def rest(self) -> BatchReport:
        """An empty report of the same batch for what it lands the planned way after one pass or learned row
        types: its appends commit under a writer id of their own, so a replay skips or lands each part once."""
        return BatchReport(self.batch_id, writer=f"{self.writer}+rest", started_ms=self.started_ms)

    def part(self) -> BatchReport:
        """An empty report of the same batch and writer, for one topic landed beside others (`merge` it back)."""
        return BatchReport(self.batch_id, writer=self.writer, started_ms=self.started_ms)

    def merge(self, part: BatchReport) -> None:
        """Add what a `part` counted (dead letters are counted once for the whole batch, after its topics)."""
        self.rows_in += part.rows_in
        self.tombstones += part.tombstones
        for mine, theirs in ((self.tables, part.tables), (self.records, part.records), (self.control, part.control),
                             (self.one_pass, part.one_pass)):
            for key, count in theirs.items():
                mine[key] = mine.get(key, 0) + count
        self.skipped += part.skipped
        self.planned += part.planned
        self.one_plan += part.one_plan

    @property
    def rows_per_s(self) -> int:
        return round(self.rows_in / self.seconds) if self.seconds else 0

    def dead_letter_excess(self, bound: DeadLetterSettings) -> str | None:
        """What breaks the bound, in words, or None: the first (topic, error class) past it."""
        for topic, classes in sorted(self.dead_by_topic.items()):
            dead, records = sum(classes.values()), max(self.records.get(topic, 0), 1)
            error_class = max(classes, key=classes.__getitem__)
            over_count = bound.max_count is not None and dead > bound.max_count
            over_fraction = (bound.max_fraction is not None and records >= bound.min_records
                             and dead / records > bound.max_fraction)
            if over_count or over_fraction:
                limit = (f"changelog.dead_letters.max_count = {bound.max_count}" if over_count else
                         f"changelog.dead_letters.max_fraction = {bound.max_fraction:g}")
                return (f"batch {self.batch_id} dead-lettered {dead} of {records} records of topic {topic} "
                        f"({dead / records:.0%}; most of them {error_class}: {classes[error_class]}), past "
                        f"{limit}")
        return None
