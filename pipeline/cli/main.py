"""`python -m pipeline …`: one entry point for setup, the service stack and the jobs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from pipeline.runtime import jvm, logs
from pipeline.config.settings import ConfigError, PipelineConfig, load_config

if TYPE_CHECKING:
    from pipeline.stack import ServiceStatus, Stack

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_MISMATCH = 3  # verify: the lake differs from the truth
EXIT_RETRY_LATER = 75  # EX_TEMPFAIL: a concurrent run kept winning; schedulers retry


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__)
    parser.add_argument("--config", type=Path, help="TOML configuration file (default: ./pipeline.toml if present)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one setting; repeatable")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--log-format", default="text", choices=["text", "json"])
    parser.add_argument("--verbose", action="store_true",
                        help="show Spark's, the JVM's and librdkafka's warnings on the console too "
                             "(they always go to <home>/logs/spark.log)")
    commands = parser.add_subparsers(dest="command", required=True)

    setup = commands.add_parser("setup", help="resolve the JVM artifacts (Spark connectors, Kafka, Apicurio) with Maven")
    setup.add_argument("--offline", action="store_true", help="use only Maven's local repository")
    setup.add_argument("--print-packages", action="store_true",
                       help="print the Spark connector coordinates for spark-submit --packages and exit")
    setup.set_defaults(handler=cmd_setup)

    stack = commands.add_parser("stack", help="the embedded Kafka, Apicurio Registry and moto server")
    stack.add_argument("--only", action="append",
                       choices=["kafka", "registry", "moto", "metastore", "postgres", "connect"],
                       help="act on this service only; repeatable (default: all)")
    optional = argparse.ArgumentParser(add_help=False)
    optional.add_argument("--with", dest="with_services", action="append", choices=["postgres"], default=[],
                          help="postgres: also PostgreSQL and Kafka Connect with Debezium (sets stack.postgres)")
    actions = stack.add_subparsers(dest="action", required=True)
    actions.add_parser("up", parents=[optional], help="start every service and wait until healthy (idempotent)"
                       ).set_defaults(handler=cmd_stack_up)
    actions.add_parser("status", parents=[optional], help="service, address, PID and health"
                       ).set_defaults(handler=cmd_stack_status)
    actions.add_parser("down", parents=[optional], help="stop the services this stack started"
                       ).set_defaults(handler=cmd_stack_down)
    logs_cmd = actions.add_parser("logs", parents=[optional], help="the tail of the services' log files")
    logs_cmd.add_argument("-n", "--lines", type=int, default=40)
    logs_cmd.set_defaults(handler=cmd_stack_logs)

    demo = commands.add_parser("demo", help="the end-to-end smoke path on the embedded stack")
    demo.add_argument("--rows", type=int, default=1000)
    demo.set_defaults(handler=cmd_demo)

    simulate = commands.add_parser("simulate", help="the CDC simulator: DMS/Debezium events with a ground-truth log")
    simulate.add_argument("--format", default="debezium",
                          choices=["debezium", "debezium-unwrapped", "dms", "dms-json", "dms-csv", "dms-parquet"])
    simulate.add_argument("--tables", default="all",
                          help="comma-separated table sets: moma, employees, shop (Debezium semantic types), all")
    simulate.add_argument("--events", type=int, default=10_000, help="change events to emit, snapshot included")
    simulate.add_argument("--duration", type=float, help="stop after this many seconds")
    simulate.add_argument("--rate", type=float, help="events per second at most")
    simulate.add_argument("--seed", type=int, default=7)
    simulate.add_argument("--duplicates", type=float, default=0.0, help="probability a message is sent twice")
    simulate.add_argument("--reorder", type=float, default=0.0, help="probability a message arrives late")
    simulate.add_argument("--poison", type=float, default=0.0, help="probability of an undecodable message next to a real one")
    simulate.add_argument("--evolve-at", type=int, help="after this many events every table gains a nullable column")
    simulate.add_argument("--snapshot-rows", type=int, default=100, help="rows per table in the initial snapshot")
    simulate.add_argument("--tombstones", action="store_true", help="Debezium envelope: a null message after each delete")
    simulate.add_argument("--topic-prefix", help="replaces the server name in <server>.<schema>.<table>")
    simulate.add_argument("--partitions", type=int, default=4, help="partitions of topics the simulator creates")
    simulate.add_argument("--to", default="kafka", choices=["kafka", "kinesis", "s3"],
                          help="the transport; kinesis: one stream per database, --partitions shards, dms-json only; "
                               "s3: DMS files (dms-csv, dms-parquet) in dms_files.bucket, announced on SQS")
    simulate.add_argument("--rows-per-file", type=int, default=500, help="s3: changes per DMS file cut")
    simulate.add_argument("--truth", type=Path, help="ground-truth SQLite file (default: <home>/truth/<run>.db)")
    simulate.set_defaults(handler=cmd_simulate)

    changelog = commands.add_parser("changelog", help="stream CDC events from Kafka into Iceberg changelog tables")
    changelog.add_argument("--until-caught-up", action="store_true", help="drain the topics, then exit 0")
    changelog.add_argument("--topics", help="comma-separated topics (overrides changelog.topics)")
    changelog.add_argument("--topic-pattern", help="a regex of topics (overrides changelog.topic_pattern)")
    changelog.add_argument("--source", choices=["kafka", "kinesis", "s3-sqs"],
                           help="where change events come from (overrides changelog.source)")
    changelog.add_argument("--streams", help="comma-separated Kinesis streams (overrides kinesis.streams)")
    changelog.set_defaults(handler=cmd_changelog)

    dead = commands.add_parser("dead-letters", help="list the records the changelog stage could not land, or "
                               "land them once the cause is fixed")
    dead_actions = dead.add_subparsers(dest="action", required=True)
    dead_list = dead_actions.add_parser("list", help="dead letters by topic, table and reason")
    dead_list.add_argument("--topics", help="comma-separated topics (default: all)")
    dead_list.add_argument("--json", action="store_true", help="one JSON object per reason")
    dead_list.set_defaults(handler=cmd_dead_letters_list)
    dead_replay = dead_actions.add_parser("replay", help="land dead letters through the stage again (exactly once)")
    dead_replay.add_argument("--topics", help="comma-separated topics (default: all)")
    dead_replay.add_argument("--error-class", help="only this reason, e.g. UnknownSchemaId")
    dead_replay.set_defaults(handler=cmd_dead_letters_replay)

    mirror = commands.add_parser("mirror", help="merge new changelog rows into current-state mirror tables")
    mirror.add_argument("--tables", help="comma-separated changelog tables (default: mirror.tables, else all)")
    mirror.add_argument("--every", type=_interval, metavar="INTERVAL",
                        help="run forever at this cadence, e.g. 30s, 5m, 1h (SIGTERM stops after the current run)")
    mirror.set_defaults(handler=cmd_mirror)

    query = commands.add_parser("query", help="run SQL on the lake's tables, optionally as of a lake commit")
    query.add_argument("sql")
    query.add_argument("--as-of", help="a snapshot id / Delta version, or a timestamp ('2026-11-22 18:00:00')")
    query.add_argument("--limit", type=int, default=100, help="rows to print")
    query.set_defaults(handler=cmd_query)

    history = commands.add_parser("history", help="every change of one key, with source time and lake commit")
    history.add_argument("--table", required=True, help="e.g. moma_artists")
    history.add_argument("--key", required=True, help="the key's value (v1,v2 for a composite key)")
    history.set_defaults(handler=cmd_history)

    state = commands.add_parser("state", help="a table as the source held it at a source time, from the changelog")
    state.add_argument("--table", required=True)
    state.add_argument("--as-of-source", required=True, metavar="TIME", help="UTC, e.g. '2026-11-22 18:00:00.123'")
    state.add_argument("--key", help="only this key's row (v1,v2 for a composite key)")
    state.add_argument("--limit", type=int, default=100, help="rows to print")
    state.set_defaults(handler=cmd_state)

    verify = commands.add_parser("verify", help="compare mirrors (or a rebuilt past state) with the ground truth")
    verify.add_argument("--truth", type=Path, required=True, help="the simulator's ground-truth SQLite file")
    verify.add_argument("--tables", help="comma-separated tables (default: every mirror)")
    verify.add_argument("--as-of-source", metavar="TIME", help="verify the state rebuilt as of this source time")
    verify.set_defaults(handler=cmd_verify)

    maintain = commands.add_parser("maintain", help="compact, expire old snapshots and delete orphan files")
    maintain.add_argument("--tables", help="comma-separated tables (default: every changelog table and its mirror)")
    maintain.set_defaults(handler=cmd_maintain)

    views = commands.add_parser("views", help="(re)create the tables' SQL views in the catalog and print their DDL")
    views.add_argument("--print-only", action="store_true", help="print the DDL without creating the views")
    views.set_defaults(handler=cmd_views)

    athena = commands.add_parser("athena-ddl", help="print the Athena statements for the lake's tables and views")
    athena.set_defaults(handler=cmd_athena_ddl)

    sql_server = commands.add_parser("sql-server", help="serve the lake over HiveServer2 (beeline, JDBC, PyHive)")
    sql_server.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    sql_server.add_argument("--port", type=int, default=10000, help="the HiveServer2 port")
    sql_server.set_defaults(handler=cmd_sql_server)

    config = commands.add_parser("config", help="print the effective configuration (secrets masked)")
    config.set_defaults(handler=cmd_config)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure(args.log_level, args.log_format, verbose=args.verbose)
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    cfg = _console_level(cfg, args)
    handler: Callable[[PipelineConfig, argparse.Namespace], int] = args.handler
    try:
        return handler(cfg, args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # every known failure carries a message that says what to do
        from pipeline.cli.errors import KNOWN_ERRORS

        if isinstance(exc, KNOWN_ERRORS):
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        raise


def _console_level(cfg: PipelineConfig, args: argparse.Namespace) -> PipelineConfig:
    """`--log-level DEBUG` shows Spark's INFO lines on the console, `--verbose` its warnings."""
    level = "INFO" if args.log_level == "DEBUG" else "WARN" if args.verbose else None
    if level is None:
        return cfg
    return cfg.model_copy(update={"spark": cfg.spark.model_copy(update={"console_log_level": level})})


