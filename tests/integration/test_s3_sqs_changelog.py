"""Simulator -> DMS files on S3 -> SQS -> `changelog --source s3-sqs` -> mirror: the mirrors equal the truth."""

from __future__ import annotations

import io
import json
import uuid
from datetime import datetime
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.ops.status import collect
from pipeline.ops.status.render import as_html, as_json, as_text
from pipeline.sources.s3sqs.files import FILE_ROWS_SCHEMA
from pipeline.stages.changelog import ChangelogStage, DeadLetterBoundExceeded
from pipeline.stages.changelog.landing import Landing
from pipeline.stages.changelog.report import BatchReport
from pipeline.stages.changelog.transports.s3sqs import S3SqsTransport
from pipeline.config.settings import PipelineConfig
from pipeline.stages.mirror import MirrorStage
from pipeline.ops.verify import verify_lake
from simulators.s3_files import S3FileTransport, spark_ddl
from simulators.simulation import Simulation, SimulationOptions
from simulators.tables import TABLE_SETS
from simulators.truth import TruthStore
from tables.lake import lake_table
from tables.names import lake_table_name

pytestmark = pytest.mark.integration

KEYS = {"artists": "artist_id", "artworks": "artwork_id", "employee": "employee_id"}


def _configure(cfg: PipelineConfig, prefix: str, file_format: str, folder: Path) -> PipelineConfig:
    tables = {f"{prefix}_{name}": key for name, key in KEYS.items()}
    csv_schemas = {f"{prefix}_{t.name}": spark_ddl(t) for t in TABLE_SETS["all"]}
    return cfg.model_copy(update={
        "changelog": cfg.changelog.model_copy(update={"source": "s3-sqs", "checkpoint": str(folder / "checkpoint"),
                                                      "namespace": prefix}),  # its own dead letters, for `status`
        "dms_files": cfg.dms_files.model_copy(update={
            "bucket": prefix, "queue": prefix, "file_format": file_format, "long_polling_wait_s": 1,
            "max_files_per_trigger": 12, "csv_schemas": csv_schemas,
            "options": {"queueFetchWaitTimeoutSeconds": "2"}}),
        "mirror": cfg.mirror.model_copy(update={"keys": tables, "tables": list(tables)}),
    })


@pytest.mark.parametrize("file_format", ["parquet", "csv"])
def test_dms_files_land_once_and_the_mirror_equals_the_truth(file_format: str, stack, spark, cfg: PipelineConfig,
                                                             tmp_path: Path) -> None:
    prefix = f"dms{file_format[:3]}{uuid.uuid4().hex[:6]}"
    cfg = _configure(cfg, prefix, file_format, tmp_path)
    truth = TruthStore(tmp_path / "truth.db")
    transport = S3FileTransport(cfg.aws, cfg.dms_files, f"dms-{file_format}", rows_per_file=150, poison=0.2, seed=3)
    options = SimulationOptions(format=f"dms-{file_format}", events=900, snapshot_rows=40, seed=11, evolve_at=500,
                                topic_prefix=prefix, duplicates=0.03, reorder=0.05)
    summary = Simulation(options, transport, truth, None).run(progress=False)
    assert transport.files_written > 12  # more than one batch's worth: maxFilesPerTrigger is exercised

    stage = ChangelogStage(cfg, spark)
    stage.run(until_caught_up=True)
    tables = [f"{prefix}_{name}" for name in KEYS]
    landed = {t: lake_table(cfg, spark, cfg.changelog.namespace, t).read() for t in tables}
    assert sum(frame.count() for frame in landed.values()) == sum(summary.events.values()) + summary.faults["duplicates"]
    files = landed[f"{prefix}_artists"].select("_transport.file").distinct().collect()
    assert all(row.file.startswith(f"s3://{prefix}/{prefix}/public/artists/") for row in files)

    MirrorStage(cfg, spark).run_once()
    verdicts = verify_lake(cfg, spark, truth, tables)
    assert all(v.mismatches == 0 and v.rows > 0 for v in verdicts), "\n".join(l for v in verdicts for l in v.lines())
    _gone_files_stop_the_stage_and_show_in_status(cfg, spark, prefix, file_format)


