package cdc.spark

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{BoundReference, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.{StringType, StructType}
import org.apache.spark.unsafe.types.UTF8String

/** How a key's changes, in `_seq` order, make its row of a current-state mirror (`cdc/build.py`'s rules), and the
 *  checks they must pass first (`cdc/validate.py`): shared by `MirrorRows` (a small mirror's batch, in one task)
 *  and `FirstBuild` (a first build, streamed through sorted rows).
 *
 *  `changes`: the rows' columns (`cdc.merge.prepared`'s); `tombstone`: the columns a key's newest change always
 *  gives (`cdc.merge.TOMBSTONE`); `deletesKnowValues`: the merge layout's rule (a delete's own values stand), else
 *  the pending layout's (a soft delete keeps the last values).
 *
 *  The row: a key's newest change by `_seq` gives the key and the `tombstone` columns and, when it knows every
 *  column (not a soft delete where deletes know none, not a TOAST placeholder), all of them; else each column
 *  comes from the newest change newer than the last complete one that knows it, else the last complete change's,
 *  else the newest change's own; the columns no change knew are listed in `_unchanged`. */
final class Resolution(changes: StructType, keys: Seq[String], tombstone: Seq[String], deletesKnowValues: Boolean)
    extends Serializable {
  import Resolution._

  private val names: Array[String] = changes.fieldNames
  private val at: Map[String, Int] = names.zipWithIndex.toMap
  private val byKey = new KeyOrder(changes, keys)
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

  @transient private lazy val contentOf = UnsafeProjection.create(content.map(bound).toSeq)

  // A change's key, and changes' keys and `_seq` order compared: `KeyOrder`'s.
  def key(change: InternalRow): UnsafeRow = byKey.key(change)
  def sameKey(a: InternalRow, b: InternalRow): Boolean = byKey.sameKey(a, b)
  def order(a: InternalRow, b: InternalRow): Int = byKey.order(a, b)
  def keyIsNull(change: InternalRow): Boolean = byKey.keyIsNull(change)

  def isTruncate(change: InternalRow): Boolean = !change.isNullAt(op) && change.getUTF8String(op) == Truncate

  /** A change without a source position (`_seq.source_major`). */
  def positionIsNull(change: InternalRow): Boolean =
    change.isNullAt(seq) || change.getStruct(seq, seqType.size).isNullAt(major)

  /** A change whose key or source position is null. */
  def unusable(change: InternalRow): Boolean = keyIsNull(change) || positionIsNull(change)

  /** Two different changes of a key at one `_seq` (the same change delivered twice is no tie). */
  def tied(ordered: IndexedSeq[InternalRow]): Boolean =
    ordered.indices.drop(1).exists { i =>
      order(ordered(i - 1), ordered(i)) == 0 && contentOf(ordered(i - 1)).copy() != contentOf(ordered(i))
    }

  def isDeleted(change: InternalRow): Boolean = change.getBoolean(deleted)

  /** The columns a change names in `_unchanged` (its TOAST placeholders). */
  def listed(change: InternalRow): Seq[String] =
    if (change.isNullAt(unchanged)) Nil
    else change.getArray(unchanged).toArray[UTF8String](StringType).map(_.toString).toSeq

  private def placeholders(change: InternalRow): Boolean =
    !change.isNullAt(unchanged) && change.getArray(unchanged).numElements > 0

  private def knowsValues(change: InternalRow): Boolean = deletesKnowValues || !change.getBoolean(deleted)

  /** A change that knows every column: a key whose newest change it is takes it as its row. */
  def knowsAll(change: InternalRow): Boolean = knowsValues(change) && !placeholders(change)

  /** The key's row from its changes in `_seq` order: which change gives each column, and the columns none knew. */
  def newest(ordered: IndexedSeq[InternalRow]): Resolved = {
    val last = ordered.last
    if (knowsAll(last)) return Resolved(last, complete = true, _ => last, Nil)
    val whole = ordered.findLast(knowsAll)
    val newer = ordered.filter(c => knowsValues(c) && placeholders(c) && whole.forall(order(c, _) > 0))
      .map(c => c -> listed(c).toSet)
    def source(column: String): InternalRow =
      if (!knowing.contains(column)) last
      else newer.findLast { case (_, missing) => !missing.contains(column) }.map(_._1).orElse(whole).getOrElse(last)
    val unknown = if (whole.isDefined) Nil
      else data.filterNot(c => newer.exists { case (_, missing) => !missing.contains(c) }).toSeq
    Resolved(last, complete = false, source, unknown)
  }

  private def bound(i: Int): BoundReference = BoundReference(i, changes(i).dataType, nullable = true)
}

object Resolution {
  val Unchanged = "_unchanged"
  private val Truncate = UTF8String.fromString("t")

  /** A key's row: its newest change (`last`), whether that change knows every column (`complete`: it is the
   *  row), the change that gives each column (`source`), and the source's columns no change knew (`unknown`). */
  final case class Resolved(last: InternalRow, complete: Boolean, source: String => InternalRow, unknown: Seq[String])

  /** A lake column the pipeline owns (`cdc.columns.is_pipeline_column`): one `_`, then not another. */
  def isPipelineColumn(name: String): Boolean = name.startsWith("_") && !name.startsWith("__")
}
