"""Subject naming strategies: under which subject a message's schema is registered.

- topic: `<topic>-key` / `<topic>-value`, one schema lineage per topic (the Confluent default);
- record: `<record full name>`, one lineage per record type, shared by every topic that carries it;
- topic-record: `<topic>-<record full name>`, several record types in one topic, each with its own lineage.
"""

from __future__ import annotations

from enum import StrEnum


class SubjectStrategy(StrEnum):
    TOPIC = "topic"
    RECORD = "record"
    TOPIC_RECORD = "topic-record"


def subject_name(strategy: SubjectStrategy, topic: str, record_name: str | None, is_key: bool = False) -> str:
    """`record_name` is the schema's full name (`namespace.name`); the record strategies need one."""
    if strategy is SubjectStrategy.TOPIC:
        return f"{topic}-{'key' if is_key else 'value'}"
    if not record_name:
        raise ValueError(f"the {strategy} subject strategy needs a named schema (record, enum or fixed), "
                         f"and the schema for topic {topic!r} has no name")
    return record_name if strategy is SubjectStrategy.RECORD else f"{topic}-{record_name}"
