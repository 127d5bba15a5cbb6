"""`pipeline changelog`: every change from a transport (Kafka, S3-SQS, Kinesis), appended once to per-table
changelog tables in Iceberg or Delta.

- `stage`: the streaming query, its restarts, outages, checkpoint and progress lines;
- `landing`: one micro-batch through decode -> normalise -> route -> idempotent append -> dead letters;
- `transports/`: one module per transport behind one interface, chosen by `changelog.source`;
- `report`, `errors`: what a batch did, and the stage's failures.
"""

from pipeline.stages.changelog.errors import DeadLetterBoundExceeded, StageError
from pipeline.stages.changelog.report import BatchReport
from pipeline.stages.changelog.stage import ChangelogStage, Stall, check_services

__all__ = ["BatchReport", "ChangelogStage", "DeadLetterBoundExceeded", "Stall", "StageError", "check_services"]
