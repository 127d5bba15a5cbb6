package cdc.spark

import java.time.ZoneId

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.iceberg.{DataFile, Table}
import org.apache.iceberg.spark.SparkSchemaUtil
import org.apache.iceberg.spark.source.SerializableTableWithSize
import org.apache.spark.HashPartitioner
import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.catalyst.util.ArrayData
import org.apache.spark.sql.classic.Dataset
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/** A Kafka batch's quiet topics of Debezium envelopes decoded by one plan and appended to their tables by one job.
 *
 *  Why: a batch of a whole database is mostly quiet topics, and each one decoded by a plan of its own cost its
 *  table a plan built over py4j, analysed and compiled on the driver: about a second a table, against the issue's
 *  50 ms (docs/benchmarks.md). Here every quiet topic's records come from one read, classified by one plan
 *  (`rows`: the columns `Landing._classified` gives and `body_offset`), read by a few tasks, then hashed by topic
 *  so a topic's records meet in one task and sorted by it so a task has one table open at a time. Each record is decoded with its topic's
 *  envelope programs (`DebeziumEnvelope.Decoder`: the native decoder's, so both paths give the same rows), laid out
 *  in its table's columns and written by `TableFiles`; each table is then committed once (`ManyTables.commit`).
 *
 *  The change record is `cdc/native.py`'s `normalized` one, stamped (`changeRecord`): a table must hold those
 *  columns in those types (the caller checks, `changeRecord` gives them), columns it has beyond them are null.
 *  A record that is not a framed envelope of one of its topic's writers, uncompressed, is not landed here but
 *  counted (`rest`, or `tombstones`), as are envelopes that do not decode (`invalid`) and those that decode but
 *  must not land (`refused`: a key column holding Debezium's TOAST placeholder, a decimal that does not fit):
 *  the caller lands or dead-letters those by its per-topic path. Of the rest, the records the input marks
 *  `stray` (sure to be dead letters) are counted again as `stray`, and the uncompressed envelopes of an id of
 *  no writer as `unlisted`, their ids given: when that is all the rest, the caller dead-letters it without
 *  planning it. */
object QuietTopics {
  private val Counted = Seq("rows", "tombstones", "rest", "invalid", "refused", "written", "stray", "unlisted")
  private val Rows = 0; private val Tombstones = 1; private val Rest = 2
  private val Invalid = 3; private val Refused = 4; private val Written = 5; private val Stray = 6
  private val Unlisted = 7
  private val Debezium = UTF8String.fromString("debezium")

  private val Sequence = StructType(Seq(StructField("source_major", LongType), StructField("source_minor", LongType),
    StructField("transport_partition", IntegerType), StructField("transport_offset", LongType)))
  private val Source = StructType(Seq("connector", "format", "db", "schema", "table", "tx_id")
    .map(StructField(_, StringType)) :+ StructField("snapshot", BooleanType))
  private val Transport = StructType(Seq(StructField("topic", StringType), StructField("partition", IntegerType),
    StructField("offset", LongType), StructField("timestamp", TimestampType), StructField("file", StringType)))
  /** The change record's own columns, after the row's. */
  private val Own = Seq(StructField("_op", StringType), StructField("_is_deleted", BooleanType),
    StructField("_source_ts", TimestampType), StructField("_seq", Sequence), StructField("_source", Source),
    StructField("_transport", Transport), StructField("_schema_id", StringType),
    StructField("_unchanged", ArrayType(StringType)), StructField("_ingested_at", TimestampType),
    StructField("_batch_id", LongType))
  /** The input's columns, by name. */
  private val Input = Seq("value", "topic", "partition", "offset", "timestamp", "schema_id", "compressed", "kind",
    "body_offset", "stray")

  /** The change record of a topic whose envelopes `config` decodes (`DebeziumEnvelope.Config`), as a Spark struct's
   *  JSON: the row columns and the change record's own, stamped. */
  def schema(config: String): String = changeRecord(DebeziumEnvelope.Config(config)).json

  private def changeRecord(config: DebeziumEnvelope.Config): StructType =
    StructType(config.dataType.fields.take(config.columns.length).map(_.copy(nullable = true)) ++ Own)

