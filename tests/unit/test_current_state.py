"""The Arrow overlay pyiceberg readers get (`tables/current_state.py`), case by case; its equality with the
Spark overlay over random histories is tested in tests/integration/test_mirror_layout.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tables.current_state import current_state

SEQ = pa.struct([("source_major", pa.int64()), ("source_minor", pa.int64())])
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("notes", pa.string()), ("_op", pa.string()),
                    ("_is_deleted", pa.bool_()), ("_seq", SEQ), ("_unchanged", pa.list_(pa.string()))])


def _rows(*rows: tuple) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, (*r[:5], {"source_major": r[5], "source_minor": 0}, r[6])))
                                 for r in rows], SCHEMA)


def _by_key(table: pa.Table) -> dict[int, tuple]:
    return {r["id"]: (r["name"], r["notes"], r["_op"], r["_is_deleted"], r["_seq"]["source_major"])
            for r in table.to_pylist()}


BASE = _rows((1, "a", "n1", "c", False, 1, None), (2, "b", "n2", "c", False, 2, None), (3, "c", "n3", "c", False, 3, None))


def test_untouched_rows_stay_and_the_newest_change_of_a_key_wins_whatever_its_order() -> None:
    changes = _rows((2, "b3", "x", "u", False, 9, None), (2, "b2", "y", "u", False, 5, None),
                    (4, "d", "n4", "c", False, 6, None))
    state = _by_key(current_state(BASE, changes, ["id"]))
    assert state == {1: ("a", "n1", "c", False, 1), 2: ("b3", "x", "u", False, 9), 3: ("c", "n3", "c", False, 3),
                     4: ("d", "n4", "c", False, 6)}


def test_a_placeholder_and_a_soft_delete_keep_the_values_they_do_not_carry() -> None:
    changes = _rows((1, "a2", "__debezium_unavailable_value", "u", False, 7, ["notes"]),
                    (2, None, None, "d", True, 8, None))
    state = _by_key(current_state(BASE, changes, ["id"]))
    assert state[1] == ("a2", "n1", "u", False, 7)
    assert state[2] == ("b", "n2", "d", True, 8)


def test_a_late_change_supplies_what_a_newer_placeholder_lacks_and_an_older_change_never_wins() -> None:
    changes = _rows((5, "e2", "__debezium_unavailable_value", "u", False, 9, ["notes"]),
                    (5, "e1", "late", "c", False, 4, None), (3, "old", "old", "u", False, 2, None))
    state = _by_key(current_state(BASE, changes, ["id"]))
    assert state[5] == ("e2", "late", "u", False, 9)
    assert state[3] == ("c", "n3", "c", False, 3)


def test_on_a_tie_of_seq_the_base_row_wins_and_hard_deletes_drop_the_key() -> None:
    changes = _rows((1, "folded-twice", "z", "u", False, 1, None), (3, None, None, "d", True, 4, None))
    state = current_state(BASE, changes, ["id"], delete_mode="hard")
    assert _by_key(state) == {1: ("a", "n1", "c", False, 1), 2: ("b", "n2", "c", False, 2)}
    assert "_unchanged" not in state.column_names


def test_no_changes_is_the_base_and_a_missing_key_column_names_the_setting() -> None:
    assert _by_key(current_state(BASE, BASE.slice(0, 0), ["id"])) == _by_key(BASE)
    with pytest.raises(ValueError, match="no key column order_id.*mirror.keys"):
        current_state(BASE, BASE, ["order_id"])


def test_a_null_field_of_seq_orders_first_as_spark_orders_a_struct() -> None:
    changes = _rows((1, "minor-0", "x", "u", False, 5, None), (1, "minor-null", "y", "u", False, 5, None))
    changes = changes.set_column(5, "_seq", pa.array([{"source_major": 5, "source_minor": 0},
                                                      {"source_major": 5, "source_minor": None}], SEQ))
    assert _by_key(current_state(BASE, changes, ["id"]))[1][0] == "minor-0"


def test_an_scd2_mirror_is_refused_with_the_way_to_read_it() -> None:
    versions = BASE.append_column("_valid_from", pa.array([None] * BASE.num_rows, pa.timestamp("us")))
    with pytest.raises(ValueError, match="SCD type 2.*_history.*pipeline maintain"):
        current_state(versions, versions, ["id"])
