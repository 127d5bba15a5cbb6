package cdc.spark

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.iceberg.{Snapshot, Table}
import org.apache.iceberg.catalog.{Catalog, Namespace, TableIdentifier}
import org.apache.iceberg.exceptions.NoSuchTableException
import org.apache.iceberg.spark.Spark3Util
import org.apache.spark.sql.classic.SparkSession

/** Iceberg tables loaded from their catalog itself, and the metadata their commits carry.
 *
 *  Why the catalog itself: a query of `<table>.snapshots` plans and runs a Spark job, and a load through Spark's
 *  catalog parses the identifier, wraps the table and refreshes it, a catalog round trip more. The pipeline's
 *  catalogs cache no table (`tables/catalog.py`), so a load is current. Why here and not from Python: a load
 *  through py4j took some ten round trips (the session made active, the catalog, the identifier's parts). */
object IcebergTables {
  private val Json = new ObjectMapper()

  /** Catalog `name` of `spark`, named with `spark` active (`ActiveSession`). */
  def catalog(spark: SparkSession, name: String): Catalog =
    ActiveSession.within(spark)(Spark3Util.loadIcebergCatalog(spark, name))

  /** Table `namespace.name` of catalog `catalogName`; Iceberg's `NoSuchTableException` when there is none. */
  def load(spark: SparkSession, catalogName: String, namespace: String, name: String): Table =
    catalog(spark, catalogName).loadTable(identifier(namespace, name))

  /** Table `namespace.name` of `catalog`, when there is one. */
  def find(catalog: Catalog, namespace: String, name: String): Option[Table] =
    try Some(catalog.loadTable(identifier(namespace, name)))
    catch { case _: NoSuchTableException => None }

  /** The newest snapshot whose summary carries `key` (by commit time; of two at one time, the later listed). */
  def newestCarrying(table: Table, key: String): Option[Snapshot] =
    table.snapshots.asScala.foldLeft(Option.empty[Snapshot]) { (found, snapshot) =>
      val newer = found.forall(_.timestampMillis <= snapshot.timestampMillis)
      if (newer && snapshot.summary.containsKey(key)) Some(snapshot) else found
    }

  /** `newestCarrying` for Python, as JSON: `[snapshot id, "value"]`, or null when no snapshot carries `key`. */
  def carried(table: Table, key: String): String =
    newestCarrying(table, key).map { snapshot =>
      Json.writeValueAsString(Array[Any](snapshot.snapshotId, snapshot.summary.get(key)))
    }.orNull

  private def identifier(namespace: String, name: String): TableIdentifier =
    TableIdentifier.of(Namespace.of(namespace), name)
}
