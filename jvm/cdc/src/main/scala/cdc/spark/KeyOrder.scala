package cdc.spark

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Ascending, BoundReference, InterpretedOrdering, SortOrder,
  UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.StructType

/** Changes' keys and `_seq` order, compared without copying a change: what the passes over each key's changes in
 *  `_seq` order need (`Resolution`'s users, `Versions`). `changes`: the rows' columns, with `keys` and `_seq`. */
final class KeyOrder(changes: StructType, keys: Seq[String]) extends Serializable {
  private val keyAt: Array[Int] = keys.map(changes.fieldIndex).toArray
  private val seq: Int = changes.fieldIndex("_seq")
  private val seqType: StructType = changes(seq).dataType.asInstanceOf[StructType]

  @transient private lazy val keyOf = UnsafeProjection.create(keyAt.map(bound).toSeq)
  @transient private lazy val otherKeyOf = UnsafeProjection.create(keyAt.map(bound).toSeq)
  @transient private lazy val seqOrder = new InterpretedOrdering(seqType.fields.indices.map(i =>
    SortOrder(BoundReference(i, seqType(i).dataType, nullable = true), Ascending)))

  /** A change's key, in a buffer the next call reuses. */
  def key(change: InternalRow): UnsafeRow = keyOf(change)

  /** Whether changes `a` and `b` have one key (as `key` compares them, byte for byte), with no copy of either. */
  def sameKey(a: InternalRow, b: InternalRow): Boolean = keyOf(a) == otherKeyOf(b)

  /** Changes `a` and `b` in `_seq` order. */
  def order(a: InternalRow, b: InternalRow): Int =
    seqOrder.compare(a.getStruct(seq, seqType.size), b.getStruct(seq, seqType.size))

  /** A change without a key, or part of one (a truncate names none). */
  def keyIsNull(change: InternalRow): Boolean = keyAt.exists(change.isNullAt)

  private def bound(i: Int): BoundReference = BoundReference(i, changes(i).dataType, nullable = true)
}
