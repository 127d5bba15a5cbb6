"""The changelog stage: a streaming query over one transport, landing each micro-batch once.

Exactly once: the checkpoint is the only offset store, and every table append is idempotent per (query id,
batch id) (`tables/append.py`), so a batch replayed after a crash skips the tables it already wrote. The
checkpoint is bound to the subscription and target it was made for. Outages of the services the transport needs
are waited out: a failed query restarts once they answer, and a trigger that hangs (Spark's Kafka source retries
a broker that went away for minutes before it fails) has them probed and the outage logged while it lasts.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from pipeline.stages.changelog.errors import DeadLetterBoundExceeded, StageError, StopRequested
from pipeline.stages.changelog.landing import Landing
from pipeline.stages.changelog.report import BatchReport
from pipeline.stages.changelog.transports import transport_for
from pipeline.config.settings import PipelineConfig
from pipeline.runtime.hadoop_files import read_text, write_text
from tables.lake import session_conf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = structlog.get_logger(__name__)


def check_services(cfg: PipelineConfig) -> None:
    """Fail before any query starts when a service the transport needs does not answer, naming it and where."""
    transport_for(cfg).check()


class ChangelogStage:
    def __init__(self, cfg: PipelineConfig, spark: SparkSession) -> None:
        self.transport = transport_for(cfg)
        self.cfg = cfg
        self.spark = spark
        self.landing = Landing(cfg, spark)
        self.reports: deque[BatchReport] = deque(maxlen=1000)  # the recent batches, for progress lines
        self._logged = -1  # the last batch with a progress line
        self._id: str | None = None
        self._stopped_by: StageError | None = None  # why `run` must not restart the query
        self._stopping = threading.Event()  # SIGTERM came: no batch starts landing after it
        self._until_caught_up = False

    def start(self, until_caught_up: bool = False) -> StreamingQuery:
        """Start the query; `_watch` stops a run until caught up once the transport says it is drained."""
        self._until_caught_up = until_caught_up
        self.landing.prepare()
        writer = (self.transport.open(self.spark).writeStream.foreachBatch(self._process)
                  .option("checkpointLocation", str(self.cfg.changelog.checkpoint)).queryName("changelog")
                  .trigger(**self.transport.trigger(until_caught_up)))
        with session_conf(self.spark, self.transport.query_conf(until_caught_up)):
            return writer.start()

    def run(self, until_caught_up: bool = False) -> None:
        """Run the query, logging one progress line per batch; SIGTERM lets the running batch finish and
        starts no other (`_process` refuses the next one, which a restart then lands whole).

        When the query fails while a service the transport needs does not answer, the outage is logged by name and
        address and waited out with backoff, then the query restarts from its checkpoint. Other failures
        restart it with backoff up to `changelog.max_restarts` times in a row (a restart replays the unfinished
        batch, which is idempotent). One failure is expected after a crash: Spark 4.1's Kafka source throws a
        NullPointerException while reporting lag for a batch replayed from the offset log, after that batch
        has committed.
        """
        from pyspark.errors import StreamingQueryException

        self.transport.check()
        self._check_checkpoint()
        stopping = self._stopping
        self._on_sigterm(stopping)
        restarts = 0
        while not stopping.is_set():
            query = self.start(until_caught_up)
            try:
                self._watch(query, stopping)
                return
            except StreamingQueryException as exc:
                if self._stopped_by is not None:
                    raise self._stopped_by from None
                if stopping.is_set():  # the batch after SIGTERM's was refused (`_process`)
                    self._stopped(query)
                    return
                error = str(exc).splitlines()[0][:300]
                if self._wait_out_outage(stopping):
                    log.info("changelog.restart", after="outage", error=error)
                    continue
                if restarts >= self.cfg.changelog.max_restarts:
                    raise
                restarts += 1
                delay = min(60.0, 2.0 ** restarts)
                log.warning("changelog.restart", attempt=restarts, seconds=delay, error=error)
                stopping.wait(delay)

    def _wait_out_outage(self, stopping: threading.Event) -> bool:
        """After a failed query: while a service the stage needs does not answer, log which one and where and
        wait with backoff (up to a minute between tries), for at most `changelog.max_outage_s`. False when all
        answer: the failure was something else."""
        delay, since = 1.0, None
        while not stopping.is_set():
            down = self.transport.outage()
            if down is None:
                if since is not None:
                    log.info("changelog.recovered")
                return since is not None
            since = since or time.monotonic()
            service, address, error = down.service, down.address, down.error
            waited, bound = time.monotonic() - since, self.cfg.changelog.max_outage_s
            if bound and waited >= bound:
                raise StageError(f"{service} at {address} has not answered for {waited:.0f} s "
                                 f"(changelog.max_outage_s = {bound:g}): {error}; the checkpoint is intact, "
                                 "so start the stage again once it is back")
            log.warning("changelog.outage", service=service, address=address, retry_in_s=delay, error=error)
            stopping.wait(min(delay, bound - waited) if bound else delay)
            delay = min(60.0, delay * 2)
        return since is not None

    def _check_checkpoint(self) -> None:
        """A checkpoint records how far a subscription was read into one target; reading other topics, or
        into another target, from it would skip or mix data. The stage writes what it is for beside Spark's
        own files on first use (through Spark, so S3 checkpoints work) and refuses a mismatch."""
        settings = self.cfg.changelog
        path = f"{settings.checkpoint}/pipeline-changelog"
        mine = {**self.transport.subscription(), "target": self.landing.target}
        text = read_text(self.spark, path)
        if text is None:  # a new checkpoint, or one from before the stage recorded what it is for
            write_text(self.spark, path, json.dumps(mine))
            return
        found = json.loads(text)
        if found != mine:
            raise StageError(f"the checkpoint {settings.checkpoint} belongs to a changelog stage with {found}, "
                             f"but this one has {mine}: give this configuration its own changelog.checkpoint, "
                             "or run with the settings the checkpoint was made with")

    def _watch(self, query: StreamingQuery, stopping: threading.Event) -> None:
        """Log progress until the query ends or SIGTERM; while a trigger hangs, name a service that is down."""
        stall, down = Stall(self.cfg.changelog.stall_probe_s), False
        while not query.awaitTermination(1.0):
            self._log_progress(query)
            progress = (query.lastProgress or {}).get("timestamp")
            if stall.stalled(query.status["isTriggerActive"], progress, time.monotonic()):
                retry_in_s = stall.probe(time.monotonic())
                still_down = down if retry_in_s is None else self._log_outage(retry_in_s)
            else:
                still_down = False  # the trigger got through: Spark resumed by itself
            if down and not still_down:
                log.info("changelog.recovered")
            down = still_down
            if self._until_caught_up and self.transport.drained(query):
                query.stop()
                self._log_progress(query)
                log.info("changelog.stopped", reason="caught up", last_batch=self._logged)
                return
            if stopping.is_set():
                # the running batch finishes first; the next one, under a backlog, is refused and ends the query
                while query.isActive and query.status["isTriggerActive"]:
                    time.sleep(0.2)
                query.stop()
                self._stopped(query)
                return
        self._log_progress(query)

    def _stopped(self, query: StreamingQuery) -> None:
        """The batches landed before SIGTERM logged, then the stop."""
        self._log_progress(query)
        log.info("changelog.stopped", reason="SIGTERM", last_batch=self._logged)

    def _log_outage(self, retry_in_s: float) -> bool:
        """Whether a service is down now, logged by name and address; the query keeps running, since Spark
        resumes once the service answers (and if it fails instead, `run` waits the outage out)."""
        outage = self.transport.outage()
        if outage is None:
            return False
        log.warning("changelog.outage", service=outage.service, address=outage.address, retry_in_s=retry_in_s,
                    error=outage.error, query="running")
        return True

    def _log_progress(self, query: StreamingQuery) -> None:
        """One line per landed batch, in order: rows in, rows per table, dead letters, rows/s and consumer lag.
        A batch is logged once its progress report is out, or without a lag once that report has left Spark's
        recent reports (the last 100: quick empty triggers can push it out between two polls) or the query has
        stopped. A batch replayed by a restarted query is not logged twice."""
        progress = {report["batchId"]: report for report in query.recentProgress}
        oldest = min(progress, default=None)
        for report in sorted(self.reports, key=lambda r: r.batch_id):  # a copy: `_process` appends meanwhile
            if report.batch_id <= self._logged:
                continue
            reported = progress.get(report.batch_id)
            if reported is None and query.isActive and (oldest is None or report.batch_id >= oldest):
                break  # its report is still to come
            lag = max((int(source.get("metrics", {}).get("maxOffsetsBehindLatest") or 0)
                       for source in reported["sources"]), default=0) if reported else None
            log.info("changelog.batch", batch=report.batch_id, rows_in=report.rows_in, tables=report.tables,
                     dead_letters=report.dead_letters, tombstones=report.tombstones, skipped=report.skipped,
                     control=report.control, planned=report.planned, one_plan=len(report.one_plan),
                     rows_per_s=report.rows_per_s, lag=lag)
            self._logged = report.batch_id

    @staticmethod
    def _on_sigterm(stopping: threading.Event) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    # -- one micro-batch -----------------------------------------------------------------------------

    def _process(self, batch: DataFrame, batch_id: int) -> None:
        """Land one micro-batch under the query's id, then hold its dead letters to the bound. After SIGTERM a
        batch is refused before any of it lands: failing here ends the query with the batch planned in its offset
        log and not committed, so the next start lands it whole. (Returning would commit it unlanded; stopping
        the query from here would wait on this very call.)"""
        if self._stopping.is_set():
            raise StopRequested(f"SIGTERM came before batch {batch_id}: it is left for the next start")
        started = time.monotonic()
        report = BatchReport(batch_id, writer=self._query_id())
        try:
            self.transport.land(self.landing, batch, report)
        except StageError as exc:  # a refusal that a restarted query would meet again: the stage stops with it
            self._stopped_by = exc
            raise
        report.seconds = time.monotonic() - started
        self.reports.append(report)
        self._hold_to_bound(report)

    def _hold_to_bound(self, report: BatchReport) -> None:
        """Stop the stage when the batch dead-lettered more than `changelog.dead_letters` allows. A replayed
        batch whose dead letters were already stored was judged when they were: it goes on, with a warning."""
        if report.dead_letters_skipped:
            log.warning("changelog.dead_letters_replayed", batch=report.batch_id,
                        hint="this batch's dead letters were stored before a stop or crash; "
                             "see them with `python -m pipeline dead-letters list`")
            return
        excess = report.dead_letter_excess(self.cfg.changelog.dead_letters)
        if excess is not None:
            self._stopped_by = DeadLetterBoundExceeded(
                f"{excess}. The dead letters are stored in {self.cfg.changelog.dead_letter_table} and the batch is "
                "not committed. See them with `python -m pipeline dead-letters list`, fix the cause (the reason "
                "names it), then `python -m pipeline dead-letters replay`; or raise the bound. Restarting the "
                "stage goes on past this batch.")
            raise self._stopped_by

    def _query_id(self) -> str:
        """The query's id, which Spark keeps in the checkpoint: stable across restarts of the same query, new
        for a new checkpoint (whose batch ids start again at 0). Read through Hadoop's file system, so S3
        checkpoints work, and without a Spark job of its own."""
        if self._id is None:
            metadata = read_text(self.spark, f"{self.cfg.changelog.checkpoint}/metadata") or ""
            self._id = json.loads(metadata.splitlines()[0])["id"]
        return self._id


@dataclass
class Stall:
    """Whether the running trigger hangs, and when to probe the services about it.

    Spark's Kafka source does not fail when the broker goes away: its admin client waits out three tries of
    `default.api.timeout.ms` (a minute each) first, and meanwhile the trigger just hangs. A trigger that runs
    for `after_s` with no new progress report is worth a probe (a long batch too; it finds nothing wrong);
    probes back off from one second to a minute apart, so a long outage is not a log line a second.
    """

    after_s: float
    _progress: object = None  # the last progress report seen (its timestamp)
    _since: float | None = None  # when the running trigger was first seen after it; None while none runs
    _next_probe: float = 0.0
    _delay: float = 1.0

    def stalled(self, active: bool, progress: object, now: float) -> bool:
        """Whether the trigger seen running has gone `after_s` without a new progress report; an idle moment or
        a new report starts the wait, and the probes' backoff, again."""
        if not active or progress != self._progress or self._since is None:
            self._progress, self._since = progress, now if active else None
            self._next_probe, self._delay = 0.0, 1.0
            return False
        return now - self._since >= self.after_s

    def probe(self, now: float) -> float | None:
        """When a probe is due now, the seconds until the next one; else None."""
        if now < self._next_probe:
            return None
        delay, self._delay = self._delay, min(60.0, self._delay * 2)
        self._next_probe = now + delay
        return delay
