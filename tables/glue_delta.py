"""Delta tables in the Glue Data Catalog, registered the way Athena reads Delta natively.

Athena queries a Delta table through a Glue table of type `EXTERNAL_TABLE` with `table_type = DELTA` whose
location is the table's `s3://` folder; it reads the files and the schema from the Delta log. The Glue
columns are kept equal to the Delta schema too, as Athena's own `CREATE EXTERNAL TABLE` does, for Lake
Formation, views and column filters, which use them. No partition keys: Athena takes the partitioning from
the log.

`DeltaGlue.sync(namespace, name)` creates or updates one table's entry (and its database) when its location
or columns differ from what Glue holds; what it last wrote is remembered, so a sync with nothing new costs
one read of the Delta schema. The stages call it after each write when `lake.delta_glue` is on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from pipeline.config.settings import PipelineConfig
from tables.views import athena_type

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)


PARQUET_SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
PARQUET_INPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
PARQUET_OUTPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"


def s3_location(path: str) -> str:
    """Athena and Glue name S3 locations `s3://`; Spark may write the same folder as `s3a://`."""
    return "s3://" + path.split("://", 1)[1] if path.startswith(("s3a://", "s3n://")) else path


def glue_columns(spark: SparkSession, path: str) -> list[dict[str, str]]:
    """The Delta table's columns as Glue (Hive) types, in the table's order."""
    schema = spark.read.format("delta").load(path).schema
    return [{"Name": f.name, "Type": athena_type(f.dataType)} for f in schema.fields]


def table_input(name: str, location: str, columns: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "Name": name,
        "TableType": "EXTERNAL_TABLE",
        # table_type for Athena; the Spark provider for Trino's Delta Lake connector, which reads only the Glue
        # tables that name it ("… is not a Delta Lake table" otherwise), as Spark's own Delta tables in Glue do.
        "Parameters": {"table_type": "DELTA", "EXTERNAL": "TRUE", "classification": "delta",
                       "spark.sql.sources.provider": "delta"},
        # Parquet's SerDe and formats, as Athena's own CREATE EXTERNAL TABLE writes them, and the location as the
        # SerDe's `path` too, as Spark writes a Delta table in Glue: Trino's Delta Lake connector stops on a Glue
        # table without them ("StorageDescriptor SerDeInfo is null", "No path property defined for table").
        "StorageDescriptor": {"Columns": columns, "Location": location, "InputFormat": PARQUET_INPUT,
                              "OutputFormat": PARQUET_OUTPUT,
                              "SerdeInfo": {"SerializationLibrary": PARQUET_SERDE, "Parameters": {"path": location}}},
    }


class GlueConflict(RuntimeError):
    """A Glue table of the same name exists and is not a Delta table: it is never overwritten."""


@dataclass
class DeltaGlue:
    cfg: PipelineConfig
    spark: SparkSession
    _known: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # what Glue holds, as last seen
    _client: Any = None

    @classmethod
    def enabled(cls, cfg: PipelineConfig, spark: SparkSession) -> DeltaGlue | None:
        return cls(cfg, spark) if cfg.lake.format == "delta" and cfg.lake.delta_glue else None

    @property
    def glue(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.client("glue", **self.cfg.aws.boto3_kwargs())
        return self._client

    def sync(self, namespace: str, name: str) -> bool:
        """Register or update `namespace.name` in Glue; True when Glue changed."""
        path = f"{self.cfg.lake.delta_root}/{namespace}/{name}"
        wanted = table_input(name, s3_location(path), glue_columns(self.spark, path))
        key = (namespace, name)
        if key not in self._known:
            self._known[key] = self._current(namespace, name)
        held = self._known[key]
        if held and held.get("Parameters", {}).get("table_type", "").upper() != "DELTA":
            raise GlueConflict(f"Glue table {namespace}.{name} exists and is not a Delta table "
                               f"(table_type={held.get('Parameters', {}).get('table_type')!r}); it is left as it "
                               "is: drop it, or write the Delta tables under other namespaces")
        if held and _same(held, wanted):
            return False
        if not held:
            self._ensure_database(namespace)
            self.glue.create_table(DatabaseName=namespace, TableInput=wanted)
        else:
            self.glue.update_table(DatabaseName=namespace, TableInput=wanted)
        self._known[key] = wanted
        log.info("glue.delta_table", database=namespace, table=name, location=wanted["StorageDescriptor"]["Location"],
                 columns=len(wanted["StorageDescriptor"]["Columns"]), action="updated" if held else "created")
        return True

    def _current(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return self.glue.get_table(DatabaseName=namespace, Name=name)["Table"]
        except self.glue.exceptions.EntityNotFoundException:
            return {}

    def _ensure_database(self, namespace: str) -> None:
        try:
            self.glue.create_database(DatabaseInput={"Name": namespace})
        except self.glue.exceptions.AlreadyExistsException:
            pass


def _same(held: dict[str, Any], wanted: dict[str, Any]) -> bool:
    got, want = held.get("StorageDescriptor", {}), wanted["StorageDescriptor"]
    return (wanted["Parameters"].items() <= held.get("Parameters", {}).items()
            and got.get("Location") == want["Location"]
            and [(c["Name"], c["Type"]) for c in got.get("Columns", [])] == [(c["Name"], c["Type"]) for c in want["Columns"]])