  /** Decodes and appends the topics' records of `rows`: topic `names(i)` by envelope config `configs(i)`, key
   *  columns `keys(i)`, into `tables(i)` (null: the table holds the batch already; its records are only counted).
   *  `stamps` give `_ingested_at` (micros) and `_batch_id`; `framed` and `tombstone` are the `kind` column's values
   *  of a registry-framed record and of a tombstone. One Spark job of `tasks` tasks, then the commits, `threads` at a
   *  time, each with the snapshot properties `snapshot`. Returns, as JSON, the seconds of the job and of the
   *  commits and per topic, in `names`' order, its counts, the writer ids its framed records carried and the
   *  unlisted ones: `{"job_s": s, "commits_s": s, "topics": [{"rows": n, ..., "ids": [...],
   *  "unlisted_ids": [...]}, ...]}`. */
  def append(rows: Dataset[Row], names: java.util.List[String], configs: java.util.List[String],
             keys: java.util.List[java.util.List[String]], tables: java.util.List[Table],
             stamps: java.util.Map[String, java.lang.Number], snapshot: java.util.Map[String, String],
             framed: String, tombstone: String, tasks: Int, threads: Int): String = {
    require(Seq(configs.size, keys.size, tables.size).forall(_ == names.size) && !names.isEmpty,
      "a config, a key and a table a topic, at least one topic")
    val context = rows.sparkSession.sparkContext
    val count = names.size
    val configText = configs.asScala.toArray
    val keySets = keys.asScala.map(_.asScala.map(UTF8String.fromString).toSet).toArray
    val layouts = (0 until count).map { i =>
      Option(tables.get(i)).map(t => layout(changeRecord(DebeziumEnvelope.Config(configText(i))), t)).orNull
    }.toArray
    val shipped = context.broadcast(tables.asScala.map(t => Option(t).map(SerializableTableWithSize.copyOf).orNull)
      .toArray)
    val topics = names.asScala.map(UTF8String.fromString).toArray
    val stamped = (stamps.get("_ingested_at").longValue, stamps.get("_batch_id").longValue)
    val kinds = (UTF8String.fromString(framed), UTF8String.fromString(tombstone))
    val zone = SQLConf.get.sessionLocalTimeZone
    val index = topics.zipWithIndex.toMap
    val parts = math.max(1, tasks)
    // A task a Kafka partition cost each topic several tasks of fixed cost (launch, the source's projections,
    // a consumer's seek), so the read is coalesced first; then each topic's records are brought to one task.
    val byTopic = rows.select(Input.map(col): _*).queryExecution.toRdd.coalesce(parts)
      .map(record => (index(record.getUTF8String(1)), record.copy())) // the scan reuses its row
      .repartitionAndSortWithinPartitions(new HashPartitioner(parts))
    val started = System.nanoTime
    val found = try byTopic.mapPartitionsWithIndex { (part, records) =>
      val task = new Task(topics, configText, keySets, layouts, shipped.value, stamped, kinds, ZoneId.of(zone), part)
      records.foreach { case (topic, record) => task.add(topic, record) }
      Iterator(task.finish())
    }.collect() finally shipped.destroy()
    val files = found.flatMap(_.files).groupMap(_._1)(_._2).view.mapValues(_.flatten.toSeq).toMap
    val written = tables.asScala.zipWithIndex.filter(_._1 != null)
    val job = System.nanoTime
    val committed = ManyTables.commit(written.map(_._1).toSeq,
      written.zipWithIndex.flatMap { case ((_, i), w) => files.get(i).map(w -> _) }.toMap,
      Seq.fill(written.size)(snapshot), threads)
    val counts = Array.ofDim[Long](count, Counted.size)
    val ids = Array.fill(count)(mutable.SortedSet[String]())
    val unlisted = Array.fill(count)(mutable.SortedSet[String]())
    found.foreach { result =>
      for (i <- 0 until count; c <- Counted.indices) counts(i)(c) += result.counts(i)(c)
      for (i <- 0 until count) { ids(i) ++= result.ids(i); unlisted(i) ++= result.unlisted(i) }
    }
    written.zip(committed).foreach { case ((_, i), n) =>
      require(n == counts(i)(Written), s"${names.get(i)}: committed $n rows of ${counts(i)(Written)} written")
    }
    val mapper = new ObjectMapper()
    val out = mapper.createObjectNode()
    out.put("job_s", (job - started) / 1e9)
    out.put("commits_s", (System.nanoTime - job) / 1e9)
    val topicsOut = out.putArray("topics")
    for (i <- 0 until count) {
      val node = topicsOut.addObject()
      Counted.indices.foreach(c => node.put(Counted(c), counts(i)(c)))
      val list = node.putArray("ids")
      ids(i).foreach(list.add)
      val unlistedList = node.putArray("unlisted_ids")
      unlisted(i).foreach(unlistedList.add)
    }
    mapper.writeValueAsString(out)
  }

  /** Per column of `table`, the change record's column it takes (by name), or -1: none, it stays null. */
  private def layout(record: StructType, table: Table): Array[Int] =
    SparkSchemaUtil.convert(table.schema).fieldNames.map(name => record.fieldNames.indexOf(name))

