package cdc.spark

import java.util.UUID
import java.util.concurrent.{Callable, Executors}

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import org.apache.iceberg.{DataFile, FileFormat, PartitionData, Table}
import org.apache.iceberg.io.{DataWriter, OutputFileFactory}
import org.apache.iceberg.parquet.Parquet
import org.apache.iceberg.shaded.org.apache.parquet.schema.MessageType
import org.apache.iceberg.spark.{Spark3Util, SparkSchemaUtil}
import org.apache.iceberg.spark.data.SparkParquetWriters
import org.apache.iceberg.spark.source.SerializableTableWithSize
import org.apache.iceberg.types.Types
import org.apache.spark.TaskContext
import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.classic.{Dataset, SparkSession}
import org.apache.spark.sql.connector.catalog.TableCatalog
import org.apache.spark.sql.connector.expressions.{Expressions, Transform}
import org.apache.spark.sql.execution.SQLExecution
import org.apache.spark.sql.types.{DataType, StructType}

/** Appends to many small Iceberg tables in one Spark job, each table committed through Iceberg's Java API.
 *
 *  Why: a Kafka batch of a whole database is mostly quiet topics of a few rows each, and landing each through
 *  Spark's DataFrameWriterV2 cost about a second of driver and Spark work a table (its own job, its own commit:
 *  docs/benchmarks.md). Here each frame's plan (`queryExecution.toRdd`) is mapped by a task-side writer that writes
 *  its table's Parquet data files with Iceberg's own writers (`Parquet.writeData(...).forTable(table)`: the
 *  table's compression, metrics and other write properties), the union of those is coalesced to a few tasks (so
 *  500 tables are not 500 tasks), the files come back to the driver, and each table gets one `AppendFiles`
 *  commit with the snapshot properties the caller gives (its idempotence tag), from a small thread pool.
 *
 *  Frames must already be in their table's column order and Spark types (`tables/append.py` checks); columns
 *  named in `stamps` are written with the stamp's value (a long: micros for a timestamp) whatever the frame holds
 *  there, so the frames' generated code carries no per-batch literal. Tables must be `writable`: unpartitioned
 *  or partitioned by the day of one timestamp column. A quiet table's rows are few: each task writes one file per
 *  table and day, without rolling at the target file size. */
object ManyTables {
  private val MicrosPerDay = 86400L * 1000 * 1000

  /** Creates table `name` (`catalog.namespace.table`) as a create-as-select of `schemaJson` (a Spark struct,
   *  as `StructType.json` writes it) would, through the same Spark catalog call: partitioned by the day of
   *  `dayColumn` (null: unpartitioned), with `properties` and the owner Spark adds (the Spark user). Returns
   *  the Iceberg table. */
  def create(spark: SparkSession, name: String, schemaJson: String, dayColumn: String,
             properties: java.util.Map[String, String]): Table = {
    val found = Spark3Util.catalogAndIdentifier(spark, name)
    val partitioning: Array[Transform] = Option(dayColumn).map(column => Expressions.days(column): Transform).toArray
    val owned = (properties.asScala + (TableCatalog.PROP_OWNER -> spark.sparkContext.sparkUser)).asJava
    found.catalog.asInstanceOf[TableCatalog].createTable(found.identifier,
      DataType.fromJson(schemaJson).asInstanceOf[StructType], partitioning, owned)
    Spark3Util.loadIcebergTable(spark, name)
  }

  /** Whether `append` writes this table's partitions: none, or the day of one top-level timestamp column. */
  def writable(table: Table): Boolean = dayColumn(table).isDefined || table.spec.isUnpartitioned

