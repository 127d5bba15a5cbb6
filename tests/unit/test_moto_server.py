"""The stack's moto (`pipeline/stack/moto_server.py`): a shard's sequence-number bounds in constant time, with
moto's own answers."""

from __future__ import annotations

from moto.kinesis.models import Shard

import pipeline.stack.moto_server  # noqa: F401 - corrects moto's classes on import


def test_a_shards_bounds_are_its_first_and_last_sequence_numbers() -> None:
    shard = Shard(0, 0, 2**128)
    assert (shard.get_min_sequence_number(), shard.get_max_sequence_number()) == (0, 0)  # moto's answer when empty
    numbers = [int(shard.put_record(str(n), "ZGF0YQ==", None)) for n in range(5)]
    assert numbers == [1, 2, 3, 4, 5]
    assert (shard.get_min_sequence_number(), shard.get_max_sequence_number()) == (1, 5)
    del shard.records[1]  # records leave from the front (retention)
    assert (shard.get_min_sequence_number(), shard.get_max_sequence_number()) == (2, 5)
    assert int(shard.put_record("x", "ZGF0YQ==", None)) == 6