def _gone_files_stop_the_stage_and_show_in_status(cfg: PipelineConfig, spark, prefix: str, file_format: str) -> None:
    """Two files announced, then deleted before they are read: one of a landed table, one of a table that never
    landed. Past a bound of no dead letter the stage stops (the CLI's `--until-caught-up` exits 1 on it), and
    `status` counts both, in text, JSON and HTML."""
    s3 = boto3.client("s3", **cfg.aws.boto3_kwargs())
    for table in ("artists", "ghost"):
        key = f"{prefix}/public/{table}/20990101-000000001.{file_format}"
        s3.put_object(Bucket=prefix, Key=key, Body=b"deleted before it is read")
        s3.delete_object(Bucket=prefix, Key=key)
    none = cfg.changelog.dead_letters.model_copy(update={"max_count": 0})
    strict = cfg.model_copy(update={"changelog": cfg.changelog.model_copy(update={"dead_letters": none})})
    with pytest.raises(DeadLetterBoundExceeded, match=rf"topic {prefix}\.public\.artists .*MissingDmsFile: 1"):
        ChangelogStage(strict, spark).run(until_caught_up=True)

    status = collect(cfg)
    [artists] = [t for t in status.tables if t.table == f"{prefix}_artists"]
    assert artists.dead_letters.get("MissingDmsFile") == 1
    assert status.dead_letters_elsewhere == {f"{prefix}_ghost": {"MissingDmsFile": 1}}
    assert f"dead letters of {prefix}_ghost, which has no changelog table: MissingDmsFile 1" in as_text(status)
    assert "MissingDmsFile 1" in as_text(status).split(f"{prefix}_artists", 1)[1].splitlines()[0]
    assert json.loads(as_json(status))["dead_letters_elsewhere"] == {f"{prefix}_ghost": {"MissingDmsFile": 1}}
    assert f"{prefix}_ghost, which has no changelog table: MissingDmsFile 1" in as_html(status)


# -- one batch of odd files, landed by the transport itself -----------------------------------------------------

def _parquet(**columns: pa.Array) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table(columns), out)
    return out.getvalue()


def _dms(ops: list[str], second: int, **columns: pa.Array) -> bytes:
    times = pa.array([datetime(2026, 1, 1, 0, 0, second + i) for i in range(len(ops))], pa.timestamp("us"))
    return _parquet(Op=pa.array(ops), dms_commit_ts=times, **columns)


