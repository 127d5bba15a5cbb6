"""Spark's own log (`<home>/logs/spark.log`) passes through the one redaction rule: log4j2's `%replace` with the
patterns of `pipeline.config.redaction`, so a secret in a Spark setting that Spark or a library logs (as
`key=value`, in a URL, in an exception's message) is masked there as on the console."""

from __future__ import annotations

import uuid

import pytest

from pipeline.config.settings import PipelineConfig
from pipeline.runtime.spark import log_file
from tests.unit.test_redaction import LEAKS, SECRETS

pytestmark = pytest.mark.integration


def test_a_secret_in_a_spark_setting_does_not_reach_spark_log(spark, cfg: PipelineConfig) -> None:
    marker = f"redaction-{uuid.uuid4().hex[:8]}"
    jvm = spark.sparkContext._jvm
    logger = jvm.org.apache.logging.log4j.LogManager.getLogger("pipeline.test.redaction")
    for key, value in SECRETS.items():
        spark.conf.set(f"pipeline.test.{key}", value)  # a setting of the session, read back as Spark logs it
        logger.info(f"{marker} setting {key}={spark.conf.get(f'pipeline.test.{key}')}")
    logger.error(f"{marker} failed", jvm.java.lang.IllegalStateException(f"cannot reach {SECRETS['registry.url']}"))
    logged = [line for line in log_file(cfg).read_text(errors="replace").splitlines(keepends=True)]
    mine = "".join(line for line in logged if marker in line or "IllegalStateException" in line)
    assert mine.count(marker) == len(SECRETS) + 1  # every line reached the log
    assert "spark.hadoop.fs.s3a.secret.key=***" in mine and "http://***@registry.example:8080" in mine
    assert [secret for secret in LEAKS if secret in mine] == []
