"""The changelog stage's own failures: each message says which setting or step fixes it."""


class StageError(RuntimeError):
    """The stage cannot run as configured; the message says which setting to change."""


class DeadLetterBoundExceeded(StageError):
    """A batch dead-lettered more of a table than `changelog.dead_letters` allows. Raised after the batch's
    dead letters are stored and before Spark commits the batch, so the stage stops and nothing is lost."""


class StopRequested(RuntimeError):
    """SIGTERM came before a batch started landing. Raised from the batch's function, so Spark ends the query with
    the batch planned in its offset log and not committed: the next start lands it whole, as the same or a new
    version of the stage (docs/operations.md, upgrading)."""
