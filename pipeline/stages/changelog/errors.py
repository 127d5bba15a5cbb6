"""The changelog stage's own failures: each message says which setting or step fixes it."""


class StageError(RuntimeError):
    """The stage cannot run as configured; the message says which setting to change."""


class DeadLetterBoundExceeded(StageError):
    """A batch dead-lettered more of a table than `changelog.dead_letters` allows. Raised after the batch's
    dead letters are stored and before Spark commits the batch, so the stage stops and nothing is lost."""