def test_a_batch_lands_each_table_once_whatever_its_files_hold(stack, spark, cfg: PipelineConfig) -> None:
    """Files of one table with an added column, a wider id and a malformed row; a file whose id does not fit; a
    file gone; a file that is not Parquet; a table named with a space and brackets; a file outside DMS's layout.
    Landed twice as one batch (a replay)."""
    bucket = f"dmsone{uuid.uuid4().hex[:6]}"
    cfg = cfg.model_copy(update={"dms_files": cfg.dms_files.model_copy(update={
        "bucket": bucket, "queue": bucket, "queue_url": "http://unused"})})
    s3 = boto3.client("s3", **cfg.aws.boto3_kwargs())
    s3.create_bucket(Bucket=bucket)
    table, odd = f"s3://{bucket}/{bucket}/public/t", f"s3://{bucket}/{bucket}/public/Order [x]"
    files = {
        f"{table}/20260101-000000001.parquet": _dms(["I", "I"], 0, id=pa.array([1, 2], pa.int32()),
                                                    name=pa.array(["a", "b"])),
        f"{table}/20260101-000000002.parquet": _dms(["U", "X"], 2, id=pa.array([1, 9], pa.int32()),
                                                    name=pa.array(["a2", "z"]), extra=pa.array(["x", None])),
        f"{table}/20260101-000000003.parquet": _dms(["D"], 4, id=pa.array([2], pa.int64()),
                                                    name=pa.array(["b"])),
        f"{table}/20260101-000000004.parquet": _dms(["I"], 5, id=pa.array([{"n": 7}]), name=pa.array(["s"])),
        f"{odd}/LOAD00000001.parquet": _dms(["I"], 0, id=pa.array([5], pa.int32())),
        f"s3://{bucket}/stray.parquet": _dms(["I"], 0, id=pa.array([6], pa.int32())),
        f"{table}/20260101-000000005.parquet": b"not parquet at all",
    }
    for path, body in files.items():
        s3.put_object(Bucket=bucket, Key=path.split("/", 3)[3], Body=body)
    gone = f"{table}/20260101-000000009.parquet"  # announced, then deleted before it was read: a dead letter
    batch = spark.createDataFrame([(path, len(body), datetime(2026, 1, 2)) for path, body in files.items()]
                                  + [(gone, 1, datetime(2026, 1, 2))], FILE_ROWS_SCHEMA)
    landing, transport = Landing(cfg, spark), S3SqsTransport(cfg)
    landing.prepare()

    first, replay = BatchReport(7, writer=bucket), BatchReport(7, writer=bucket)  # a writer id of its own
    transport.land(landing, batch, first)
    transport.land(landing, batch, replay)

    name, odd_name = lake_table_name(bucket, "t"), lake_table_name(bucket, "Order [x]")
    changes = lake_table(cfg, spark, cfg.changelog.namespace, name).read()
    assert dict(changes.dtypes)["id"] == "bigint" and "extra" in changes.columns  # widened; no column lost
    landed = {(r["_op"], r["id"], r["name"], r["extra"], r["_transport"]["file"], r["_transport"]["offset"])
              for r in changes.collect()}
    assert landed == {("c", 1, "a", None, f"{table}/20260101-000000001.parquet", 0),
                      ("c", 2, "b", None, f"{table}/20260101-000000001.parquet", 1),
                      ("u", 1, "a2", "x", f"{table}/20260101-000000002.parquet", 0),
                      ("d", 2, "b", None, f"{table}/20260101-000000003.parquet", 0)}
    odd_rows = lake_table(cfg, spark, cfg.changelog.namespace, odd_name).read().collect()
    assert [(r["_op"], r["id"], r["_transport"]["file"]) for r in odd_rows] == \
        [("r", 5, f"{odd}/LOAD00000001.parquet")]

    assert first.dead_by_topic == {f"{bucket}.public.t": {"MalformedDmsRow": 1, "IncompatibleDmsFile": 1,
                                                          "MissingDmsFile": 1, "UnreadableDmsFile": 1},
                                   "..": {"UnroutableFile": 1}} and first.dead_letters == 5
    letters = spark.table(f"{cfg.catalog.name}.{cfg.changelog.namespace}.{cfg.changelog.dead_letter_table}")
    found = {(r["topic"], r["error_class"], r["offset"], r["error_message"].rsplit("(", 1)[-1])
             for r in letters.where(letters.error_message.contains(f"s3://{bucket}/")).collect()}
    assert found == {
        (f"{bucket}.public.t", "MalformedDmsRow", 1, f"{table}/20260101-000000002.parquet row 1)"),
        (f"{bucket}.public.t", "IncompatibleDmsFile", 0, f"{table}/20260101-000000004.parquet row 0)"),
        ("..", "UnroutableFile", 0, f"s3://{bucket}/stray.parquet row 0)"),
        (f"{bucket}.public.t", "MissingDmsFile", -1, f"{gone})"),
        (f"{bucket}.public.t", "UnreadableDmsFile", -1, f"{table}/20260101-000000005.parquet)")}
    messages = {r["error_class"]: r["error_message"] for r in letters.where(letters["offset"] == -1).collect()
                if bucket in r["error_message"]}
    assert messages["MissingDmsFile"].startswith("announced, but no object is there: deleted before it was read")
    assert messages["UnreadableDmsFile"].startswith("not a readable Parquet file ([FAILED_READ_FILE")
    assert first.rows_in == replay.rows_in == 10
    assert first.records[f"{bucket}.public.t"] == 8
    assert replay.tables == {} and replay.dead_letters_skipped  # nothing twice
    assert {table.rsplit(".", 1)[-1] for table in replay.skipped} == {name, odd_name, cfg.changelog.dead_letter_table}


