"""The failures the CLI reports as one clear line instead of a traceback."""

from pipeline.jvm import SetupError
from pipeline.stack import StackError
from pipeline.stack.java import JavaNotFound
from pipeline.smoke import SmokeError
from registry.ccompat import RegistryError

KNOWN_ERRORS: tuple[type[Exception], ...] = (SetupError, StackError, JavaNotFound, RegistryError, SmokeError)