  private final case class Found(files: Seq[(Int, Array[DataFile])], counts: Array[Array[Long]],
                                 ids: Array[Set[String]], unlisted: Array[Set[String]])

  /** One task's records, each topic's together (sorted by topic): one table's files open at a time. */
  private final class Task(topics: Array[UTF8String], configs: Array[String], keys: Array[Set[UTF8String]],
                           layouts: Array[Array[Int]], tables: Array[Table], stamps: (Long, Long),
                           kinds: (UTF8String, UTF8String), zone: ZoneId, part: Int) {
    private val counts = Array.ofDim[Long](topics.length, Counted.size)
    private val ids = Array.fill(topics.length)(mutable.Set[String]())
    private val unlisted = Array.fill(topics.length)(mutable.Set[String]())
    private val files = mutable.ArrayBuffer[(Int, Array[DataFile])]()
    private var current = -1
    private var decoder: DebeziumEnvelope.Decoder = _
    private var width = 0
    private var open: TableFiles = _

    def add(topic: Int, record: InternalRow): Unit = {
      if (topic != current) start(topic)
      val n = counts(topic)
      n(Rows) += 1
      val kind = record.getUTF8String(7)
      val id = if (record.isNullAt(5)) null else record.getUTF8String(5)
      if (kind == kinds._2) { n(Tombstones) += 1; return }
      if (kind != kinds._1 || id == null || !decoder.writes(id) || record.getBoolean(6)) {
        n(Rest) += 1
        if (record.getBoolean(9)) n(Stray) += 1
        else if (kind == kinds._1 && id != null && !record.getBoolean(6)) {
          n(Unlisted) += 1
          unlisted(topic) += id.toString
        }
        return
      }
      ids(topic) += id.toString
      val decoded = decoder.decode(record.getBinary(0), id, record.getInt(8)) // its strings lie in its own copy
      if (decoded == null) { n(Invalid) += 1; return }
      if (refused(decoded, keys(topic))) { n(Refused) += 1; return }
      if (open != null) {
        open.write(laidOut(decoded, record, id.clone(), layouts(topic))) // the record's buffer is reused
        n(Written) += 1
      }
    }

    def finish(): Found = {
      close()
      Found(files.toSeq, counts, ids.map(_.toSet), unlisted.map(_.toSet))
    }

    private def start(topic: Int): Unit = {
      close()
      current = topic
      val config = DebeziumEnvelope.Config(configs(topic))
      decoder = new DebeziumEnvelope.Decoder(config, zone)
      width = config.columns.length
      open = Option(tables(topic)).map(new TableFiles(_, part)).orNull
    }

    private def close(): Unit = if (open != null) {
      files += current -> open.close()
      open = null
    }

    /** A key column that held the TOAST placeholder (`_unchanged` names it), or a decimal that overflowed. */
    private def refused(decoded: InternalRow, keys: Set[UTF8String]): Boolean = {
      val unchanged = decoded.getArray(width + 11)
      (0 until unchanged.numElements).exists(i => keys.contains(unchanged.getUTF8String(i))) ||
        decoded.getArray(width + 12).numElements > 0
    }

    /** The change record (`changeRecord`'s columns) of a decoded envelope, in its table's columns (`layout`). */
    private def laidOut(decoded: InternalRow, record: InternalRow, id: UTF8String, layout: Array[Int]): InternalRow = {
      val n = width
      def at(i: Int): Any = if (decoded.isNullAt(i)) null else decoded.get(i, null)
      val partition = record.getInt(2); val offset = record.getLong(3)
      val change = new Array[Any](n + Own.length)
      var i = 0
      while (i < n) { change(i) = at(i); i += 1 }
      change(n) = at(n) // _op
      change(n + 1) = at(n + 1) // _is_deleted
      change(n + 2) = at(n + 2) // _source_ts
      change(n + 3) = new GenericInternalRow(Array[Any](at(n + 3), at(n + 4), partition, offset))
      change(n + 4) = new GenericInternalRow(Array[Any](at(n + 5), Debezium, at(n + 6), at(n + 7), at(n + 8),
        at(n + 9), at(n + 10)))
      change(n + 5) = new GenericInternalRow(Array[Any](topics(current), partition, offset,
        if (record.isNullAt(4)) null else record.getLong(4), null))
      change(n + 6) = id
      change(n + 7) = decoded.getArray(n + 11): ArrayData
      change(n + 8) = stamps._1
      change(n + 9) = stamps._2
      new GenericInternalRow(layout.map(c => if (c < 0) null else change(c)))
    }
  }
}
