"""SQL users' access: the views the mirror stage keeps in the catalog, the Athena statements `pipeline
athena-ddl` prints (each one parsed by sqlglot's Athena dialect), and `pipeline sql-server` answering a real
Hive client (beeline, from the jars PySpark ships)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
import sqlglot
from sqlglot import exp

from pipeline.sql.athena import athena_ddl, athena_statements
from pipeline.config.settings import PipelineConfig
from pipeline.stages.mirror import MirrorStage
from pipeline.sql.hive_server import jdbc_url
from pipeline.stack.process import port_in_use
from pipeline.stack.java import find_java
from tables.append import nullable
from tables.lake import table_names
from tables.names import quote
from tables.pending import mirror_state
from tables.views import lake_views
from tests.conftest import PROCESS_SETTINGS, REPO, free_port
from tests.integration.test_mirror import Source, _own_mirrors

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lake(landed_source, spark) -> tuple[PipelineConfig, Source]:
    """The session's landed source (`tests/conftest.py`), mirrored once into a namespace of its own, for
    every test here."""
    cfg, source, _ = landed_source
    cfg = _own_mirrors(cfg, "sq")
    MirrorStage(cfg, spark).run_once()
    return cfg, source


def beeline(url: str, queries: list[str], folder: Path) -> list[str]:
    """Run one-row queries through beeline (Hive's JDBC shell, from PySpark's jars); one CSV line each."""
    import pyspark

    script = folder / "queries.sql"
    script.write_text("".join(f"{q};\n" for q in queries))
    classpath = str(Path(pyspark.__file__).parent / "jars" / "*")
    done = subprocess.run(
        [str(find_java(17, "beeline")), "-cp", classpath, "org.apache.hive.beeline.BeeLine", "-u", url,
         "--silent=true", "--showHeader=false", "--outputformat=csv2", "-f", str(script)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if line.strip()]


def parse_athena(text: str) -> list[exp.Expression]:
    """Every statement of `text`, parsed in Athena's dialect; sqlglot raises on what it cannot parse, and a
    statement it only passes through (`Command`) counts as unparsed."""
    parsed = [e for e in sqlglot.parse(text, read="athena") if e is not None and not isinstance(e, exp.Semicolon)]
    assert not [e for e in parsed if isinstance(e, exp.Command)], "statements sqlglot could not parse"
    return parsed


def assert_athena_ddl_parses(cfg: PipelineConfig, spark, tables: list[str]) -> None:
    statements = [s for s in athena_statements(cfg, spark) if s.sql]
    parsed = parse_athena(athena_ddl(cfg, spark))
    assert len(parsed) == len(statements)
    views = {e.this.name for e in parsed if isinstance(e, exp.Create) and e.kind == "VIEW"}
    suffixes = (cfg.mirror.view_suffix, cfg.mirror.deleted_view_suffix, cfg.mirror.latest_view_suffix)
    assert {f"{t}{s}" for t in tables for s in suffixes} <= views
    travel = [e for e in parsed if isinstance(e, exp.Select) and e.find(exp.Version)]
    assert {v.this for e in travel for v in e.find_all(exp.Version)} >= {"TIMESTAMP", "VERSION"}


def test_views_in_the_catalog_and_athena_ddl(lake, spark) -> None:
    cfg, source = lake
    catalog, mirror_ns, changelog_ns = cfg.catalog.name, cfg.mirror.namespace, cfg.changelog.namespace
    for table in source.tables():
        key = cfg.mirror.key_columns(table)[0]
        mirror = mirror_state(cfg, spark, table)  # the base and its pending changes
        current = spark.table(f"{catalog}.{mirror_ns}.{table}{cfg.mirror.view_suffix}")
        deleted = spark.table(f"{catalog}.{mirror_ns}.{table}{cfg.mirror.deleted_view_suffix}")
        latest = spark.table(f"{catalog}.{changelog_ns}.{table}{cfg.mirror.latest_view_suffix}")
        assert current.where("_is_deleted").count() == 0 and deleted.where("NOT _is_deleted").count() == 0
        assert current.count() + deleted.count() == mirror.count()
        assert deleted.count() > 0  # the simulator deletes rows; soft deletes keep them visible here
        # The changelog's newest change per key is what the mirror holds for that key.
        assert latest.count() == latest.select(key).distinct().count() == mirror.count()
        both = latest.alias("l").join(mirror.alias("m"), key)
        assert both.where("l._seq != m._seq OR l._is_deleted != m._is_deleted").count() == 0
    # Views are not tables: the stages, which list tables, never take a view for one.
    latest_views = {f"{t}{cfg.mirror.latest_view_suffix}" for t in source.tables()}
    assert not set(table_names(cfg, spark, changelog_ns)) & latest_views
    views = lake_views(cfg, spark)
    assert {f"{source.tables()[0]}{cfg.mirror.latest_view_suffix}"} <= {v.name for v in views}
    # The stage makes its views through the catalog's view API, their columns given, not found by analysis: each
    # reads with the columns and types its query gives.
    for view in views:
        made = spark.table(quote(catalog, view.namespace, view.name)).schema
        assert nullable(made) == nullable(spark.sql(view.select_in(catalog)).schema), view.name
    assert_athena_ddl_parses(cfg, spark, source.tables())


@pytest.fixture
def sql_server(lake, tmp_path: Path) -> Iterator[str]:
    """`python -m pipeline sql-server` on the test configuration with the lake's mirror namespace, in its own
    process; yields its JDBC URL."""
    namespace = lake[0].mirror.namespace
    port, log_file = free_port(), tmp_path / "sql-server.log"
    command = [sys.executable, "-m", "pipeline", *[f"--set={s}" for s in PROCESS_SETTINGS],
               "--set=spark.master=local[1]", "--set=spark.driver_memory=1g", f"--set=mirror.namespace={namespace}",
               "sql-server", "--port", str(port)]
    with log_file.open("w") as log:
        process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not port_in_use("127.0.0.1", port):
            assert process.poll() is None, f"sql-server exited: {log_file.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"sql-server not listening in 300 s: {log_file.read_text()[-3000:]}"
            time.sleep(0.5)
        yield jdbc_url("127.0.0.1", port, namespace)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)


def test_sql_server_answers_beeline_with_tables_views_and_time_travel(lake, spark, sql_server: str,
                                                                      tmp_path: Path) -> None:
    cfg, source = lake
    name = source.tables()[0]
    table = f"{cfg.catalog.name}.{cfg.mirror.namespace}.{name}"
    key = cfg.mirror.key_columns(name)[0]
    first_commit = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at LIMIT 1").first()[0]
    one_key = spark.table(table).where("name IS NOT NULL").orderBy(key).first()
    # The server's session starts in the mirror namespace: short names work, as in Hive.
    queries = [
        f"SELECT count(*) FROM {name}",
        f"SELECT name FROM {name} WHERE {key} = {one_key[key]}",
        f"SELECT count(*) FROM {name}{cfg.mirror.view_suffix}",
        f"SELECT count(*) FROM {table} VERSION AS OF {first_commit}",
    ]
    expected = [str(spark.sql(query.replace(f"FROM {name}", f"FROM {table}", 1)).first()[0]) for query in queries]
    assert expected[1] == one_key["name"] and int(expected[2]) < int(expected[0])
    assert beeline(sql_server, queries, tmp_path) == expected
