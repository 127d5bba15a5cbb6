import pytest

from pipeline.config.settings import ConfigError, load_config
from tables.partitioning import PartitionField, parse_partition_fields


def test_columns_and_transforms_are_read_in_order() -> None:
    fields = parse_partition_fields(" nationality , bucket( 16 ,artist_id ), days(updated_at)")
    assert fields == [PartitionField("nationality"), PartitionField("artist_id", "bucket", 16),
                      PartitionField("updated_at", "days")]
    assert [str(f) for f in fields] == ["nationality", "bucket(16, artist_id)", "days(updated_at)"]
    assert parse_partition_fields("") == []


@pytest.mark.parametrize(("spec", "message"), [
    ("a b", "cannot read partition field 'a b'"),
    ("a,,b", "cannot read partition field ''"),
    ("bucket(x, id)", "cannot read partition field 'bucket(x, id)'"),
    ("bucket(id)", "bucket takes a count and a column"),
    ("days(3, ts)", "bucket takes a count and a column"),
    ("bucket(0, id)", "at least 1"),
    ("truncate(id)", "unknown partition transform 'truncate': use one of bucket, years"),
])
def test_unreadable_fields_are_named(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_partition_fields(spec)


def test_the_configuration_checks_partition_fields_by_table() -> None:
    cfg = load_config(overrides=["mirror.partition_by.artists=bucket(16, artist_id)"], environ={})
    assert cfg.mirror.partition_fields("artists") == [PartitionField("artist_id", "bucket", 16)]
    assert cfg.mirror.partition_fields("other") == []
    with pytest.raises(ConfigError, match=r"mirror.partition_by.artists: 'bucket\(16\)': bucket takes a count and a column"):
        load_config(overrides=["mirror.partition_by.artists=bucket(16)"], environ={})


def test_delta_mirrors_partition_by_columns_only() -> None:
    load_config(overrides=["lake.format=delta", "mirror.partition_by.artists=nationality"], environ={})
    with pytest.raises(ConfigError, match=r"Delta partitions by columns only, not by bucket\(16, artist_id\); "
                                          r"use columns, or lake.format = 'iceberg'"):
        load_config(overrides=["lake.format=delta", "mirror.partition_by.artists=nationality, bucket(16, artist_id)"],
                    environ={})
