"""The command line's grammar: every `python -m pipeline` subcommand, its options and its handler."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.cli import commands

ENGINES = ("spark", "trino")  # what runs `query`, `views` and `verify`: Spark, or Trino (Athena's engine) on Glue


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline",
                                     description="One entry point for setup, the service stack and the jobs.")
    parser.add_argument("--config", type=Path, help="TOML configuration file (default: ./pipeline.toml if present)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one setting; repeatable")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--log-format", default="text", choices=["text", "json"])
    parser.add_argument("--verbose", action="store_true",
                        help="show Spark's, the JVM's and librdkafka's warnings on the console too "
                             "(they always go to <home>/logs/spark.log)")
    subcommands = parser.add_subparsers(dest="command", required=True)

    setup = subcommands.add_parser("setup", help="resolve the JVM artifacts (Spark connectors, Kafka, Apicurio, Trino) with Maven")
    setup.add_argument("--offline", action="store_true", help="use only Maven's local repository")
    setup.add_argument("--print-packages", action="store_true",
                       help="print the Spark connector coordinates for spark-submit --packages and exit")
    setup.set_defaults(handler=commands.cmd_setup)

    package = subcommands.add_parser("package", help="write what spark-submit needs (code zip, jars, requirements) "
                                     "and print the stages' spark-submit lines")
    package.add_argument("--out", type=Path, help="the folder to write (default: <home>/package)")
    package.add_argument("--master", help="the cluster's master URL (default: the stack's Spark cluster)")
    python = package.add_mutually_exclusive_group()
    python.add_argument("--python", help="the executors' Python interpreter (spark.pyspark.python), when the "
                        "nodes' python3 lacks requirements.txt")
    python.add_argument("--environment", action="store_true",
                        help="pack requirements.txt into a virtualenv of this Python (environment.tar.gz) that "
                        "--archives unpacks beside each executor, for nodes without the requirements")
    package.set_defaults(handler=commands.cmd_package)

    stack = subcommands.add_parser("stack", help="the embedded Kafka, Apicurio Registry and moto server (when asked "
                                   "also the Hive metastore, PostgreSQL with Kafka Connect, Trino, a Spark cluster)")
    stack.add_argument("--only", action="append", metavar="SERVICE",
                       help="act on this service only (kafka, registry, moto, metastore, postgres, connect, trino, "
                            "spark-master, spark-worker-<n>); repeatable (default: all)")
    optional = argparse.ArgumentParser(add_help=False)
    optional.add_argument("--with", dest="with_services", action="append", choices=["postgres", "trino", "spark-cluster"],
                          default=[],
                          help="postgres: also PostgreSQL and Kafka Connect with Debezium (sets stack.postgres); "
                               "trino: also Trino on the Glue and S3 the pipeline writes (sets stack.trino); "
                               "spark-cluster: also a Spark standalone master and workers (sets stack.spark_cluster)")
    actions = stack.add_subparsers(dest="action", required=True)
    actions.add_parser("up", parents=[optional], help="start every service and wait until healthy (idempotent)"
                       ).set_defaults(handler=commands.cmd_stack_up)
    actions.add_parser("status", parents=[optional], help="service, address, PID and health"
                       ).set_defaults(handler=commands.cmd_stack_status)
    actions.add_parser("down", parents=[optional], help="stop the services this stack started"
                       ).set_defaults(handler=commands.cmd_stack_down)
    logs_cmd = actions.add_parser("logs", parents=[optional], help="the tail of the services' log files")
    logs_cmd.add_argument("-n", "--lines", type=int, default=40)
    logs_cmd.set_defaults(handler=commands.cmd_stack_logs)

    demo = subcommands.add_parser("demo", help="the end-to-end smoke path on the embedded stack")
    demo.add_argument("--rows", type=int, default=1000)
    demo.set_defaults(handler=commands.cmd_demo)

    simulate = subcommands.add_parser("simulate", help="the CDC simulator: DMS/Debezium events with a ground-truth log")
    simulate.add_argument("--format", default="debezium",
                          choices=["debezium", "debezium-unwrapped", "dms", "dms-json", "dms-csv", "dms-parquet"])
    simulate.add_argument("--tables", default="all",
                          help="comma-separated table sets: moma, employees, shop (Debezium semantic types), all, "
                               "synthetic:N (N tables of varied shapes and types from --seed, N up to 1000)")
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
    simulate.set_defaults(handler=commands.cmd_simulate)

    changelog = subcommands.add_parser("changelog", help="stream CDC events from Kafka into Iceberg changelog tables")
    changelog.add_argument("--until-caught-up", action="store_true", help="drain the topics, then exit 0")
    changelog.add_argument("--topics", help="comma-separated topics (overrides changelog.topics)")
    changelog.add_argument("--topic-pattern", help="a regex of topics (overrides changelog.topic_pattern)")
    changelog.add_argument("--source", choices=["kafka", "kinesis", "s3-sqs"],
                           help="where change events come from (overrides changelog.source)")
    changelog.add_argument("--streams", help="comma-separated Kinesis streams (overrides kinesis.streams)")
    changelog.set_defaults(handler=commands.cmd_changelog)

    dead = subcommands.add_parser("dead-letters", help="list the records the changelog stage could not land, or "
                               "land them once the cause is fixed")
    dead_actions = dead.add_subparsers(dest="action", required=True)
    dead_list = dead_actions.add_parser("list", help="dead letters by topic, table and reason")
    dead_list.add_argument("--topics", help="comma-separated topics (default: all)")
    dead_list.add_argument("--json", action="store_true", help="one JSON object per reason")
    dead_list.set_defaults(handler=commands.cmd_dead_letters_list)
    dead_replay = dead_actions.add_parser("replay", help="land dead letters through the stage again (exactly once)")
    dead_replay.add_argument("--topics", help="comma-separated topics (default: all)")
    dead_replay.add_argument("--error-class", help="only this reason, e.g. UnknownSchemaId")
    dead_replay.set_defaults(handler=commands.cmd_dead_letters_replay)

    mirror = subcommands.add_parser("mirror", help="merge new changelog rows into current-state mirror tables")
    mirror.add_argument("--tables", help="comma-separated changelog tables (default: mirror.tables, else all)")
    mirror.add_argument("--every", type=_interval, metavar="INTERVAL",
                        help="run forever at this cadence, e.g. 30s, 5m, 1h (SIGTERM stops after the current run)")
    mirror.set_defaults(handler=commands.cmd_mirror)

    backfill = subcommands.add_parser("backfill", help="land a PostgreSQL table's rows in its changelog table as a "
                                      "snapshot (resumable), then build its mirror")
    backfill.add_argument("--table", required=True, metavar="PREFIX.SCHEMA.TABLE",
                          help="the table as its Debezium topic names it, e.g. dbserver1.public.customers")
    backfill.add_argument("--restart", action="store_true",
                          help="read the table again from its first key (the rows read again are "
                          "snapshot rows of keys the changelog has: the mirror keeps each key's newest)")
    backfill.set_defaults(handler=commands.cmd_backfill)

    query = subcommands.add_parser("query", help="run SQL on the lake's tables, optionally as of a lake commit")
    query.add_argument("sql")
    query.add_argument("--as-of", help="a snapshot id / Delta version, or a timestamp ('2026-11-22 18:00:00')")
    query.add_argument("--limit", type=int, default=100, help="rows to print")
    query.add_argument("--engine", choices=ENGINES, default="spark",
                       help="trino: the stack's Trino (Athena's engine) runs the SQL in Athena's dialect, on Glue")
    query.set_defaults(handler=commands.cmd_query)

    history = subcommands.add_parser("history", help="every change of one key, with source time and lake commit")
    history.add_argument("--table", required=True, help="e.g. moma_artists")
    history.add_argument("--key", required=True, help="the key's value (v1,v2 for a composite key)")
    history.set_defaults(handler=commands.cmd_history)

    state = subcommands.add_parser("state", help="a table as the source held it at a source time, from the changelog")
    state.add_argument("--table", required=True)
    state.add_argument("--as-of-source", required=True, metavar="TIME", help="UTC, e.g. '2026-11-22 18:00:00.123'")
    state.add_argument("--key", help="only this key's row (v1,v2 for a composite key)")
    state.add_argument("--limit", type=int, default=100, help="rows to print")
    state.set_defaults(handler=commands.cmd_state)

    verify = subcommands.add_parser("verify", help="compare mirrors (or a rebuilt past state) with the ground truth")
    verify.add_argument("--truth", type=Path, required=True, help="the simulator's ground-truth SQLite file")
    verify.add_argument("--tables", help="comma-separated tables (default: every mirror)")
    verify.add_argument("--as-of-source", metavar="TIME", help="verify the state rebuilt as of this source time")
    verify.add_argument("--engine", choices=ENGINES, default="spark",
                        help="trino: read the mirrors through Trino (Athena's engine) and their views' Athena SQL")
    verify.set_defaults(handler=commands.cmd_verify)

    maintain = subcommands.add_parser("maintain", help="compact, expire old snapshots and delete orphan files")
    maintain.add_argument("--tables", help="comma-separated tables (default: every changelog table and its mirror)")
    maintain.set_defaults(handler=commands.cmd_maintain)

    views = subcommands.add_parser("views", help="(re)create the tables' SQL views in the catalog and print their DDL")
    views.add_argument("--print-only", action="store_true", help="print the DDL without creating the views")
    views.add_argument("--engine", choices=ENGINES, default="spark",
                       help="trino: create them through Trino in Glue, in Athena's dialect, as Athena keeps them")
    views.set_defaults(handler=commands.cmd_views)

    athena = subcommands.add_parser("athena-ddl", help="print the Athena statements for the lake's tables and views")
    athena.set_defaults(handler=commands.cmd_athena_ddl)

    sql_server = subcommands.add_parser("sql-server", help="serve the lake over HiveServer2 (beeline, JDBC, PyHive)")
    sql_server.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    sql_server.add_argument("--port", type=int, default=10000, help="the HiveServer2 port")
    sql_server.set_defaults(handler=commands.cmd_sql_server)

    status = subcommands.add_parser("status", help="how far behind each table is: changelog, transport lag, mirror "
                                    "watermark, dead letters, last compaction (exit 4 past status.max_lag)")
    status.add_argument("--json", action="store_true", help="one JSON document, for scripts")
    status.add_argument("--html", type=Path, metavar="FILE", help="also write one self-contained page with a lag "
                        "chart per table")
    status.set_defaults(handler=commands.cmd_status)

    config = subcommands.add_parser("config", help="print the effective configuration (secrets masked)")
    config.set_defaults(handler=commands.cmd_config)
    return parser


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
