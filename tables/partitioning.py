"""Partition fields of a mirror: a column, or an Iceberg transform of one.

`bucket(16, id)` on a mirror's key is what keeps a large mirror cheap to query and to merge into: a lookup
by key reads one bucket's files instead of the whole table, and a MERGE joins bucket by bucket. Time
transforms (`days(updated_at)`) partition by a date without a derived column. Delta partitions by plain
columns only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

TRANSFORMS = ("bucket", "years", "months", "days", "hours")
_TOP_LEVEL_COMMA = re.compile(r",(?![^()]*\))")
_FIELD = re.compile(r"(?P<transform>\w+)\s*\(\s*(?:(?P<buckets>\d+)\s*,\s*)?(?P<arg>\w+)\s*\)|(?P<column>\w+)")


@dataclass(frozen=True)
class PartitionField:
    column: str
    transform: str = "identity"
    buckets: int | None = None

    def __str__(self) -> str:
        if self.transform == "identity":
            return self.column
        return f"bucket({self.buckets}, {self.column})" if self.buckets else f"{self.transform}({self.column})"

    def expression(self) -> Column:
        """The field as `DataFrameWriterV2.partitionedBy` takes it."""
        from pyspark.sql import functions as F
        from pyspark.sql.functions import partitioning

        if self.transform == "identity":
            return F.col(self.column)
        if self.transform == "bucket":
            return partitioning.bucket(self.buckets, self.column)  # type: ignore[arg-type]
        return getattr(partitioning, self.transform)(self.column)


def parse_partition_fields(spec: str) -> list[PartitionField]:
    """`"nationality, bucket(16, artist_id)"` -> its fields; a ValueError names what is wrong and the forms
    that are accepted."""
    fields = []
    for part in _TOP_LEVEL_COMMA.split(spec) if spec.strip() else []:
        match = _FIELD.fullmatch(part.strip())
        if not match:
            raise ValueError(f"cannot read partition field {part.strip()!r} in {spec!r}: use column names and "
                             f"{', '.join(t + '(col)' for t in TRANSFORMS[1:])} or bucket(N, col), separated by commas")
        fields.append(_field(match))
    return fields


def _field(match: re.Match[str]) -> PartitionField:
    if match["column"]:
        return PartitionField(match["column"])
    transform, buckets = match["transform"].lower(), match["buckets"]
    if transform not in TRANSFORMS:
        raise ValueError(f"unknown partition transform {match['transform']!r}: use one of {', '.join(TRANSFORMS)}")
    if (transform == "bucket") != (buckets is not None):
        raise ValueError(f"{match[0]!r}: bucket takes a count and a column, bucket(16, id); the others a column")
    if buckets is not None and int(buckets) < 1:
        raise ValueError(f"{match[0]!r}: the bucket count must be at least 1")
    return PartitionField(match["arg"], transform, int(buckets) if buckets else None)
