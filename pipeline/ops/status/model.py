"""What `pipeline status` reports: per lake table and per transport source, and which tables are stale."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class SourceLag:
    """What the changelog stage has not landed yet from one topic, stream or queue."""

    transport: str  # kafka | kinesis | s3-sqs
    source: str  # the topic, stream or queue
    records: int | None  # records (SQS: files) waiting; None when the transport cannot count them
    seconds: float | None  # age of the oldest waiting record: 0 when none waits, None when unknown


@dataclass(frozen=True)
class Commit:
    """One changelog commit: when, how many rows, and how far behind the source it was then."""

    at: datetime
    rows: int
    lag_seconds: float | None  # commit time minus the newest source time in it (None: not recorded)
    seconds: float | None  # from its batch's start to this commit (None: not recorded)


@dataclass(frozen=True)
class MirrorState:
    """How far the mirror of a table has merged its changelog."""

    watermark: int  # the changelog commit merged through
    merged_at: datetime | None  # when that changelog commit was made
    pending_commits: int  # changelog commits after it
    lag_seconds: float  # age of the oldest changelog commit not merged yet (0: none)


@dataclass(frozen=True)
class TableStatus:
    table: str
    changelog_rows: int
    last_batch_at: datetime | None
    last_batch_rows: int
    last_batch_rate: float | None  # rows a second, from its batch's start to its commit
    history: list[Commit]
    transport: SourceLag | None  # None: no transport figure reaches this table
    mirror: MirrorState | None  # None: not mirrored (yet)
    dead_letters: dict[str, int] = field(default_factory=dict)  # by reason (error class)
    last_maintenance: datetime | None = None  # the newest compaction of its changelog or mirror

    @property
    def lag_seconds(self) -> float | None:
        """How stale the table's newest state is: the older of what waits in the transport and what waits for
        the mirror; None when neither is known."""
        known = [s for s in (self.transport.seconds if self.transport else None,
                             self.mirror.lag_seconds if self.mirror else None) if s is not None]
        return max(known) if known else None


@dataclass(frozen=True)
class LakeStatus:
    generated_at: datetime
    tables: list[TableStatus]
    sources: list[SourceLag]
    max_lag: float | None  # `status.max_lag`, seconds
    unreachable: list[str] = field(default_factory=list)  # services that did not answer, by name and address
    # dead letters no changelog table's row shows, by table (or topic, when it names none) and reason: a file of a
    # table that never landed, gone or unreadable; a file outside DMS's layout (topic `..`)
    dead_letters_elsewhere: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def stale(self) -> list[str]:
        """The tables past `status.max_lag`."""
        if self.max_lag is None:
            return []
        return [t.table for t in self.tables if (t.lag_seconds or 0) > self.max_lag]