  /** Writes each frame's rows into its table in one Spark job of at most `tasks` tasks, then commits each table
   *  once (`threads` at a time) with the snapshot properties `snapshot`, and completes the frames' observations
   *  (`Dataset.observe`) as a write of each would have. Returns the rows written to each table. */
  def append(frames: java.util.List[Dataset[Row]], tables: java.util.List[Table],
             stamps: java.util.Map[String, java.lang.Number], snapshot: java.util.Map[String, String],
             tasks: Int, threads: Int): Array[Long] = {
    require(frames.size == tables.size && !frames.isEmpty, "one table a frame, at least one")
    val spark = frames.get(0).sparkSession
    val context = spark.sparkContext
    val shipped = context.broadcast(tables.asScala.map(SerializableTableWithSize.copyOf).toArray)
    val parts = frames.asScala.toSeq.zipWithIndex.map { case (frame, i) =>
      val stamped = stampsOf(frame.schema, stamps)
      frame.queryExecution.toRdd.mapPartitionsWithIndex((part, rows) =>
        Iterator(i -> write(shipped.value(i), rows, stamped, part)))
    }
    val union = context.union(parts)
    val written = try union.coalesce(math.max(1, math.min(tasks, union.getNumPartitions))).collect()
                  finally shipped.destroy()
    val files = written.groupMap(_._1)(_._2).view.mapValues(_.flatten.toSeq).toMap
    val pool = Executors.newFixedThreadPool(math.max(1, math.min(threads, tables.size)))
    try {
      val commits = tables.asScala.toSeq.zipWithIndex.map { case (table, i) =>
        pool.submit(new Callable[Long] {
          override def call(): Long = commit(table, files.getOrElse(i, Nil), snapshot)
        })
      }
      val rows = commits.map(_.get()).toArray
      frames.asScala.zip(tables.asScala).foreach { case (frame, table) =>
        SQLExecution.withNewExecutionId(frame.queryExecution, Some(s"append to ${table.name}"))(())
      }
      rows
    } finally pool.shutdown()
  }

  private def commit(table: Table, files: Seq[DataFile], snapshot: java.util.Map[String, String]): Long = {
    val append = table.newAppend()
    files.foreach(append.appendFile)
    snapshot.asScala.foreach { case (key, value) => append.set(key, value) }
    append.commit() // an append of no files commits too: the table then holds the batch, as Spark's write does
    files.map(_.recordCount).sum
  }

  private def stampsOf(schema: StructType, stamps: java.util.Map[String, java.lang.Number]): Array[(Int, Long)] =
    stamps.asScala.toArray.map { case (column, value) => schema.fieldIndex(column) -> value.longValue }

  /** The source column's position of a day partition spec, if the table has one on a top-level timestamp. */
  private def dayColumn(table: Table): Option[Int] = {
    val fields = table.spec.fields.asScala
    if (fields.size != 1 || fields.head.transform.toString != "day") return None
    val column = table.schema.findField(fields.head.sourceId)
    val topLevel = table.schema.columns.asScala.indexWhere(_.fieldId == column.fieldId)
    val timestamp = column.`type`.isInstanceOf[Types.TimestampType]
    if (topLevel >= 0 && timestamp) Some(topLevel) else None
  }

  /** One table's rows of one input partition, written to a data file per day (or one file). */
  private def write(table: Table, rows: Iterator[InternalRow], stamps: Array[(Int, Long)], part: Int
                   ): Array[DataFile] = {
    val sparkType = SparkSchemaUtil.convert(table.schema)
    val files = OutputFileFactory.builderFor(table, part, TaskContext.get.taskAttemptId)
      .format(FileFormat.PARQUET).operationId(UUID.randomUUID.toString).build()
    val day = dayColumn(table)
    val writers = mutable.LinkedHashMap[Option[Int], DataWriter[InternalRow]]()
    def writer(key: Option[Int]): DataWriter[InternalRow] = writers.getOrElseUpdate(key, {
      val partition = day.map { _ =>
        val data = new PartitionData(table.spec.partitionType)
        data.set(0, key.map(Int.box).orNull)
        data
      }
      val out = partition.fold(files.newOutputFile())(files.newOutputFile(table.spec, _))
      Parquet.writeData(out).forTable(table)
        .createWriterFunc((message: MessageType) => SparkParquetWriters.buildWriter[InternalRow](sparkType, message))
        .withSpec(table.spec).withPartition(partition.orNull).overwrite().build[InternalRow]()
    })
    try {
      rows.foreach { row =>
        val target = if (stamps.isEmpty || row.isInstanceOf[UnsafeRow]) row else row.copy()
        stamps.foreach { case (ordinal, value) => target.setLong(ordinal, value) }
        val key = day.flatMap(i =>
          if (target.isNullAt(i)) None else Some(Math.floorDiv(target.getLong(i), MicrosPerDay).toInt))
        writer(key).write(target)
      }
    } finally writers.values.foreach(_.close())
    writers.values.map(_.toDataFile).toArray
  }
}
