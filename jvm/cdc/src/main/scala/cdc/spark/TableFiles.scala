package cdc.spark

import java.util.UUID

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import org.apache.iceberg.{DataFile, FileFormat, PartitionData, Table}
import org.apache.iceberg.io.{DataWriter, OutputFileFactory}
import org.apache.iceberg.parquet.Parquet
import org.apache.iceberg.shaded.org.apache.parquet.schema.MessageType
import org.apache.iceberg.spark.SparkSchemaUtil
import org.apache.iceberg.spark.data.SparkParquetWriters
import org.apache.iceberg.types.Types
import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.InternalRow

/** One table's rows written by one task into Iceberg data files, one per day of the table's day partition (or
 *  one), by Iceberg's own Parquet writer (`Parquet.writeData(...).forTable(table)`: the table's compression,
 *  metrics and other write properties). Rows must be in the table's column order and Spark types. A quiet table's
 *  rows are few: no file rolls at the target file size. */
final class TableFiles(table: Table, part: Int) {
  private val sparkType = SparkSchemaUtil.convert(table.schema)
  private val factory = OutputFileFactory.builderFor(table, part, TaskContext.get.taskAttemptId)
    .format(FileFormat.PARQUET).operationId(UUID.randomUUID.toString).build()
  private val day = TableFiles.dayColumn(table)
  private val writers = mutable.LinkedHashMap[Option[Int], DataWriter[InternalRow]]()

  def write(row: InternalRow): Unit = {
    val key = day.flatMap(i =>
      if (row.isNullAt(i)) None else Some(Math.floorDiv(row.getLong(i), TableFiles.MicrosPerDay).toInt))
    writers.getOrElseUpdate(key, open(key)).write(row)
  }

  /** Closes the files and returns them; a table given no row returns none. */
  def close(): Array[DataFile] = {
    writers.values.foreach(_.close())
    writers.values.map(_.toDataFile).toArray
  }

  private def open(key: Option[Int]): DataWriter[InternalRow] = {
    val partition = day.map { _ =>
      val data = new PartitionData(table.spec.partitionType)
      data.set(0, key.map(Int.box).orNull)
      data
    }
    val out = partition.fold(factory.newOutputFile())(factory.newOutputFile(table.spec, _))
    Parquet.writeData(out).forTable(table)
      .createWriterFunc((message: MessageType) => SparkParquetWriters.buildWriter[InternalRow](sparkType, message))
      .withSpec(table.spec).withPartition(partition.orNull).overwrite().build[InternalRow]()
  }
}

object TableFiles {
  private val MicrosPerDay = 86400L * 1000 * 1000

  /** Whether `TableFiles` writes this table's partitions: none, or the day of one top-level timestamp column. */
  def writable(table: Table): Boolean = dayColumn(table).isDefined || table.spec.isUnpartitioned

  /** The source column's position of a day partition spec, if the table has one on a top-level timestamp. */
  private def dayColumn(table: Table): Option[Int] = {
    val fields = table.spec.fields.asScala
    if (fields.size != 1 || fields.head.transform.toString != "day") return None
    val column = table.schema.findField(fields.head.sourceId)
    val topLevel = table.schema.columns.asScala.indexWhere(_.fieldId == column.fieldId)
    val timestamp = column.`type`.isInstanceOf[Types.TimestampType]
    if (topLevel >= 0 && timestamp) Some(topLevel) else None
  }
}
