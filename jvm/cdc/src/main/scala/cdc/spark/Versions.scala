package cdc.spark

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import org.apache.spark.sql.{Encoders, Row}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Ascending, BoundReference, GenericInternalRow, InterpretedOrdering,
  SortOrder}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.sql.classic.Dataset
import org.apache.spark.sql.execution.LogicalRDD
import org.apache.spark.sql.types.{ArrayType, BooleanType, StringType, StructField, StructType}
import org.apache.spark.unsafe.types.UTF8String
import org.apache.spark.util.LongAccumulator

import Resolution.{isPipelineColumn, Unchanged}

/** An SCD2 table's versions of each key (`cdc/scd2.py`'s rules; the rows of its `versions_sql`), made in one pass
 *  over the key's rows: `sorted` holds `version_rows_sql`'s rows (each stored version standing for its first and
 *  newest change, `_from_base` 1, and the new changes, 0), each key's together, in `_seq` order and, at one `_seq`,
 *  stored before new (the caller's shuffle and sort). The rows: `sorted`'s change columns, `_unchanged`, then the
 *  version columns; `tracked`: the columns whose change opens a version.
 *
 *  With a `failure` (a first build's: no check ran before it), a change that fails a check of an SCD2 table (a
 *  null key, `_seq.source_major` or `_source_ts`, two different changes of a key at one `_seq`) fails the task
 *  with it, so nothing is committed; null: the changes were checked. `read` counts the changes read.
 *
 *  Why not `versions_sql`: its windows and aggregation are five passes over the rows, each copying every column,
 *  the largest part of an SCD2 fold after the reads (docs/benchmarks.md). Here a row costs a copy, its values
 *  carried from the rows before it, and a comparison of its tracked values with the row before it. The SQL stays
 *  the definition (the views of a pending mirror read it); a test holds the two to the same rows. */
final class Versions(sorted: Dataset[Row], keys: java.util.List[String], tracked: java.util.List[String],
                     failure: String) {
  val read: LongAccumulator = sorted.sparkSession.sparkContext.longAccumulator("versions: changes read")

  val rows: Dataset[Row] = {
    val rules = new Versions.Rules(sorted.schema, keys.asScala.toSeq, tracked.asScala.toSeq, Option(failure))
    val read = this.read  // the locals are what the tasks take
    val made = sorted.queryExecution.toRdd.mapPartitions(rows => rules.versions(rows.buffered, read))
    val session = sorted.sparkSession
    new Dataset[Row](session, LogicalRDD(DataTypeUtils.toAttributes(rules.schema), made)(session),
      Encoders.row(rules.schema))
  }
}

object Versions {
  val FromBase = "_from_base"

  /** A version being made from its rows: its first row (whose `_seq` is its `_seq_from`), the newest (which gives
   *  its values), its source time, and which source columns some row of it knew. */
  private final class Version(val first: InternalRow, val seqFrom: Any, data: Int) {
    var newest: InternalRow = _
    var values: Array[Any] = _  // the newest row's, each source column carried from the row that knew it
    var validFrom: Any = _
    val knew: Array[Boolean] = new Array[Boolean](data)
  }