def cmd_setup(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    if args.print_packages:
        print(",".join(jvm.spark_packages()))
        return EXIT_OK
    for bundle in jvm.BUNDLES:
        started = time.perf_counter()
        cached = bundle.is_resolved(cfg.jars_dir)
        folder = bundle.resolve(cfg.jars_dir, offline=args.offline)
        print(f"{bundle.name:<9} {'cached ' if cached else 'resolved'} {time.perf_counter() - started:6.1f} s  {folder}")
    return EXIT_OK


def _stack(cfg: PipelineConfig, args: argparse.Namespace) -> Stack:
    """The stack the command acts on: `--with postgres` adds the real source as `stack.postgres = true` does."""
    from pipeline.stack import Stack

    if "postgres" in args.with_services:
        cfg = cfg.model_copy(update={"stack": cfg.stack.model_copy(update={"postgres": True})})
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
    stopped = _stack(cfg, args).down()
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

    from pipeline.stages import dead_letters
    from pipeline.runtime.spark import get_spark

    found = dead_letters.reasons(cfg, get_spark(cfg), _split(args.topics))
    if args.json:
        for reason in found:
            print(json.dumps(dataclasses.asdict(reason)))
        return EXIT_OK
    if not found:
        print("no dead letters")
        return EXIT_OK
    print(f"{'count':>8}  {'table':<28} {'error class':<18} reason (topic; first and last seen)")
    for r in found:
        print(f"{r.count:>8}  {r.table:<28} {r.error_class:<18} {r.error_message} "
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

    from pipeline.stages.mirror import MirrorConflict, MirrorStage
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
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_RETRY_LATER


def cmd_query(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.ops import timetravel
    from pipeline.runtime.spark import get_spark

    timetravel.query(cfg, get_spark(cfg), args.sql, args.as_of).show(args.limit, truncate=False)
    return EXIT_OK


def cmd_history(cfg: PipelineConfig, args: argparse.Namespace) -> int:
    from pipeline.ops import timetravel
    from pipeline.runtime.spark import get_spark

    changes = timetravel.history(cfg, get_spark(cfg), args.table, args.key).collect()
    for row in changes:
        values = {k: v for k, v in row.asDict().items() if not k.startswith("_")}
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
    verdicts = verify_lake(cfg, get_spark(cfg), TruthStore(args.truth), _split(args.tables), args.as_of_source)
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
    from tables.catalog import keeps_views
    from tables.views import lake_views, replace_views

    spark = get_spark(cfg)
    catalog = cfg.catalog.name if cfg.lake.format == "iceberg" else None  # Delta: the session catalog
    views = lake_views(cfg, spark)
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
    print(cfg.model_dump_json(indent=2))  # SecretStr fields print as '**********'
    return EXIT_OK


def _split(values: str | None) -> list[str]:
    return [v.strip() for v in (values or "").split(",") if v.strip()]


def _interval(text: str) -> float:
    """`90`, `30s`, `5m`, `1h` -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an interval like 30s, 5m or 1h") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("the interval must be positive")
    return seconds


def _print_status(stack: Stack) -> list[ServiceStatus]:
    statuses = stack.status()
    print(f"{'service':<10}{'address':<28}{'pid':<9}{'health':<11}log")
    for s in statuses:
        print(f"{s.name:<10}{s.address:<28}{s.pid or '-':<9}{s.state:<11}{s.log_file}")
    return statuses
