package cdc.spark

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import org.apache.iceberg.Table
import org.apache.iceberg.spark.SparkSchemaUtil
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Ascending, BoundReference, GenericInternalRow, InterpretedOrdering,
  SortOrder, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.sql.types.{ArrayType, BooleanType, StringType, StructField, StructType, TimestampType}
import org.apache.spark.unsafe.types.UTF8String

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
 *  The checks (`cdc/validate.py`): no null key, no null `_seq.source_major`, no two different changes of a key at
 *  one `_seq`. A batch that fails one, or holds a truncate (which reads the mirror), is not written here:
 *  `rows` says so, and the caller merges that table alone, where the full check names the problem.
 *  The resolution (`cdc/build.py`): a key's newest change by `_seq` gives the key and the `tombstone` columns and,
 *  when it is not a delete and carries every column, all of them; else each column comes from the newest change
 *  newer than the last complete one that carries it (not a soft delete, not a placeholder), else the last
 *  complete change's, else the newest change's own; the columns no change knew are listed in `_unchanged`. */
final class MirrorRows(changelog: StructType, table: Table, keys: java.util.List[String], build: Boolean,
                       hardDeletes: Boolean, dropped: java.util.List[String], tombstone: java.util.List[String],
                       mergedAt: Long) extends Serializable {
  import MirrorRows._

  /** The changes' columns. */
  val changes: StructType = prepared(changelog, dropped)
  /** The rows' columns: the table's. */
  val schema: StructType = SparkSchemaUtil.convert(table.schema)

  private val from: Map[String, Int] = changelog.fieldNames.zipWithIndex.toMap
  private val names: Array[String] = changes.fieldNames
  private val at: Map[String, Int] = names.zipWithIndex.toMap
  private val keyAt: Array[Int] = keys.asScala.map(at).toArray
  private val seq: Int = at("_seq")
  private val seqType: StructType = changes(seq).dataType.asInstanceOf[StructType]
  private val major: Int = seqType.fieldIndex("source_major")
  private val (op, deleted, unchanged) = (at("_op"), at("_is_deleted"), at(Unchanged))
  /** The columns a change that does not know them leaves to an older one (`cdc.merge.knowing_columns`). */
  private val knowing: Set[String] =
    names.filterNot(c => keys.contains(c) || tombstone.contains(c) || c == Unchanged).toSet
  /** The source's columns but the key, in order: the ones `_unchanged` can list. */
  private val data: Array[String] = names.filter(c => !isPipelineColumn(c) && !keys.contains(c))
  /** What tells two changes at one `_seq` apart: the source's columns, `_op` and `_is_deleted`. */
  private val content: Array[Int] =
    names.indices.filter(i => !isPipelineColumn(names(i)) || names(i) == "_op" || names(i) == "_is_deleted").toArray

  @transient private lazy val compact = UnsafeProjection.create(changes)  // a held change: its bytes, no objects
  @transient private lazy val keyOf = UnsafeProjection.create(keyAt.map(bound).toSeq)
  @transient private lazy val contentOf = UnsafeProjection.create(content.map(bound).toSeq)
  @transient private lazy val seqOrder = new InterpretedOrdering(seqType.fields.indices.map(i =>
    SortOrder(BoundReference(i, seqType(i).dataType, nullable = true), Ascending)))

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
      if (change.getUTF8String(op) == Truncate || unusable(change)) return (Outcome(read, 0, alone = true), Iterator.empty)
      byKey.getOrElseUpdate(keyOf(change).copy(), mutable.ArrayBuffer()) += change
    }
    val written = mutable.ArrayBuffer[InternalRow]()
    for (changes <- byKey.valuesIterator) {
      val ordered = changes.sortWith((a, b) => order(a, b) < 0).toIndexedSeq
      if (tied(ordered)) return (Outcome(read, 0, alone = true), Iterator.empty)
      if (!build) written ++= ordered.map(change => aligned(change, _ => Some(change), listed(change)))
      else if (!(hardDeletes && ordered.last.getBoolean(deleted))) written += newest(ordered)
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

  private def order(a: InternalRow, b: InternalRow): Int =
    seqOrder.compare(a.getStruct(seq, seqType.size), b.getStruct(seq, seqType.size))

  /** A change whose key or source position is null. */
  private def unusable(change: InternalRow): Boolean =
    keyAt.exists(change.isNullAt) || change.isNullAt(seq) || change.getStruct(seq, seqType.size).isNullAt(major)

  /** Two different changes of a key at one `_seq` (the same change delivered twice is no tie). */
  private def tied(ordered: IndexedSeq[InternalRow]): Boolean =
    ordered.indices.drop(1).exists { i =>
      order(ordered(i - 1), ordered(i)) == 0 && contentOf(ordered(i - 1)).copy() != contentOf(ordered(i))
    }

  private def placeholders(change: InternalRow): Boolean =
    !change.isNullAt(unchanged) && change.getArray(unchanged).numElements > 0

  private def listed(change: InternalRow): Seq[String] =
    if (change.isNullAt(unchanged)) Nil
    else change.getArray(unchanged).toArray[UTF8String](StringType).map(_.toString).toSeq

  /** The row of a key from its changes in `_seq` order (a first build). */
  private def newest(ordered: IndexedSeq[InternalRow]): InternalRow = {
    val last = ordered.last
    def knowsAll(change: InternalRow): Boolean = !change.getBoolean(deleted) && !placeholders(change)
    val complete = knowsAll(last)
    val whole = ordered.findLast(knowsAll)
    val newer = ordered.filter(c => !c.getBoolean(deleted) && placeholders(c) && whole.forall(order(c, _) > 0))
      .map(c => c -> listed(c).toSet)
    def source(column: String): Option[InternalRow] =
      if (complete || !knowing.contains(column)) Some(last)
      else newer.findLast { case (_, missing) => !missing.contains(column) }.map(_._1).orElse(whole).orElse(Some(last))
    val unknown = if (complete || whole.isDefined) Nil
      else data.filterNot(c => newer.exists { case (_, missing) => !missing.contains(c) }).toSeq
    aligned(last, source, unknown)
  }

  /** A row in the table's columns, each column's value from the change `source` names, `_unchanged` listing
   *  `unknown` and the table's columns the changes lack (the source no longer sends them: `tables.pending.aligned`). */
  private def aligned(last: InternalRow, source: String => Option[InternalRow], unknown: Seq[String]): InternalRow = {
    val values = schema.fields.map { field =>
      if (field.name == Unchanged) {
        val absent = schema.fieldNames.filterNot(c => at.contains(c) || c == Unchanged)
        new GenericArrayData((unknown ++ absent).distinct.map(UTF8String.fromString).toArray)
      } else at.get(field.name).flatMap(i => source(field.name).map(_.get(i, field.dataType))).orNull
    }
    new GenericInternalRow(values.asInstanceOf[Array[Any]])
  }

  private def bound(i: Int): BoundReference = BoundReference(i, changes(i).dataType, nullable = true)
}

object MirrorRows {
  val Unchanged = "_unchanged"
  private val Truncate = UTF8String.fromString("t")

  /** A table's changes read, keys changed, and whether it is left to be merged alone. */
  final case class Outcome(changes: Long, keys: Long, alone: Boolean)

  /** A lake column the pipeline owns (`cdc.columns.is_pipeline_column`): one `_`, then not another. */
  def isPipelineColumn(name: String): Boolean = name.startsWith("_") && !name.startsWith("__")

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
