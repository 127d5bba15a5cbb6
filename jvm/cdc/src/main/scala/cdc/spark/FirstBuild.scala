package cdc.spark

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import org.apache.spark.sql.{Encoders, Row}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.sql.classic.Dataset
import org.apache.spark.sql.execution.LogicalRDD
import org.apache.spark.sql.types.StructType
import org.apache.spark.unsafe.types.UTF8String
import org.apache.spark.util.LongAccumulator

/** A first build's rows (`cdc/build.py`): `sorted`'s changes, each key's together and in `_seq` order (the
 *  caller's shuffle and sort), checked and resolved to one row a key by `Resolution`'s rules as they stream past,
 *  in `sorted`'s columns, `_unchanged` last and never null.
 *
 *  Why not a Spark window: the window that did this kept, for every change, a running copy of the newest complete
 *  change's columns and the list of newer partial ones, and a hash of its columns for the tie check, though only
 *  a key's newest change is written: it cost about a third more than the naive rebuild's whole job
 *  (docs/benchmarks.md). Here a change costs a copy and a comparison of its key with the next change's.
 *
 *  A change that fails a check (a null key but a truncate's, a null `_seq.source_major`, two different changes of
 *  a key at one `_seq`) fails the task with `failure`, so nothing is committed. A truncate (no key) writes no row
 *  (`cdc.merge.truncated` applies them). `read` counts the changes the rows came from. */
final class FirstBuild(sorted: Dataset[Row], keys: java.util.List[String], tombstone: java.util.List[String],
                       deletesKnowValues: Boolean, failure: String) {
  val read: LongAccumulator = sorted.sparkSession.sparkContext.longAccumulator("first build: changes read")

  val rows: Dataset[Row] = {
    val schema = sorted.schema  // the locals are what the tasks take
    val rules = new Resolution(schema, keys.asScala.toSeq, tombstone.asScala.toSeq, deletesKnowValues)
    val (read, failure) = (this.read, this.failure)
    val made = sorted.queryExecution.toRdd.mapPartitions(changes =>
      FirstBuild.rowPerKey(schema, rules, changes.buffered, read, failure))
    val session = sorted.sparkSession
    new Dataset[Row](session, LogicalRDD(DataTypeUtils.toAttributes(schema), made)(session), Encoders.row(schema))
  }
}

object FirstBuild {
  private def rowPerKey(schema: StructType, rules: Resolution, changes: BufferedIterator[InternalRow],
                        read: LongAccumulator, failure: String): Iterator[InternalRow] = new Iterator[InternalRow] {
    private val unchanged = schema.fieldIndex(Resolution.Unchanged)
    private var ahead: InternalRow = advance()

    override def hasNext: Boolean = ahead != null

    override def next(): InternalRow = {
      val row = ahead
      ahead = advance()
      row
    }

    /** The next key's row, or null once every change is read. A change is copied: the next one is read before
     *  its row goes on. */
    private def advance(): InternalRow = {
      while (changes.hasNext) {
        val first = changes.next().copy()
        var ordered: mutable.ArrayBuffer[InternalRow] = null  // made for a key with more than one change only
        while (changes.hasNext && rules.sameKey(first, changes.head)) {
          if (ordered == null) ordered = mutable.ArrayBuffer(first)
          ordered += changes.next().copy()
        }
        read.add(if (ordered == null) 1 else ordered.size)
        val row = if (ordered == null) alone(first) else resolved(ordered.toIndexedSeq)
        if (row != null) return row
      }
      null
    }

    /** A key's only change, as `resolved` takes it, without its collections: an initial load's every row. */
    private def alone(change: InternalRow): InternalRow = {
      if (failsCheck(change)) throw new IllegalStateException(failure)
      if (rules.keyIsNull(change)) null  // a truncate
      else if (rules.knowsAll(change)) change
      else resolved(IndexedSeq(change))
    }

    /** A change without a source position, or without a key but a truncate's. */
    private def failsCheck(change: InternalRow): Boolean =
      rules.positionIsNull(change) || (rules.keyIsNull(change) && !rules.isTruncate(change))

    private def resolved(ordered: IndexedSeq[InternalRow]): InternalRow = {
      if (ordered.exists(failsCheck) || rules.tied(ordered)) throw new IllegalStateException(failure)
      if (ordered.forall(rules.keyIsNull)) return null  // truncates
      val row = rules.newest(ordered)
      if (row.complete) return row.last
      val values = Array.tabulate[Any](schema.size) { i =>
        if (i == unchanged) new GenericArrayData(row.unknown.map(UTF8String.fromString).toArray[Any])
        else row.source(schema(i).name).get(i, schema(i).dataType)
      }
      new GenericInternalRow(values)
    }
  }
}
