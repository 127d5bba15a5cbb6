"""What each `python -m pipeline` subcommand does: one handler a command, each returning its exit code."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from typing import TYPE_CHECKING

from cdc.columns import is_pipeline_column
from pipeline.config.settings import PipelineConfig
from pipeline.runtime import jvm

if TYPE_CHECKING:
    from pipeline.stack import ServiceStatus, Stack
    from tables.views import ViewSpec

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_MISMATCH = 3  # verify: the lake differs from the truth
EXIT_STALE = 4  # status: a table is past status.max_lag
EXIT_RETRY_LATER = 75  # EX_TEMPFAIL: a concurrent run kept winning; schedulers retry


def cmd_setup(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    if args.print_packages:
        print(",".join(jvm.spark_packages()))
        return EXIT_OK
    from pipeline.runtime import class_data

    for bundle in jvm.BUNDLES:
        started = time.perf_counter()
        cached = bundle.is_resolved(cfg.jars_dir)
        folder = bundle.resolve(cfg.jars_dir, offline=args.offline)
        print(f"{bundle.name:<9} {'cached ' if cached else 'resolved'} {time.perf_counter() - started:6.1f} s  {folder}")
    if cfg.spark.class_data:
        started, cached = time.perf_counter(), class_data.archive(cfg).is_file()
        written = class_data.train(cfg)  # a warning, not a failure, when it cannot: sessions start without it
        state = "cached " if cached else "written" if written else "skipped"
        print(f"{'classes':<9} {state} {time.perf_counter() - started:6.1f} s  {written or class_data.archive(cfg)}")
    return EXIT_OK


def cmd_package(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.runtime import package
    from pipeline.stack.spark_cluster import executor_options, master_url

    built = package.build(cfg.jars_dir, args.out or cfg.home / "package", args.environment)
    print(f"code:         {built.code}  (--py-files)")
    print(f"jars:         {len(built.jars)} in {built.jars[0].parent}  (--jars)")
    if built.environment:
        print(f"environment:  {built.environment}  (--archives: requirements.txt for the executors' Python)")
    else:
        print(f"requirements: {built.requirements}  (every node's Python needs them)")
    settings, master = package.passed_on(args.overrides), args.master or master_url(cfg)
    executors = executor_options(cfg, master)
    print(f"submit:       {built.script(master, settings, args.config, args.python, executors)} <stage> [options]")
    for stage in package.STAGES:
        line = built.submit(master, stage, settings, args.config, args.python, executors)
        print(f"\n# {stage}\n{shlex.join(line)}")
    return EXIT_OK


def _stack(cfg: PipelineConfig, args: argparse.Namespace) -> Stack:
    """The stack the command acts on: `--with postgres` adds the real source as `stack.postgres = true` does,
    `--with trino` Trino as `stack.trino = true` does, `--with spark-cluster` as `stack.spark_cluster = true`."""
    from pipeline.stack import Stack

    switches = {name.replace("-", "_"): True for name in args.with_services}
    cfg = cfg.model_copy(update={"stack": cfg.stack.model_copy(update=switches)})
    return Stack(cfg, args.only)


def cmd_stack_up(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    stack = _stack(cfg, args)
    started = stack.up()
    _print_status(stack)
    print(f"started: {', '.join(started) or 'nothing (all were running)'}")
    return EXIT_OK


def cmd_stack_status(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    statuses = _print_status(_stack(cfg, args))
    return EXIT_OK if all(s.state == "healthy" for s in statuses) else EXIT_FAILED


def cmd_stack_down(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    """Every service of the home that runs, the optional ones too, whichever `--with` started them."""
    optional = {"metastore": True, "postgres": True, "trino": True, "spark_cluster": True}
    stopped = _stack(cfg.model_copy(update={"stack": cfg.stack.model_copy(update=optional)}), args).down()
    print(f"stopped: {', '.join(stopped) or 'nothing (none of ours was running)'}")
    return EXIT_OK


def cmd_stack_logs(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    for svc in _stack(cfg, args).services:
        print(f"==> {svc.process.log_file} <==")
        print(svc.process.log_tail(args.lines))
    return EXIT_OK


def cmd_demo(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.ops import smoke
    from pipeline.runtime.spark import get_spark

    report = smoke.run(cfg, get_spark(cfg), rows=args.rows)
    print(json.dumps(report.__dict__, indent=2))
    expected = report.produced
    ok = report.iceberg_rows == report.delta_rows == report.pyiceberg_rows == expected
    print("demo: OK" if ok else "demo: row counts differ", file=sys.stderr)
    return EXIT_OK if ok else EXIT_FAILED


def cmd_simulate(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from registry.factory import serde_from_settings
    from simulators.formats import FILE_FORMATS
    from simulators.kinesis import FORMATS as KINESIS_FORMATS, KinesisTransport
    from simulators.simulation import Simulation, SimulationError, SimulationOptions
    from simulators.transport import KafkaTransport
    from simulators.truth import TruthStore

    to_s3 = args.to == "s3"
    if to_s3 != (args.format in FILE_FORMATS):
        print(f"error: --to s3 goes with --format {' or '.join(FILE_FORMATS)}, and those formats with --to s3",
              file=sys.stderr)
        return EXIT_USAGE
    options = SimulationOptions(
        format=args.format, tables=args.tables, events=args.events, duration_s=args.duration, rate=args.rate,
        seed=args.seed, duplicates=args.duplicates, reorder=args.reorder, poison=0.0 if to_s3 else args.poison,
        evolve_at=args.evolve_at, snapshot_rows=args.snapshot_rows, tombstones=args.tombstones,
        topic_prefix=args.topic_prefix,
    )
    truth = TruthStore(args.truth or cfg.home / "truth" / f"{args.topic_prefix or 'default'}-{args.format}.db")
    if args.to == "kinesis" and args.format not in KINESIS_FORMATS:
        raise SimulationError(f"--to kinesis writes what DMS's Kinesis target writes: use --format "
                              f"{' or '.join(KINESIS_FORMATS)}, not {args.format}")
    if to_s3:
        from simulators.s3_files import S3FileTransport

        transport = S3FileTransport(cfg.aws, cfg.dms_files, args.format, args.rows_per_file, args.poison, args.seed)
        summary = Simulation(options, transport, truth, None).run(progress=True)
        print(f"files: {transport.files_written} in s3://{cfg.dms_files.bucket}/, announced on queue {cfg.dms_files.queue}")
    else:
        transport = (KinesisTransport(cfg.aws, shards=args.partitions) if args.to == "kinesis"
                     else KafkaTransport(cfg.kafka, partitions=args.partitions))
        summary = Simulation(options, transport, truth, serde_from_settings(cfg.registry, cfg.aws)).run(progress=True)
    print("\n".join(summary.lines()))
    print(f"ground truth: {truth.path} ({truth.count()} changes)")
    return EXIT_OK


def cmd_changelog(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.stages.changelog import ChangelogStage, check_services
    from pipeline.runtime.spark import get_spark

    if args.topics or args.topic_pattern:
        subscription = {"topics": [t for t in (args.topics or "").split(",") if t], "topic_pattern": args.topic_pattern}
        cfg = cfg.model_copy(update={"changelog": cfg.changelog.model_copy(update=subscription)})
    if args.source:
        cfg = cfg.model_copy(update={"changelog": cfg.changelog.model_copy(update={"source": args.source})})
    if args.streams:
        cfg = cfg.model_copy(update={"kinesis": cfg.kinesis.model_copy(update={"streams": _split(args.streams)})})
    check_services(cfg)  # before Spark starts: an outage is named in seconds, not after the JVM is up
    ChangelogStage(cfg, get_spark(cfg)).run(until_caught_up=args.until_caught_up)
    return EXIT_OK


def cmd_dead_letters_list(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    import dataclasses
    import json

    from pipeline.config.redaction import redact, redact_text
    from pipeline.stages import dead_letters
    from pipeline.runtime.spark import get_spark

    found = dead_letters.reasons(cfg, get_spark(cfg), _split(args.topics))
    if args.json:
        for reason in found:
            print(json.dumps(redact(dataclasses.asdict(reason))))
        return EXIT_OK
    if not found:
        print("no dead letters")
        return EXIT_OK
    print(f"{'count':>8}  {'table':<28} {'error class':<18} reason (topic; first and last seen)")
    for r in found:
        print(f"{r.count:>8}  {r.table:<28} {r.error_class:<18} {redact_text(r.error_message)} "
              f"({r.topic}; {r.first_seen} .. {r.last_seen})")
    return EXIT_OK


def cmd_dead_letters_replay(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.stages import dead_letters
    from pipeline.runtime.spark import get_spark

    report = dead_letters.replay(cfg, get_spark(cfg), _split(args.topics), args.error_class)
    print(report.line())
    return EXIT_OK if not report.still_failing else EXIT_FAILED


def cmd_mirror(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    import signal
    import threading

    from pipeline.config.redaction import redact_text
    from pipeline.stages.mirror import MirrorConflict, MirrorStage, MissingKeys
    from pipeline.runtime.spark import get_spark

    stage = MirrorStage(cfg, get_spark(cfg))
    tables = _split(args.tables)
    try:
        if args.every is None:
            for report in stage.run_once(tables):
                print(report.line())
            return EXIT_OK
        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        stage.run_every(args.every, tables, stopping)
        return EXIT_OK
    except MirrorConflict as exc:
        print(redact_text(f"error: {exc}"), file=sys.stderr)
        return EXIT_RETRY_LATER
    except MissingKeys as exc:  # the other tables were mirrored
        for report in exc.reports:
            print(report.line())
        print(redact_text(f"error: {exc}"), file=sys.stderr)
        return EXIT_FAILED


def cmd_backfill(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.runtime.spark import get_spark
    from pipeline.stages.backfill import Backfill

    report = Backfill(cfg, get_spark(cfg, bounded=True), args.table).run(restart=args.restart)
    print(report.line())
    for mirrored in report.mirror:
        print(mirrored.line())
    return EXIT_OK


def cmd_query(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.ops import timetravel
    from pipeline.runtime.spark import get_spark

    if args.engine == "trino":
        return _query_on_trino(cfg, args)

    timetravel.query(cfg, get_spark(cfg), args.sql, args.as_of).show(args.limit, truncate=False)
    return EXIT_OK


def _query_on_trino(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    """Athena's SQL as Athena runs it: Glue databases and tables by name, time travel in the SQL itself."""
    from pipeline.sql.trino_query import fetch

    if args.as_of:
        print("error: --as-of is Spark's; on Trino write FOR VERSION AS OF <snapshot id> or FOR TIMESTAMP AS OF "
              "TIMESTAMP '<time> UTC' after the table", file=sys.stderr)
        return EXIT_USAGE
    columns, rows = fetch(cfg, args.sql, "the query's tables")
    print(" | ".join(columns))
    for row in rows[:args.limit]:
        print(" | ".join("NULL" if v is None else str(v) for v in row))
    print(f"{len(rows)} rows (trino)")
    return EXIT_OK


