package cdc.spark

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import org.apache.iceberg.Table
import org.apache.iceberg.spark.SparkSchemaUtil
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.sql.types.{ArrayType, BooleanType, StringType, StructField, StructType, TimestampType}
import org.apache.spark.unsafe.types.UTF8String

import Resolution.{isPipelineColumn, Unchanged}

/** One mirror's rows of a run, made from its changelog rows by the task that writes them: the changes as the
 *  mirror stores them (`changes`: `cdc.merge.prepared` of the stage's canonical changes), checked, and either
 *  appended as they are to the pending table (`build` false) or, for a new mirror's first build, resolved to one
 *  row a key (`cdc/build.py`'s rules), each in `table`'s columns.
 *
 *  Why not Spark frames: a whole database's mirror run touches hundreds of tables with a few changes each, and
 *  planning the frames that make, check and resolve a table's changes cost most of a second of the driver's CPU
 *  a table, far more than the rows (docs/benchmarks.md). Here a table costs the plan of its changelog read. The
 *  rows are few (`mirror.pending_build_rows` at most): one task holds a table's whole batch, as compact rows.
 *
 *  The changes (`apply._canonical`, then `prepared`): the changelog's columns but `dropped`, `_is_deleted` false
 *  where null, a source column listed in `_unchanged` (a TOAST placeholder) null, `_deleted_at` the source time of
 *  a delete, `_merged_at` the run's time; `_op`, `_source_ts` and `_unchanged` made when the changelog lacks them.
 *  The checks and the resolution are `Resolution`'s (the pending layout's rules). A batch that fails a check, or
 *  holds a truncate (which reads the mirror), is not written here: `rows` says so, and the caller merges that table
 *  alone, where the full check names the problem. */
final class MirrorRows(changelog: StructType, table: Table, keys: java.util.List[String], build: Boolean,
                       hardDeletes: Boolean, dropped: java.util.List[String], tombstone: java.util.List[String],
                       mergedAt: Long) extends Serializable {
  import MirrorRows._

  /** The changes' columns. */
  val changes: StructType = prepared(changelog, dropped)
  /** The rows' columns: the table's. */
  val schema: StructType = SparkSchemaUtil.convert(table.schema)

  private val from: Map[String, Int] = changelog.fieldNames.zipWithIndex.toMap
  private val at: Map[String, Int] = changes.fieldNames.zipWithIndex.toMap
  private val rules = new Resolution(changes, keys.asScala.toSeq, tombstone.asScala.toSeq, deletesKnowValues = false)

  @transient private lazy val compact = UnsafeProjection.create(changes)  // a held change: its bytes, no objects

  /** The outcome of the last job that wrote these rows (`ManyTables.append` sets it): changes read, keys
   *  changed, and whether the table was left to be merged alone. */
  @volatile var outcome: Outcome = Outcome(0, 0, alone = false)

  /** A table's whole batch of changelog rows (one task reads them all), as the rows to write. */
  def rows(changelogRows: Iterator[InternalRow]): (Outcome, Iterator[InternalRow]) = {
    val byKey = mutable.LinkedHashMap[UnsafeRow, mutable.ArrayBuffer[InternalRow]]()
    var read = 0L
    for (row <- changelogRows) {
      read += 1
      val change = compact(canonical(row)).copy()
      if (rules.isTruncate(change) || rules.unusable(change)) return (Outcome(read, 0, alone = true), Iterator.empty)
      byKey.getOrElseUpdate(rules.key(change).copy(), mutable.ArrayBuffer()) += change
    }
    val written = mutable.ArrayBuffer[InternalRow]()
    for (changes <- byKey.valuesIterator) {
      val ordered = changes.sortWith((a, b) => rules.order(a, b) < 0).toIndexedSeq
      if (rules.tied(ordered)) return (Outcome(read, 0, alone = true), Iterator.empty)
      if (!build) written ++= ordered.map(change => aligned(change, _ => change, rules.listed(change)))
      else if (!(hardDeletes && rules.isDeleted(ordered.last))) {
        val row = rules.newest(ordered)
        written += aligned(row.last, row.source, row.unknown)
      }
    }
    (Outcome(read, byKey.size, alone = false), written.iterator)
  }

  /** A changelog row as a change of `changes`. */
  private def canonical(row: InternalRow): InternalRow = {
    val known = from.get(Unchanged).filterNot(row.isNullAt).map(row.getArray)
    val placeholders = known.fold(Set.empty[String])(_.toArray[UTF8String](StringType).map(_.toString).toSet)
    val isDeleted = from.get("_is_deleted").exists(i => !row.isNullAt(i) && row.getBoolean(i))
    val values = changes.fields.map { field =>
      field.name match {
        case "_is_deleted" => isDeleted
        case "_op" if !from.contains("_op") => UTF8String.fromString(if (isDeleted) "d" else "u")
        case Unchanged if !from.contains(Unchanged) => new GenericArrayData(Array.empty[Any])
        case "_deleted_at" =>
          from.get("_source_ts").filter(i => isDeleted && !row.isNullAt(i)).map(row.getLong(_): Any).orNull
        case "_merged_at" => mergedAt
        case name if !isPipelineColumn(name) && placeholders.contains(name) => null
        case name => from.get(name).map(row.get(_, field.dataType)).orNull
      }
    }
    new GenericInternalRow(values.asInstanceOf[Array[Any]])
  }

  /** A row in the table's columns, each column's value from the change `source` names, `_unchanged` listing
   *  `unknown` and the table's columns the changes lack (the source no longer sends them: `tables.pending.aligned`). */
  private def aligned(last: InternalRow, source: String => InternalRow, unknown: Seq[String]): InternalRow = {
    val values = schema.fields.map { field =>
      if (field.name == Unchanged) {
        val absent = schema.fieldNames.filterNot(c => at.contains(c) || c == Unchanged)
        new GenericArrayData((unknown ++ absent).distinct.map(UTF8String.fromString).toArray)
      } else at.get(field.name).map(i => source(field.name).get(i, field.dataType)).orNull
    }
    new GenericInternalRow(values.asInstanceOf[Array[Any]])
  }
}

object MirrorRows {
  /** A table's changes read, keys changed, and whether it is left to be merged alone. */
  final case class Outcome(changes: Long, keys: Long, alone: Boolean)

  /** The changes' columns from the changelog's: its own but `dropped`, then `_op`, `_is_deleted`, `_source_ts`,
   *  `_seq` and `_unchanged` where it lacks them (`apply._canonical`), then `_deleted_at` and `_merged_at`
   *  (`cdc.merge.prepared`); every column nullable, as the mirror's tables are made. */
  def prepared(changelog: StructType, dropped: java.util.List[String]): StructType = {
    val made = Seq(StructField("_op", StringType), StructField("_is_deleted", BooleanType),
                   StructField("_source_ts", TimestampType), StructField(Unchanged, ArrayType(StringType)))
    val canonical = changelog.fields.toSeq ++ made.filterNot(f => changelog.fieldNames.contains(f.name))
    val time = canonical.find(_.name == "_source_ts").get.dataType
    val added = Seq(StructField("_deleted_at", time), StructField("_merged_at", TimestampType))
    val kept = canonical.filterNot(f => dropped.contains(f.name))
      .map(f => added.find(_.name == f.name).getOrElse(f).copy(nullable = true))
    StructType((kept ++ added.filterNot(f => kept.exists(_.name == f.name))).toArray)
  }
}
