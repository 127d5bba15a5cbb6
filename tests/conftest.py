"""Shared fixtures: one configuration, one service stack and one Spark session per test session.

The test stack lives in `.pipeline/test` on its own ports, so it never touches a stack a developer runs
for the demo. It is stopped at the end only if this session started it.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import os
import socket
from unittest import mock

import pytest

from pipeline.config.settings import CatalogSettings, PipelineConfig, load_config
from tables.catalog import spark_catalog_conf
from tables.names import quote

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.stack import Stack

REPO = Path(__file__).resolve().parent.parent
# Ports between two pytest-xdist workers: each worker runs a stack of its own, so no test sees another's topics,
# tables or catalog, and a worker's ports never meet a checkout's at the next PYTEST_PORT_OFFSET (100).
WORKER_PORT_STRIDE = 50


def _worker_index() -> int:
    """This process's pytest-xdist worker number (gw0, gw1, ...); 0 without xdist."""
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))


# Two checkouts can test side by side on one machine with different offsets (PYTEST_PORT_OFFSET=100).
PORT_OFFSET = int(os.environ.get("PYTEST_PORT_OFFSET", "0")) + WORKER_PORT_STRIDE * _worker_index()
TEST_HOME = REPO / ".pipeline" / ("test" if not PORT_OFFSET else f"test-{PORT_OFFSET}")
# Every JVM the tests start compiles with C1 alone (the stack's services too, `stack.java_options`), and with a
# code cache of the size tiered compilation reserves: with C1 alone the JVM reserves 48 MiB, which Spark's driver
# fills, and the sweeper then spends CPU flushing and compiling again (11 CPU-s in one mirror test). A test runs
# broad driver code over tens of rows, which C2 compiles at a cost it never pays back: test_mirror.py's shared JVM
# took 348 CPU-s with tiered compilation (132 of them in the compiler threads) and 285 with C1 alone; one of its
# tests took 134 JVM CPU-s and 93 s against 89 CPU-s and 83 s. (Without the code cache, C1 alone had looked
# slower: 289 s against 244 s.) The services answer a test's few requests: the test stack started in 32-36 CPU-s
# with tiered compilation and 21 with C1 alone, Trino in 35.9 and 21.8.
C1_ALONE = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
TEST_SETTINGS = [
    f"home={TEST_HOME}",
    f"jars={REPO / '.pipeline' / 'jars'}",  # shared with `make setup`: resolved once per checkout
    f"stack.kafka_port={19092 + PORT_OFFSET}",
    f"stack.kafka_controller_port={19093 + PORT_OFFSET}",
    f"stack.registry_port={18081 + PORT_OFFSET}",
    f"stack.registry_management_port={19001 + PORT_OFFSET}",
    f"stack.moto_port={15001 + PORT_OFFSET}",
    f"stack.metastore_port={19083 + PORT_OFFSET}",  # started by the one module that uses it
    f"stack.java_options={C1_ALONE}",
    f"stack.spark_master_port={17077 + PORT_OFFSET}",  # the Spark cluster's, too (test_spark_cluster.py)
    f"stack.spark_master_ui_port={17090 + PORT_OFFSET}",
    f"stack.spark_worker_port={17078 + PORT_OFFSET}",
    f"stack.spark_worker_ui_port={17091 + PORT_OFFSET}",
    "spark.master=local[2]",
    "spark.shuffle_partitions=2",
    "spark.driver_memory=2g",
]
# The shared session's settings for tiny data. A test's queries touch tens of rows, so compiling them (Janino,
# then the JIT on the generated classes) costs more than interpreting them, and G1's concurrent threads cost more
# than the serial collector's pauses on a 2 GiB heap: test_mirror_layout.py took 149-153 CPU-s with the
# defaults, 135-144 with whole-stage code generation off, 124 with expressions interpreted too, 116 with both and
# the serial collector. The stages' own processes below keep Spark's code generation, as a user runs them, and
# `test_native.py` runs the pipeline's own Spark function compiled and interpreted; a test of the code Spark
# generates asks for `compiling`.
def code_generation(compiled: bool) -> dict[str, str]:
    """Spark's code generation on (as users run the stages) or off (the interpreted `eval`s), as session settings."""
    return {"spark.sql.codegen.wholeStage": str(compiled).lower(),
            "spark.sql.codegen.factoryMode": "FALLBACK" if compiled else "NO_CODEGEN"}


# Every SQL execution also writes its plan out for the UI (which the tests turn off) in `spark.sql.ui.explainMode`:
# Spark's default, "formatted", walks the plan once more to number its operators, 1.1% of a session JVM's CPU in
# the JFR profile of a whole run (214 of 19,765 samples); "simple" prints the tree the plan already has.
# Adaptive execution plans each query stage again from the statistics of the stages before it: over tens of rows
# there is nothing to adapt, and test_mirror_layout.py's session JVM took 125.5 and 133.8 CPU-s without it against
# 137.8 and 142.8 with it (alternated runs, 1 Dec). The stages' own processes keep it, as users run them.
TINY_DATA_SESSION = [*(f"spark.conf.{key}={value}" for key, value in code_generation(False).items()),
                     "spark.conf.spark.sql.ui.explainMode=simple",
                     "spark.conf.spark.sql.adaptive.enabled=false",
                     f"spark.conf.spark.driver.extraJavaOptions=-XX:+UseSerialGC {C1_ALONE}"]
# The settings of a test's own Spark process (`python -m pipeline ...`, a stage it kills): C1 alone too, and
# Spark's code generation and adaptive execution on, as users run the stages.
SHORT_LIVED_JVM = f"spark.conf.spark.driver.extraJavaOptions={C1_ALONE}"
PROCESS_SETTINGS = [*TEST_SETTINGS, SHORT_LIVED_JVM]

