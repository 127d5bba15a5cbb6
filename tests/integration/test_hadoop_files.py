"""Small files through Hadoop's file system, as the changelog stage keeps its checkpoint notes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.runtime.hadoop_files import read_text, write_text

pytestmark = pytest.mark.integration


def test_a_note_is_written_replaced_and_read_back(spark, tmp_path: Path) -> None:
    location = (tmp_path / "checkpoint" / "note").as_uri()
    assert read_text(spark, location) is None
    write_text(spark, location, '{"topics": "a"}')
    write_text(spark, location, '{"topics": "b"}')
    assert read_text(spark, location) == '{"topics": "b"}'


def test_a_note_spark_wrote_as_a_folder_reads_as_its_text(spark, tmp_path: Path) -> None:
    """Checkpoints made before the stage wrote its note as a file hold it as Spark's text output."""
    location = str(tmp_path / "pipeline-changelog")
    spark.createDataFrame([('{"topics": "old"}',)], "value string").coalesce(1).write.text(location)
    assert read_text(spark, location).strip() == '{"topics": "old"}'  # type: ignore[union-attr]
