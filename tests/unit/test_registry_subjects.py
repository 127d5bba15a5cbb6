import pytest

from registry.avro import avro_schema
from registry.subjects import SubjectStrategy, subject_name

RECORD = avro_schema({"type": "record", "name": "Envelope", "namespace": "inventory.public.artists",
                      "fields": [{"name": "id", "type": "long"}]})


@pytest.mark.parametrize(("strategy", "is_key", "subject"), [
    (SubjectStrategy.TOPIC, False, "pg.public.artists-value"),
    (SubjectStrategy.TOPIC, True, "pg.public.artists-key"),
    (SubjectStrategy.RECORD, False, "inventory.public.artists.Envelope"),
    (SubjectStrategy.TOPIC_RECORD, True, "pg.public.artists-inventory.public.artists.Envelope"),
])
def test_strategies(strategy: SubjectStrategy, is_key: bool, subject: str) -> None:
    assert subject_name(strategy, "pg.public.artists", RECORD.full_name, is_key) == subject


def test_record_strategies_need_a_named_schema() -> None:
    assert avro_schema('"string"').full_name is None
    assert subject_name(SubjectStrategy.TOPIC, "t", None, is_key=True) == "t-key"
    with pytest.raises(ValueError, match="topic-record subject strategy needs a named schema"):
        subject_name(SubjectStrategy.TOPIC_RECORD, "t", None)


def test_strategies_are_named_as_configured() -> None:
    assert [SubjectStrategy(name) for name in ("topic", "record", "topic-record")] == list(SubjectStrategy)