# Catalogs besides the default one, configured on the one shared Spark session (one JVM serves every test);
# a test runs the stages against one by replacing its configuration's `catalog` (`with_catalog`).
GLUE_BUCKET = "lake-test"
GLUE_CATALOG = CatalogSettings(name="glue", type="glue", warehouse=f"s3://{GLUE_BUCKET}/warehouse")
HIVE_CATALOG = CatalogSettings(name="hms", type="hive", uri=f"thrift://127.0.0.1:{19083 + PORT_OFFSET}",
                               warehouse=(TEST_HOME / "hms-warehouse").as_uri())
EXTRA_CATALOGS = (GLUE_CATALOG, HIVE_CATALOG)


# Integration modules, longest first: `make test` hands whole modules to two workers in this order
# (`--dist loadfile --no-loadscope-reorder`: a module's fixtures land its data once), so the long ones start at
# once and the short ones and the unit tests fill the gaps. Measured with `--durations=0` (docs/testing.md); a
# module not named here runs after these, before the unit tests.
LONGEST_FIRST = ("test_spark_cluster.py", "test_mirror.py", "test_kinesis.py", "test_changelog.py", "test_trino.py",
                 "test_database.py", "test_one_job.py", "test_mirror_layout.py", "test_s3_sqs_changelog.py",
                 "test_sql_access.py", "test_debezium_postgres.py", "test_native.py", "test_s3_sqs_source.py",
                 "test_name_collisions.py", "test_services.py", "test_glue_catalog.py", "test_status.py",
                 "test_dead_letters.py", "test_mirror_history.py", "test_api.py", "test_any_names.py",
                 "test_simulator.py", "test_semantic_types.py", "test_odd_names.py")


def _rank(item: pytest.Item) -> int:
    if item.path.parent.name != "integration":
        return len(LONGEST_FIRST) + 1
    return LONGEST_FIRST.index(item.path.name) if item.path.name in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first; the order is the same in every worker, as pytest-xdist requires."""
    items.sort(key=_rank)  # stable: a module's tests keep their order


def with_catalog(cfg: PipelineConfig, catalog: CatalogSettings) -> PipelineConfig:
    return cfg.model_copy(update={"catalog": catalog})


def free_port() -> int:
    """A port nothing listens on right now, for a throw-away service in one test."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_config(*overrides: str) -> PipelineConfig:
    """The test configuration plus `overrides`; the process environment is ignored for repeatability.
    Its Spark settings include the extra catalogs and those for tiny data."""
    cfg = load_config(overrides=[*TEST_SETTINGS, *TINY_DATA_SESSION, *overrides], environ={})
    extra = {key: value for catalog in EXTRA_CATALOGS for key, value in spark_catalog_conf(catalog, cfg.aws).items()}
    return cfg.model_copy(update={"spark": cfg.spark.model_copy(update={"conf": {**extra, **cfg.spark.conf}})})


@pytest.fixture(scope="session")
def cfg() -> PipelineConfig:
    return make_config()


@pytest.fixture(scope="session")
def jars(cfg: PipelineConfig) -> Path:
    from pipeline.runtime import jvm

    jvm.resolve_all(cfg.jars_dir)
    return cfg.jars_dir


@contextmanager
def running(cfg: PipelineConfig) -> Iterator[Stack]:
    """The stack of `cfg` up for the block; what was already running (`python -m tests.stack up`) stays up."""
    from pipeline.stack import Stack

    stack = Stack(cfg)
    started = stack.up()
    try:
        yield stack
    finally:
        for svc in stack.services:
            if svc.name in started:
                svc.process.stop()


@pytest.fixture(scope="session")
def stack(cfg: PipelineConfig, jars: Path) -> Iterator[Stack]:
    with running(cfg) as stack:
        yield stack


@pytest.fixture(scope="session")
def spark(cfg: PipelineConfig, jars: Path) -> Iterator[SparkSession]:
    from pipeline.runtime.spark import get_spark

    session = get_spark(cfg)
    # The default (JDBC) catalog's tables made once, here: the mirror's threads each open it in a session of their
    # own, and on a SQLite file none had opened yet their concurrent schema upgrades collided ("duplicate column
    # name: iceberg_type") when a Glue-mode module ran first in a fresh test home.
    session.sql(f"SHOW NAMESPACES IN {quote(cfg.catalog.name)}").collect()
    yield session
    session.stop()


@pytest.fixture
def compiling(spark: SparkSession) -> Iterator[None]:
    """The shared session with Spark's code generation on, for a test of the code Spark generates."""
    from tables.lake import session_conf

    with session_conf(spark, code_generation(True)):
        yield


@pytest.fixture(scope="session")
def landed_source(cfg: PipelineConfig, stack: Stack, spark: SparkSession, tmp_path_factory):
    """One simulated source (`tests/integration/test_mirror.py`'s, 900 changes of four tables) landed in the
    changelog once, for the tests of every file that only read that changelog; each merges it into a mirror
    namespace of its own, so none sees another's mirrors."""
    from tests.integration.test_mirror import _landed_source

    return _landed_source(cfg, spark, tmp_path_factory.mktemp("landed"), "sh")


@pytest.fixture
def aws_keys(cfg: PipelineConfig) -> Iterator[None]:
    """The stack's moto keys in the environment, where the Kinesis reader's default credential chain looks."""
    with mock.patch.dict(os.environ, {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                                      "AWS_REGION": cfg.aws.region}):
        yield