  private final class Rules(input: StructType, keys: Seq[String], tracked: Seq[String], failure: Option[String])
      extends Serializable {
    private val names = input.fieldNames
    /** The change columns, in order: all but `_unchanged` and `_from_base`; a row's values are in this order. */
    private val columns: Array[Int] = names.indices.filterNot(i => names(i) == Unchanged || names(i) == FromBase).toArray
    private val position: Map[String, Int] = columns.map(names).zipWithIndex.toMap
    /** The source's columns but the key (positions): a delete and a TOAST placeholder leave them to earlier rows. */
    private val data: Array[Int] = columns.indices.filter { p =>
      val name = names(columns(p))
      !isPipelineColumn(name) && !keys.contains(name)
    }.toArray
    private val signature: Array[Int] = tracked.map(position).toArray
    private val (seq, sourceTs, deleted) = (position("_seq"), position("_source_ts"), position("_is_deleted"))
    private val deletedAt: Option[Int] = position.get("_deleted_at")
    private val unchanged = names.indexOf(Unchanged)
    private val byKey = new KeyOrder(input, keys)
    private val checks = failure.map(_ => new Resolution(input, keys, Nil, deletesKnowValues = false))  // its checks

    val schema: StructType = {
      val (time, order) = (input("_source_ts").dataType, input("_seq").dataType)
      StructType(columns.map(input(_)).toSeq ++ Seq(StructField(Unchanged, ArrayType(StringType)),
        StructField("_valid_from", time), StructField("_valid_to", time), StructField("_seq_from", order),
        StructField("_seq_to", order), StructField("_is_current", BooleanType)))
    }

    @transient private lazy val signatureOrder = {
      val types = BooleanType +: signature.map(p => input(columns(p)).dataType).toSeq
      new InterpretedOrdering(types.indices.map(i => SortOrder(BoundReference(i, types(i), nullable = true), Ascending)))
    }

    def versions(rows: BufferedIterator[InternalRow], read: LongAccumulator): Iterator[InternalRow] =
      Iterator.continually(if (rows.hasNext) ofKey(rows, read) else null).takeWhile(_ != null).flatten

    /** The versions of the next key's rows. Each row is copied: its values outlive the next row's read. */
    private def ofKey(rows: BufferedIterator[InternalRow], read: LongAccumulator): Seq[InternalRow] = {
      val known = new Array[Any](data.length)  // each source column's newest known value, while `isKnown`
      val isKnown = new Array[Boolean](data.length)
      val made = mutable.ArrayBuffer[Version]()
      var before: InternalRow = null  // the previous row's signature
      val held = mutable.ArrayBuffer[InternalRow]()  // kept for the tie check alone
      var count = 0L
      var more = true
      while (more) {
        val row = rows.next().copy()
        for (message <- failure) {  // before any comparison of its `_seq`
          if (failsCheck(row)) throw new IllegalStateException(message)
          held += row
        }
        count += 1
        val values = columns.map(i => row.get(i, input(i).dataType))
        val knows = knowsOf(row, values)
        for (d <- data.indices) {
          if (knows(d)) { known(d) = values(data(d)); isKnown(d) = true }
          else if (isKnown(d)) values(data(d)) = known(d)
        }
        val own = new GenericInternalRow(values(deleted) +: signature.map(values))
        if (before == null || signatureOrder.compare(own, before) != 0) made += new Version(row, values(seq), data.length)
        before = own
        val version = made.last
        if (version.newest == null || byKey.order(row, version.newest) > 0) {
          version.newest = row; version.values = values
        }
        if (byKey.order(row, version.first) == 0) version.validFrom = values(sourceTs)  // at one `_seq`, new wins
        for (d <- data.indices if knows(d)) version.knew(d) = true
        more = rows.hasNext && byKey.sameKey(row, rows.head)
      }
      for (message <- failure; rules <- checks if rules.tied(held.toIndexedSeq)) throw new IllegalStateException(message)
      read.add(count)
      made.indices.map(v => written(made(v), made.lift(v + 1)))
    }

    private def failsCheck(row: InternalRow): Boolean =
      checks.exists(_.unusable(row)) || row.isNullAt(columns(sourceTs))

    /** Which source columns a row knows: all but a delete's, and but its TOAST placeholders (`_unchanged`). */
    private def knowsOf(row: InternalRow, values: Array[Any]): Array[Boolean] = {
      if (values(deleted).asInstanceOf[Boolean]) return new Array[Boolean](data.length)
      val placeholders =
        if (row.isNullAt(unchanged)) Set.empty[String]
        else row.getArray(unchanged).toArray[UTF8String](StringType).map(_.toString).toSet
      data.map(p => !placeholders.contains(names(columns(p))))
    }

    /** A version's row, `next` the key's version after it (none: it is current). */
    private def written(version: Version, next: Option[Version]): InternalRow = {
      val values = version.values.clone()
      for (p <- deletedAt) values(p) = if (values(deleted).asInstanceOf[Boolean]) version.validFrom else null
      val unknown = data.indices.filterNot(version.knew).map(d => UTF8String.fromString(names(columns(data(d)))))
      new GenericInternalRow(values ++ Array[Any](new GenericArrayData(unknown.toArray[Any]), version.validFrom,
        next.map(_.validFrom).orNull, version.seqFrom, next.map(_.seqFrom).orNull, next.isEmpty))
    }
  }
}