def cmd_history(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.ops import timetravel
    from pipeline.runtime.spark import get_spark

    changes = timetravel.history(cfg, get_spark(cfg), args.table, args.key).collect()
    for row in changes:
        values = {k: v for k, v in row.asDict().items() if not is_pipeline_column(k)}
        print(f"{row['_op']}  {row['_source_ts']}  commit {row['_commit']}  {json.dumps(values, default=str)}")
    print(f"{len(changes)} changes of {args.table} key {args.key}")
    return EXIT_OK


def cmd_state(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.ops import timetravel
    from pipeline.runtime.spark import get_spark

    rows = timetravel.state(cfg, get_spark(cfg), args.table, args.as_of_source, args.key).persist()
    rows.show(args.limit, truncate=False)
    print(f"{rows.count()} rows in {args.table} as of source time {args.as_of_source}")
    return EXIT_OK


def cmd_verify(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.runtime.spark import get_spark
    from pipeline.ops.verify import verify_lake
    from simulators.truth import TruthStore

    if not args.truth.is_file():
        print(f"error: no truth file {args.truth}; pass the file `pipeline simulate` printed", file=sys.stderr)
        return EXIT_USAGE
    if args.as_of_source and args.engine == "trino":
        print("error: --as-of-source rebuilds a past state from the changelog in Spark; verify it without "
              "--engine trino", file=sys.stderr)
        return EXIT_USAGE
    verdicts = verify_lake(cfg, get_spark(cfg), TruthStore(args.truth), _split(args.tables), args.as_of_source,
                           args.engine)
    for verdict in verdicts:
        print("\n".join(verdict.lines()))
    bad = sum(v.mismatches for v in verdicts)
    print(f"verify: {'OK' if not bad else f'{bad} mismatches'} ({len(verdicts)} tables)")
    return EXIT_OK if not bad else EXIT_MISMATCH


def cmd_maintain(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.ops.maintain import maintain_lake
    from pipeline.runtime.spark import get_spark

    for report in maintain_lake(cfg, get_spark(cfg), _split(args.tables)):
        print(report.line())
    return EXIT_OK


def cmd_views(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.runtime.spark import get_spark
    from pipeline.stages.mirror import with_table_keys
    from tables.catalog import keeps_views
    from tables.lake import table_names
    from tables.views import lake_views, replace_views

    spark = get_spark(cfg)
    catalog = cfg.catalog.name if cfg.lake.format == "iceberg" else None  # Delta: the session catalog
    cfg, _ = with_table_keys(cfg, spark, table_names(cfg, spark, cfg.changelog.namespace))
    views = lake_views(cfg, spark)
    if args.engine == "trino":
        return _views_on_trino(cfg, views, args.print_only)
    for view in views:
        print(f"{view.spark_ddl(catalog)};")
    if catalog is None:
        print("-- Delta path tables: `query` and `sql-server` create these views in their session")
    elif not keeps_views(cfg.catalog):
        print(f"-- the {cfg.catalog.type} catalog keeps no views: create them in Athena (pipeline athena-ddl)")
    elif not args.print_only:
        replace_views(spark, catalog, views)
        print(f"-- {len(views)} views created in {catalog}")
    return EXIT_OK


def _views_on_trino(cfg: PipelineConfig, views: list[ViewSpec], print_only: bool) -> int:
    """The views in Athena's dialect, created by Trino in Glue as Athena keeps them (Glue mode)."""
    from pipeline.sql.trino_query import fetch

    for view in views:
        print(f"{view.athena_ddl()};")
        if not print_only:
            fetch(cfg, view.athena_ddl(), f"the tables of view {view.namespace}.{view.name}")
    if not print_only:
        print(f"-- {len(views)} views created through Trino")
    return EXIT_OK


def cmd_athena_ddl(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.sql.athena import athena_ddl
    from pipeline.runtime.spark import get_spark

    print(athena_ddl(cfg, get_spark(cfg)), end="")
    return EXIT_OK


def cmd_sql_server(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    import signal
    import threading

    from pipeline.runtime.spark import get_spark
    from pipeline.sql.hive_server import serve, server_config

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    cfg = server_config(cfg)
    serve(cfg, get_spark(cfg), args.host, args.port, stopping)
    return EXIT_OK


def cmd_config(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.config.redaction import redact

    print(json.dumps(redact(cfg.model_dump(mode="json")), indent=2))
    return EXIT_OK


def cmd_status(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.ops.status import collect
    from pipeline.ops.status.render import as_html, as_json, as_text

    status = collect(cfg)
    print(as_json(status) if args.json else as_text(status))  # both redacted, as the HTML page is
    if args.html:
        args.html.write_text(as_html(status))
        print(f"wrote {args.html}", file=sys.stderr)
    return EXIT_STALE if status.stale else EXIT_OK


def _split(values: str | None) -> list[str]:
    return [v.strip() for v in (values or "").split(",") if v.strip()]


def _print_status(stack: Stack) -> list[ServiceStatus]:
    statuses = stack.status()
    print(f"{'service':<16}{'address':<28}{'pid':<9}{'health':<11}log")
    for s in statuses:
        print(f"{s.name:<16}{s.address:<28}{s.pid or '-':<9}{s.state:<11}{s.log_file}")
        if s.web_ui:
            print(f"{'':<16}web UI {s.web_ui}")
    return statuses
