"""The failures the CLI reports as one clear line instead of a traceback."""

from pipeline.sources.postgres_snapshot import SnapshotError
from pipeline.stages.backfill import BackfillError
from pipeline.stages.changelog import StageError
from pipeline.runtime.cluster import ClusterError
from pipeline.runtime.jvm import SetupError
from pipeline.runtime.package import PackageError
from pipeline.config.kafka import KafkaUnavailable
from pipeline.stages.mirror import MirrorError
from pipeline.ops.smoke import SmokeError
from pipeline.stack import StackError
from pipeline.sql.hive_server import SqlServerError
from pipeline.stack.java import JavaNotFound
from pipeline.ops.timetravel import QueryError
from pipeline.sql.trino_query import TrinoError
from registry.backend import RegistryError
from simulators.simulation import SimulationError
from simulators.transport import TransportError

KNOWN_ERRORS: tuple[type[Exception], ...] = (
    SetupError, StackError, JavaNotFound, RegistryError, SmokeError, SimulationError, TransportError,
    KafkaUnavailable, StageError, MirrorError, QueryError, SqlServerError, TrinoError, ClusterError,
    PackageError, BackfillError, SnapshotError,
)
