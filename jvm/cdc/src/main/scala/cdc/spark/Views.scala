package cdc.spark

import scala.jdk.CollectionConverters._

import org.apache.iceberg.spark.SupportsReplaceView
import org.apache.spark.SPARK_VERSION
import org.apache.spark.sql.classic.SparkSession
import org.apache.spark.sql.connector.catalog.{Identifier, ViewCatalog}
import org.apache.spark.sql.types.{DataType, StructType}

/** Views of an Iceberg catalog replaced through its view API, with the metadata `CREATE OR REPLACE VIEW` stores
 *  (Iceberg's `CreateV2ViewExec`), without analysing their query: the caller knows the columns a view gives.
 *  Analysing a mirror's overlay (an aggregate per column over two tables) takes Catalyst far longer than
 *  the view's metadata commit, three views a new table. */
object Views {
  /** Replaces (or creates) view `namespace.name` of Spark catalog `catalog` with query `sql`, whose columns are
   *  `schemaJson`'s (a Spark struct, as `StructType.json` writes it), in their order. */
  def replace(spark: SparkSession, catalog: String, namespace: String, name: String, sql: String,
              schemaJson: String): Unit = {
    val manager = spark.sessionState.catalogManager
    val views = ActiveSession.within(spark)(manager.catalog(catalog)).asInstanceOf[SupportsReplaceView]
    // As CREATE VIEW records them: the session's catalog when it is another, and its namespace
    val current = Option(manager.currentCatalog.name).filter(_ != catalog).orNull
    val schema = DataType.fromJson(schemaJson).asInstanceOf[StructType]
    val engine = s"Spark $SPARK_VERSION"
    val properties = Map(ViewCatalog.PROP_CREATE_ENGINE_VERSION -> engine, ViewCatalog.PROP_ENGINE_VERSION -> engine)
    views.replaceView(Identifier.of(Array(namespace), name), sql, current, manager.currentNamespace, schema,
                      schema.fieldNames, Array.empty[String], Array.fill[String](schema.length)(null),
                      properties.asJava)
  }
}
