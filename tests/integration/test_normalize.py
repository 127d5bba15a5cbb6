"""Debezium's `source.sequence` read into the two longs `_seq` orders by (Spark expressions, no services)."""

from __future__ import annotations

import pytest

from cdc.normalize import debezium_sequence

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("sequence", "expected"), [
    ('["24023119","24023128"]', (24023119, 24023128)),
    ('[null,"24023128"]', (None, 24023128)),  # no commit seen yet on this connector
    ('["7", "8"]', (7, 8)),
    ("[]", (None, None)),
    (None, (None, None)),  # an older connector: no sequence, `_seq` falls back to the LSN
])
def test_debezium_sequence_reads_the_last_commit_and_event_lsn(spark, sequence, expected) -> None:
    rows = spark.createDataFrame([(sequence,)], "sequence string")
    first, last = debezium_sequence(rows["sequence"])
    assert tuple(rows.select(first, last).first()) == expected
