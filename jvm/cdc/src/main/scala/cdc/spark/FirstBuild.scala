package cdc.spark

import scala.collection.mutable

import org.apache.iceberg.Table
import org.apache.iceberg.spark.SparkSchemaUtil
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Ascending, BoundReference, GenericInternalRow, InterpretedOrdering,
  SortOrder, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.sql.types.{StringType, StructType}
import org.apache.spark.unsafe.types.UTF8String

/** A new small mirror's first build in the pending layout, done by the task that writes it: the changes of one
 *  table (rows of `input`, as `cdc.merge.prepared` gives them) grouped by key, checked, and resolved to one row a
 *  key in `table`'s columns, by the rules `cdc/build.py` plans as a Spark window for a large first build.
 *
 *  Why not that window: a whole database's first `mirror` run builds hundreds of small tables, and planning the
 *  window, its checks and its projection over a table's columns cost ~1 s of the driver's CPU a table, far more
 *  than resolving its rows (docs/benchmarks.md). Here a table costs the plan of its changes' read.
 *
 *  The rules (`cdc/build.py`): a key's newest change by `_seq` gives the key, the deletion columns and, when it is
 *  not a delete and carries every column, all of them; else each column comes from the newest change newer than
 *  the last complete one that carries it (not a soft delete, not a TOAST placeholder: `_unchanged`), else the
 *  last complete change's, else the newest change's own, and the columns no change knew are listed in
 *  `_unchanged`. The checks (`cdc/validate.py`): no null key, no null `_seq.source_major`, no two different changes
 *  of a key at one `_seq`. A table whose changes fail one, or hold a truncate (which reads the mirror), is not
 *  built here: `resolve` says so, and the caller builds it alone, with the full check's message. */
final class FirstBuild(input: StructType, table: Table, keys: java.util.List[String], hardDeletes: Boolean)
    extends Serializable {
  import FirstBuild._

  /** The rows' columns: the table's. */
  val schema: StructType = SparkSchemaUtil.convert(table.schema)
  private val names: Array[String] = input.fieldNames
  private val at: Map[String, Int] = names.zipWithIndex.toMap
  private val keyAt: Array[Int] = keys.toArray(Array.empty[String]).map(at)
  private val seq: Int = at("_seq")
  private val deleted: Int = at("_is_deleted")
  private val op: Int = at("_op")
  private val unchanged: Int = at(Unchanged)
  private val seqType: StructType = input(seq).dataType.asInstanceOf[StructType]
  private val major: Int = seqType.fieldIndex("source_major")
  /** The columns a change that does not know them leaves to an older one (`cdc.merge.knowing_columns`). */
  private val knowing: Set[String] =
    names.filterNot(c => keys.contains(c) || Tombstone.contains(c) || c == Unchanged).toSet
  /** The source's columns but the key, in order: the ones `_unchanged` can list. */
  private val data: Array[String] = names.filter(c => !isPipelineColumn(c) && !keys.contains(c))
  /** What tells two changes at one `_seq` apart: the source's columns, `_op` and `_is_deleted`. */
  private val content: Array[Int] =
    names.indices.filter(i => !isPipelineColumn(names(i)) || names(i) == "_op" || names(i) == "_is_deleted").toArray

  @transient private lazy val keyOf = UnsafeProjection.create(keyAt.map(bound).toSeq)
  @transient private lazy val contentOf = UnsafeProjection.create(content.map(bound).toSeq)
  @transient private lazy val seqOrder = new InterpretedOrdering(seqType.fields.indices.map(i =>
    SortOrder(BoundReference(i, seqType(i).dataType, nullable = true), Ascending)))

  /** The outcome of the last job that wrote this build (`ManyTables.append` sets it): changes read, keys
   *  resolved, and whether the table was left to be built alone. */
  @volatile var outcome: Outcome = Outcome(0, 0, alone = false)

  /** All of one table's changes (one task reads them all), resolved to its rows. */
  def resolve(rows: Iterator[InternalRow]): (Outcome, Iterator[InternalRow]) = {
    val byKey = mutable.LinkedHashMap[UnsafeRow, mutable.ArrayBuffer[InternalRow]]()
    var read = 0L
    for (row <- rows) {
      read += 1
      val change = row.copy()
      if (change.getUTF8String(op) == Truncate || unusable(change)) return (Outcome(read, 0, alone = true), Iterator.empty)
      byKey.getOrElseUpdate(keyOf(change).copy(), mutable.ArrayBuffer()) += change
    }
    val resolved = mutable.ArrayBuffer[InternalRow]()
    for (changes <- byKey.valuesIterator) {
      val ordered = changes.sortWith((a, b) => order(a, b) < 0).toIndexedSeq
      if (tied(ordered)) return (Outcome(read, 0, alone = true), Iterator.empty)
      if (!(hardDeletes && ordered.last.getBoolean(deleted))) resolved += newest(ordered)
    }
    (Outcome(read, byKey.size, alone = false), resolved.iterator)
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

  /** The row of a key from its changes in `_seq` order. */
  private def newest(ordered: IndexedSeq[InternalRow]): InternalRow = {
    val last = ordered.last
    def placeholders(change: InternalRow): Boolean =
      !change.isNullAt(unchanged) && change.getArray(unchanged).numElements > 0
    def knowsAll(change: InternalRow): Boolean = !change.getBoolean(deleted) && !placeholders(change)
    def listed(change: InternalRow): Set[String] =
      if (change.isNullAt(unchanged)) Set.empty
      else change.getArray(unchanged).toArray[UTF8String](StringType).map(_.toString).toSet
    val complete = knowsAll(last)
    val whole = ordered.findLast(knowsAll)
    val newer = ordered.filter(c => !c.getBoolean(deleted) && placeholders(c) && whole.forall(order(c, _) > 0))
      .map(c => c -> listed(c))
    def source(column: String): Option[InternalRow] =
      if (complete || !knowing.contains(column)) Some(last)
      else newer.findLast { case (_, missing) => !missing.contains(column) }.map(_._1).orElse(whole).orElse(Some(last))
    val unknown: Seq[String] = if (complete || whole.isDefined) Nil
      else data.filterNot(c => newer.exists { case (_, missing) => !missing.contains(c) }).toSeq
    val absent = schema.fieldNames.filterNot(c => at.contains(c) || c == Unchanged)
    val values = schema.fields.map { field =>
      if (field.name == Unchanged) new GenericArrayData((unknown ++ absent).map(UTF8String.fromString).toArray)
      else at.get(field.name).flatMap(i => source(field.name).map(_.get(i, field.dataType))).orNull
    }
    new GenericInternalRow(values.asInstanceOf[Array[Any]])
  }

  private def bound(i: Int): BoundReference = BoundReference(i, input(i).dataType, nullable = true)
}

object FirstBuild {
  val Unchanged = "_unchanged"
  /** The deletion columns a key's newest change gives (`cdc.merge.TOMBSTONE`). */
  val Tombstone: Set[String] = Set("_op", "_seq", "_source_ts", "_source", "_is_deleted", "_deleted_at", "_merged_at")
  private val Truncate = UTF8String.fromString("t")

  /** A table's changes read, keys resolved, and whether it is left to be built alone. */
  final case class Outcome(changes: Long, keys: Long, alone: Boolean)

  /** A lake column the pipeline owns (`cdc.columns.is_pipeline_column`): one `_`, then not another. */
  def isPipelineColumn(name: String): Boolean = name.startsWith("_") && !name.startsWith("__")
}
