"""moto's server, with two corrections to moto 5.2.5. Started as `python -m pipeline.stack.moto_server`, with
`moto.server`'s arguments.

- Glue's `UpdateTable` refuses a stale `VersionId` as AWS does. Iceberg's Glue catalog commits with the table's
  `VersionId` from its last read (optimistic locking) and retries on `ConcurrentModificationException`; moto
  ignores that `VersionId`, so of two commits that read the same version both succeed there, and the second
  drops the first's snapshot: a lost write that AWS never lets happen.
- A Kinesis shard finds its newest sequence number without copying its whole key list, which moto does for every
  record put: producing 200k records into 4 shards took 22 minutes. Same answers, in constant time.
"""

from __future__ import annotations

import threading

from moto.core.responses import ActionResult
from moto.glue.exceptions import GlueClientError
from moto.glue.responses import GlueResponse
from moto.kinesis.models import Shard
from moto.server import main


class ConcurrentModificationException(GlueClientError):
    def __init__(self) -> None:
        super().__init__("ConcurrentModificationException", "Update table failed due to concurrent modifications.")


_updates = threading.Lock()  # the server answers requests on threads: the check and the update are one step
_update_table = GlueResponse.update_table


def _update_table_at_its_version(self: GlueResponse) -> ActionResult:
    expected = self.parameters.get("VersionId")
    with _updates:
        if expected is not None:
            table = self.glue_backend.get_table(self.parameters.get("DatabaseName"),
                                                self.parameters.get("TableInput", {}).get("Name"))
            if table.as_dict()["VersionId"] != str(expected):
                raise ConcurrentModificationException()
        return _update_table(self)


def _max_sequence_number(self: Shard) -> int:
    return next(reversed(self.records), 0)  # records are kept in sequence order


def _min_sequence_number(self: Shard) -> int:
    return next(iter(self.records), 0)


GlueResponse.update_table = _update_table_at_its_version
Shard.get_max_sequence_number = _max_sequence_number
Shard.get_min_sequence_number = _min_sequence_number

if __name__ == "__main__":
    main()
