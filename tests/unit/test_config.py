import re
from pathlib import Path

import pytest

from pipeline.config.settings import ConfigError, load_config


def test_defaults_point_at_the_embedded_stack(tmp_path: Path) -> None:
    cfg = load_config(overrides=[f"home={tmp_path}"], environ={})
    assert cfg.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert cfg.registry.url == "http://127.0.0.1:8080"
    assert cfg.aws.endpoint_url == "http://127.0.0.1:5000"
    assert cfg.catalog.uri == f"jdbc:sqlite:{tmp_path / 'catalog.db'}"
    assert cfg.catalog.warehouse == (tmp_path / "warehouse").as_uri()
    assert cfg.jars_dir == tmp_path / "jars"
    assert cfg.backfill.url == "jdbc:postgresql://127.0.0.1:5432/shop"


def test_precedence_file_then_environment_then_flags(tmp_path: Path) -> None:
    config_file = tmp_path / "pipeline.toml"
    config_file.write_text('[stack]\nkafka_port = 1111\nmoto_port = 2222\nregistry_port = 3333\n')
    env = {"PIPELINE_STACK__MOTO_PORT": "4444", "PIPELINE_STACK__REGISTRY_PORT": "5555"}
    cfg = load_config(config_file, overrides=["stack.registry_port=6666"], environ=env)
    assert (cfg.stack.kafka_port, cfg.stack.moto_port, cfg.stack.registry_port) == (1111, 4444, 6666)
    assert cfg.kafka.bootstrap_servers == "127.0.0.1:1111"  # derived from the port it was given


def test_config_file_from_the_environment(tmp_path: Path) -> None:
    config_file = tmp_path / "other.toml"
    config_file.write_text('[catalog]\nname = "warehouse"\n')
    assert load_config(environ={"PIPELINE_CONFIG": str(config_file)}).catalog.name == "warehouse"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("stack.kafka_prot=1", "unknown setting 'stack.kafka_prot'"),
        ("nosuchsection.key=1", "unknown setting 'nosuchsection'"),
        ("stack.kafka_port=abc", "invalid setting 'stack.kafka_port'"),
        ("stack.kafka_port=70000", "invalid setting 'stack.kafka_port'"),
        ("stack.registry_storage=postgres", "invalid setting 'stack.registry_storage'"),
        ("catalog.type=rest", "needs catalog.uri"),
        ("catalog.type=glue", "needs catalog.warehouse"),
        ("stack.moto_port=9092", "ports must be distinct"),
        ("no-equals-sign", "must look like section.key=value"),
        ("backfill.url=jdbc:mysql://db/shop", "backfill.url must be a jdbc:postgresql://"),
        ("backfill.batch_rows=0", "invalid setting 'backfill.batch_rows'"),
    ],
)
def test_bad_settings_fail_with_their_name(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_config(overrides=[override], environ={})


def test_unknown_environment_setting_fails() -> None:
    with pytest.raises(ConfigError, match="unknown setting 'spark.mastr'"):
        load_config(environ={"PIPELINE_SPARK__MASTR": "local"})


def test_missing_and_malformed_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.toml", environ={})
    broken = tmp_path / "broken.toml"
    broken.write_text("[stack\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(broken, environ={})


def test_map_settings_keep_dotted_keys() -> None:
    cfg = load_config(overrides=["spark.conf.spark.executor.memory=2g", "kafka.properties.sasl.mechanism=SCRAM-SHA-512"],
                      environ={})
    assert cfg.spark.conf == {"spark.executor.memory": "2g"}
    assert cfg.kafka.properties == {"sasl.mechanism": "SCRAM-SHA-512"}


def test_empty_master_defers_to_spark_submit() -> None:
    assert load_config(overrides=["spark.master="], environ={}).spark.master is None


def test_secrets_never_appear_in_the_dump() -> None:
    cfg = load_config(overrides=["registry.password=hunter2", "registry.username=me", "backfill.password=hunter2"],
                      environ={})
    assert "hunter2" not in cfg.model_dump_json()
    assert cfg.registry.password is not None and cfg.registry.password.get_secret_value() == "hunter2"


def test_real_aws_keeps_the_default_credential_chain() -> None:
    cfg = load_config(overrides=["aws.endpoint_url="], environ={})
    assert cfg.aws.boto3_kwargs() == {"region_name": "us-east-1"}


def test_changelog_settings(tmp_path: Path) -> None:
    cfg = load_config(overrides=[f"home={tmp_path}", "changelog.topics=a.public.x, a.public.y"], environ={})
    assert cfg.changelog.topics == ["a.public.x", "a.public.y"]
    assert cfg.changelog.checkpoint == str(tmp_path / "checkpoints" / "changelog")
    remote = load_config(overrides=["changelog.checkpoint=s3://bucket/checkpoints/changelog"], environ={})
    assert remote.changelog.checkpoint == "s3://bucket/checkpoints/changelog"  # a URI, not a local path
    with pytest.raises(ConfigError, match="changelog.topics or changelog.topic_pattern, not both"):
        load_config(overrides=["changelog.topics=a", "changelog.topic_pattern=b.*"], environ={})


def test_delta_glue_needs_an_s3_delta_root(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="lake.delta_glue needs an s3:// lake.delta_root"):
        load_config(overrides=[f"home={tmp_path}", "lake.format=delta", "lake.delta_glue=true"], environ={})
    cfg = load_config(overrides=[f"home={tmp_path}", "lake.format=delta", "lake.delta_glue=true",
                                 "lake.delta_root=s3://lake/delta"], environ={})
    assert cfg.lake.delta_glue and cfg.lake.delta_root == "s3://lake/delta"


def test_lake_name_settings(tmp_path: Path) -> None:
    config_file = tmp_path / "pipeline.toml"
    config_file.write_text('[names]\nwith_schema = ["sales"]\n[names.tables]\n"inv.archive.orders" = "inv_old_orders"\n')
    cfg = load_config(config_file, overrides=["names.tables.inv.hr.people=inv_staff"], environ={})
    assert cfg.names.tables == {"inv.archive.orders": "inv_old_orders", "inv.hr.people": "inv_staff"}
    names = cfg.names.rule()
    assert [names.of_topic(f"inv.{s}.orders") for s in ("public", "sales", "archive")] == [
        "inv_orders", "inv_sales_orders", "inv_old_orders"]
    assert load_config(overrides=["names.with_schema=a, b.c"], environ={}).names.with_schema == ["a", "b.c"]
    assert load_config(environ={}).names.rule().of_topic("inv.sales.orders") == "inv_orders"  # the default


@pytest.mark.parametrize(("overrides", "message"), [
    (["names.tables.inv.orders=x"], "must name a source table as <db>.<schema>.<table>"),
    (["names.tables.inv.s.orders=Inv-Orders"], "lowercase ASCII letters, digits and _"),
    (["names.tables.inv.a.orders=orders", "names.tables.inv.b.orders=orders"], "the same lake table (orders)"),
    (["names.tables.inv.a.orders=dead_letters"], "changelog.dead_letter_table"),
])
def test_bad_lake_names_fail_with_the_fix(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(overrides=overrides, environ={})


def test_a_lake_name_map_key_with_an_empty_part_fails(tmp_path: Path) -> None:
    config_file = tmp_path / "pipeline.toml"
    config_file.write_text('[names.tables]\n"inv..orders" = "x"\n')
    with pytest.raises(ConfigError, match="must name a source table as <db>.<schema>.<table>"):
        load_config(config_file, environ={})
