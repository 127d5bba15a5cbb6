"""The failures the CLI reports as one clear line instead of a traceback."""

from pipeline.changelog import StageError
from pipeline.jvm import SetupError
from pipeline.kafka import KafkaUnavailable
from pipeline.mirror import MirrorError
from pipeline.smoke import SmokeError
from pipeline.stack import StackError
from pipeline.sql_server import SqlServerError
from pipeline.stack.java import JavaNotFound
from pipeline.timetravel import QueryError
from registry.backend import RegistryError
from simulators.simulation import SimulationError
from simulators.transport import TransportError

KNOWN_ERRORS: tuple[type[Exception], ...] = (
    SetupError, StackError, JavaNotFound, RegistryError, SmokeError, SimulationError, TransportError,
    KafkaUnavailable, StageError, MirrorError, QueryError, SqlServerError,
)
