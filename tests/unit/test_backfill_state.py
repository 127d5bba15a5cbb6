from tables.backfill_state import DONE, KEYS_ONCE, RUNNING, THROUGH, backfill_property, keys_once, one_pass


def test_keys_are_once_only_as_of_the_commit_a_finished_one_pass_backfill_ended_at() -> None:
    finished = backfill_property(DONE, rows=3, **{KEYS_ONCE: True, THROUGH: "8473995016524500672"})
    assert keys_once(finished, 8473995016524500672)
    assert not keys_once(finished, 17)  # a commit since: another writer's rows may share keys with the snapshot's
    assert not keys_once(backfill_property(DONE, rows=3, **{KEYS_ONCE: False, THROUGH: "17"}), 17)  # restarted
    assert not keys_once(backfill_property(RUNNING, **{KEYS_ONCE: True}), 17)  # half landed
    assert not keys_once({}, 17)  # never backfilled
    assert not keys_once(backfill_property(DONE, rows=3), 17)  # finished before the fact was kept


def test_a_backfill_is_one_pass_into_a_new_table_or_resuming_one() -> None:
    assert one_pass(None, restart=False)  # its first batch creates the table
    running = backfill_property(RUNNING, **{KEYS_ONCE: True})
    assert one_pass(running, restart=False)  # killed, then run again: it goes on after its last commit
    assert not one_pass(running, restart=True)  # the keys from the first again, beside those landed
    assert not one_pass({}, restart=False)  # a table the stream landed first
    assert not one_pass(backfill_property(DONE, rows=3, **{KEYS_ONCE: False, THROUGH: "1"}), restart=False)
