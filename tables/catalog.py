"""The Iceberg catalog, described once and handed to both engines: Spark (JVM) and pyiceberg (Python).

Both sides get the same catalog name, the same URIs and the same warehouse paths, so a table one of them
writes is a table the other reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.config.settings import AwsSettings, CatalogSettings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

HIVE_LOCKS = "hadoop.iceberg.engine.hive.lock-enabled"
JDBC_SCHEMA_VERSION = "V1"  # the JDBC catalog layout pyiceberg's SqlCatalog reads and writes


def spark_catalog_conf(catalog: CatalogSettings, aws: AwsSettings) -> dict[str, str]:
    """`spark.sql.catalog.<name>.*` settings for Iceberg's SparkCatalog."""
    prefix = f"spark.sql.catalog.{catalog.name}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": catalog.type,
        # Streaming batches run in a cloned session with a catalog of its own; a cached table in one session
        # would not see the other's commits (nor another process's), so every read loads current metadata.
        f"{prefix}.cache-enabled": "false",
    }
    if catalog.uri:
        conf[f"{prefix}.uri"] = catalog.uri
    if catalog.warehouse:
        conf[f"{prefix}.warehouse"] = catalog.warehouse
    if catalog.type == "jdbc":
        conf[f"{prefix}.jdbc.schema-version"] = JDBC_SCHEMA_VERSION
    if catalog.type == "hive":
        # Hive 2.3.10+ metastores swap a table's metadata pointer atomically (HIVE-26882), so commits need no
        # HMS lock; the embedded metastore has no lock tables. For older metastores set this property to true.
        conf[f"{prefix}.{HIVE_LOCKS}"] = "false"
    if catalog.type == "glue" or (catalog.warehouse or "").startswith("s3"):
        conf[f"{prefix}.io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
        conf[f"{prefix}.client.region"] = aws.region
        if aws.endpoint_url:
            conf[f"{prefix}.s3.endpoint"] = aws.endpoint_url
            conf[f"{prefix}.s3.path-style-access"] = "true"
            if catalog.type == "glue":
                conf[f"{prefix}.glue.endpoint"] = aws.endpoint_url
    conf.update({f"{prefix}.{key}": value for key, value in catalog.properties.items()})
    return conf


def keeps_views(catalog: CatalogSettings) -> bool:
    """Iceberg's Glue catalog has no views: there they live in Athena (`pipeline athena-ddl`)."""
    return catalog.type != "glue"


def pyiceberg_properties(catalog: CatalogSettings, aws: AwsSettings) -> dict[str, str]:
    """The same catalog in pyiceberg's property names."""
    props: dict[str, str] = {"type": {"jdbc": "sql"}.get(catalog.type, catalog.type)}
    if catalog.type == "jdbc":
        props["uri"] = sqlalchemy_url(catalog.uri or "")
    elif catalog.uri:
        props["uri"] = catalog.uri
    if catalog.warehouse:
        props["warehouse"] = catalog.warehouse
    if catalog.type == "glue" or (catalog.warehouse or "").startswith("s3"):
        props.update({"glue.region": aws.region, "s3.region": aws.region, "client.region": aws.region})
        if aws.endpoint_url:
            props.update({"glue.endpoint": aws.endpoint_url, "s3.endpoint": aws.endpoint_url})
        if aws.access_key_id and aws.secret_access_key:
            key, secret = aws.access_key_id.get_secret_value(), aws.secret_access_key.get_secret_value()
            props.update({"client.access-key-id": key, "client.secret-access-key": secret})
    props.update(catalog.properties)
    return props


def load_pyiceberg_catalog(catalog: CatalogSettings, aws: AwsSettings) -> Catalog:
    from pyiceberg.catalog import load_catalog

    return load_catalog(catalog.name, **pyiceberg_properties(catalog, aws))


def sqlalchemy_url(jdbc_uri: str) -> str:
    """`jdbc:sqlite:/abs/file.db` -> `sqlite:////abs/file.db`; other JDBC URLs lose their `jdbc:` prefix."""
    if jdbc_uri.startswith("jdbc:sqlite:"):
        return "sqlite:///" + jdbc_uri.removeprefix("jdbc:sqlite:")
    if jdbc_uri.startswith("jdbc:"):
        return jdbc_uri.removeprefix("jdbc:")
    raise ValueError(f"catalog.uri {jdbc_uri!r} is not a JDBC URL (expected jdbc:sqlite:/path or jdbc:postgresql://…)")
