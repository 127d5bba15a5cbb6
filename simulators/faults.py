"""Fault injection on the outgoing message stream, at given rates and with a seed.

- duplicates: a message is sent again a little later (same key, so the same partition);
- reorder: a message is held back and sent after later ones (a late event, possibly overtaken by a newer
  change of the same key that went to its partition first);
- poison: an extra undecodable message is injected next to a real one (the real one is still sent), of one
  of the kinds below. Poison never replaces a change, so the ground truth stays complete.
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NamedTuple

from registry.avro import avro_schema, encode
from registry.wire import WireFormat, frame, unframe

AVRO_POISON = ("bad-magic", "unknown-schema-id", "truncated-avro", "wrong-field-type", "not-avro")
JSON_POISON = ("not-json", "truncated-json", "no-metadata")
UNKNOWN_SCHEMA_ID = 2**31 - 7


class Message(NamedTuple):
    """One record for the transport. A named tuple: every event makes one, and a tuple is the cheapest immutable
    record to build (a frozen dataclass pays an object.__setattr__ per field)."""

    topic: str
    key: bytes | None
    value: bytes | None


@dataclass
class FaultInjector:
    seed: int
    duplicates: float = 0.0
    reorder: float = 0.0
    poison: float = 0.0
    counts: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed * 7919 + 1)
        self._held: list[tuple[int, Message]] = []  # (release after this many messages, message)
        self._sent = 0

    @property
    def active(self) -> bool:
        return bool(self.duplicates or self.reorder or self.poison)

    def apply(self, message: Message, poison: Callable[[str], Message] | None, kinds: tuple[str, ...]) -> Iterator[Message]:
        """The messages to send now for `message`: itself or nothing (held back), duplicates and poison
        that fall due, and held messages whose delay ran out."""
        self._sent += 1
        rng = self._rng
        if self.poison and poison is not None and rng.random() < self.poison:
            kind = kinds[int(rng.random() * len(kinds))]
            self.counts[f"poison:{kind}"] += 1
            yield poison(kind)
        if self.reorder and rng.random() < self.reorder:
            self.counts["reordered"] += 1
            self._held.append((self._sent + 1 + int(rng.random() * 50), message))
        else:
            yield message
        if self.duplicates and rng.random() < self.duplicates:
            self.counts["duplicates"] += 1
            self._held.append((self._sent + int(rng.random() * 20), message))
        if self._held:
            due = [m for release, m in self._held if release <= self._sent]
            if due:
                self._held = [(release, m) for release, m in self._held if release > self._sent]
                yield from due

    def drain(self) -> Iterator[Message]:
        """Everything still held back, at the end of a run."""
        held, self._held = self._held, []
        for _, message in held:
            yield message


def avro_poison(kind: str, message: Message, wire: WireFormat, schema: dict[str, Any], record: dict[str, Any],
                key_field: str) -> Message:
    """An undecodable variant of a registry-framed Avro message."""
    schema_id, body = unframe(message.value or b"", wire)
    if kind == "bad-magic":
        value = b"\x07" + (message.value or b"")[1:]
    elif kind == "unknown-schema-id":
        value = frame(wire, _unknown_id(schema_id), body)
    elif kind == "truncated-avro":
        value = (message.value or b"")[: len(message.value or b"") - len(body) + max(1, len(body) // 4)]
    elif kind == "wrong-field-type":
        value = frame(wire, schema_id, _with_text_key(schema, record, key_field))
    else:  # not-avro
        value = b'{"this is": "json, not avro"}'
    return Message(message.topic, b"poison", value)


def json_poison(kind: str, message: Message) -> Message:
    text = message.value or b""
    value = {"not-json": b"\x00\x01 not json at all", "truncated-json": text[: len(text) // 2],
             "no-metadata": b'{"data": {"id": 1}}'}[kind]
    return Message(message.topic, b"poison", value)


def _unknown_id(schema_id: Any) -> Any:
    if isinstance(schema_id, int):
        return UNKNOWN_SCHEMA_ID
    import uuid

    return uuid.UUID(int=UNKNOWN_SCHEMA_ID)  # a Glue schema version id no registry holds


def _with_text_key(schema: dict[str, Any], record: dict[str, Any], key_field: str) -> bytes:
    """The record written with its key as a string: the real schema reads the text's length as the key and
    then trips over the text's first letter as a union branch ('n' is branch 55 of a two-branch union)."""
    mutated = copy.deepcopy(schema)
    _retype(mutated, key_field)
    return encode(avro_schema(mutated), _rekey(record, key_field))


def _retype(node: Any, key_field: str) -> None:
    if isinstance(node, dict):
        for fld in node.get("fields", []):
            if fld["name"] == key_field:
                fld["type"] = "string"
            _retype(fld["type"], key_field)
    elif isinstance(node, list):
        for branch in node:
            _retype(branch, key_field)


def _rekey(node: Any, key_field: str) -> Any:
    if isinstance(node, dict):
        return {k: ("not-a-number" if k == key_field else _rekey(v, key_field)) for k, v in node.items()}
    if isinstance(node, tuple):  # fastavro's (type name, value) union notation
        return (node[0], _rekey(node[1], key_field))
    return node
