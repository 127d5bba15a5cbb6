package cdc.spark

import java.util.concurrent.{Callable, Executors}

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.iceberg.Table
import org.apache.spark.sql.classic.SparkSession

/** Where many Iceberg mirrors stand, looked up in one call: each table's changelog's current snapshot and the
 *  watermark its mirror's commits carry (`pipeline/stages/mirror.py`, `MirrorStage.positions`).
 *
 *  Why: a mirror run over a whole database looks every table up before it merges any, and most tables are quiet.
 *  From Python a table's lookup was two catalog loads, a metadata document turned into JSON and some twenty-five
 *  py4j round trips, about 4 ms a table on 2 cores: a run where 10 of 500 tables had changes spent more on the
 *  490 others than on the 10 (bench/database.py). Here the loads run on a few JVM threads, and only the answers
 *  cross py4j. */
object Positions {
  private val Json = new ObjectMapper()

  /** For each table of `names` (its mirror exists in `mirror`; `withPending(i)`: it has a pending table in
   *  `pending`), in order: `through`, the current snapshot id of its changelog table in `changelog` (null without
   *  a commit or without the table); `merged`, the value of snapshot summary `key` on the newest snapshot that
   *  carries it, of the pending table first, else of the mirror (`mirror.watermark`'s rule; null: none); and the
   *  seconds its lookups took. `threads` tables at a time, in catalog `catalogName` of `spark`. As JSON:
   *  `[{"through": id, "merged": "text", "seconds": s}, ...]`. */
  def of(spark: SparkSession, catalogName: String, changelog: String, mirror: String, pending: String,
         names: java.util.List[String], withPending: java.util.List[java.lang.Boolean], key: String,
         threads: Int): String = {
    val catalog = IcebergTables.catalog(spark, catalogName)
    val pool = Executors.newFixedThreadPool(math.max(1, threads))
    try {
      val lookups = names.asScala.zip(withPending.asScala).map { case (name, hasPending) =>
        pool.submit(new Callable[java.util.Map[String, Any]] {
          override def call(): java.util.Map[String, Any] = {
            val started = System.nanoTime
            def find(namespace: String) = IcebergTables.find(catalog, namespace, name)
            val through = find(changelog).flatMap(t => Option(t.currentSnapshot)).map(_.snapshotId)
            val merged = (if (hasPending) find(pending).flatMap(watermark(_, key)) else None)
              .orElse(find(mirror).flatMap(watermark(_, key)))
            Map[String, Any]("through" -> through.map(Long.box).orNull, "merged" -> merged.orNull,
              "seconds" -> (System.nanoTime - started) / 1e9).asJava
          }
        })
      }
      Json.writeValueAsString(lookups.map(_.get).asJava)
    } finally pool.shutdown()
  }

  private def watermark(table: Table, key: String): Option[String] =
    IcebergTables.newestCarrying(table, key).map(_.summary.get(key))
}