def _land_csv(cfg: PipelineConfig, spark, bucket: str, files: dict[str, bytes]
              ) -> tuple[PipelineConfig, BatchReport]:
    """DMS CSV files put in a new bucket and landed as one batch of the stage's s3-sqs transport."""
    cfg = cfg.model_copy(update={"dms_files": cfg.dms_files.model_copy(update={
        "bucket": bucket, "queue": bucket, "queue_url": "http://unused", "file_format": "csv"})})
    s3 = boto3.client("s3", **cfg.aws.boto3_kwargs())
    s3.create_bucket(Bucket=bucket)
    for path, body in files.items():
        s3.put_object(Bucket=bucket, Key=path.split("/", 3)[3], Body=body)
    batch = spark.createDataFrame([(path, len(body), datetime(2026, 1, 2)) for path, body in files.items()],
                                  FILE_ROWS_SCHEMA)
    landing = Landing(cfg, spark)
    landing.prepare()
    report = BatchReport(3, writer=bucket)
    S3SqsTransport(cfg).land(landing, batch, report)
    return cfg, report


def test_csv_files_of_two_headers_land_with_their_rows_numbered(stack, spark, cfg: PipelineConfig) -> None:
    """A CSV file with a line break in a quoted value, and one whose header adds a column: one table, rows in
    file order, no column lost."""
    bucket = f"dmscsv{uuid.uuid4().hex[:6]}"
    table = f"s3://{bucket}/{bucket}/public/c"
    files = {f"{table}/20260101-000000001.csv": 'Op,dms_commit_ts,id,name\nI,2026-01-01 00:00:01,1,"a\nb"\n'
                                                'I,2026-01-01 00:00:01,2,\n',
             f"{table}/20260101-000000002.csv": "Op,dms_commit_ts,id,name,extra\nU,2026-01-01 00:00:02,1,a2,x\n"}
    cfg, report = _land_csv(cfg, spark, bucket, {path: body.encode() for path, body in files.items()})

    rows = lake_table(cfg, spark, cfg.changelog.namespace, lake_table_name(bucket, "c")).read().collect()
    assert {(r["_op"], r["id"], r["name"], r["extra"], r["_transport"]["file"], r["_transport"]["offset"])
            for r in rows} == {("c", "1", "a\nb", None, f"{table}/20260101-000000001.csv", 0),
                               ("c", "2", None, None, f"{table}/20260101-000000001.csv", 1),
                               ("u", "1", "a2", "x", f"{table}/20260101-000000002.csv", 0)}
    assert report.rows_in == 3 and report.dead_by_topic == {}


def test_a_csv_file_whose_header_cannot_be_read_is_a_dead_letter_that_names_it(stack, spark, cfg: PipelineConfig
                                                                                ) -> None:
    """A header that is not UTF-8 text sets its file apart (`UnreadableDmsFile`), counted against the bound;
    the table's other file lands."""
    bucket = f"dmsbad{uuid.uuid4().hex[:6]}"
    table = f"s3://{bucket}/{bucket}/public/c"
    good, bad = f"{table}/20260101-000000001.csv", f"{table}/20260101-000000002.csv"
    latin1 = "Op,dms_commit_ts,Größe\nI,2026-01-01 00:00:02,2\n".encode("latin-1")
    cfg, report = _land_csv(cfg, spark, bucket, {good: b"Op,dms_commit_ts,id\nI,2026-01-01 00:00:01,1\n", bad: latin1})

    rows = lake_table(cfg, spark, cfg.changelog.namespace, lake_table_name(bucket, "c")).read().collect()
    assert [(r["_op"], r["id"]) for r in rows] == [("c", "1")]
    assert report.dead_by_topic == {f"{bucket}.public.c": {"UnreadableDmsFile": 1}}
    letters = spark.table(f"{cfg.catalog.name}.{cfg.changelog.namespace}.{cfg.changelog.dead_letter_table}")
    [message] = [r["error_message"] for r in letters.where(letters.error_message.contains(bad)).collect()]
    assert message.startswith("not a readable CSV file: its header line is not UTF-8 text")
