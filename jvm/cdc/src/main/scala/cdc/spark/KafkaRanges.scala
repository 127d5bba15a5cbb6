package cdc.spark

import java.sql.Timestamp
import java.time.Duration
import java.util.UUID

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import org.apache.kafka.clients.consumer.{ConsumerConfig, ConsumerRecord, KafkaConsumer}
import org.apache.kafka.common.TopicPartition
import org.apache.kafka.common.serialization.ByteArrayDeserializer
import org.apache.spark.TaskContext
import org.apache.spark.sql.{DataFrame, Row}
import org.apache.spark.sql.classic.SparkSession
import org.apache.spark.sql.types._

/** Many Kafka partitions' offset ranges read by a few tasks, one consumer a task, in the rows Spark's Kafka source
 *  gives (its columns, and `headers` when asked).
 *
 *  Why: Spark's source reads each partition with a consumer of its own, which an executor keeps between reads up
 *  to `spark.kafka.consumer.cache.capacity`. A batch of a whole database (500 topics of 4 partitions) made 2,000
 *  consumers, each a connection, a metadata request and a first fetch, and over the cache's capacity it made them
 *  again the next batch (docs/benchmarks.md). One consumer assigned a task's partitions fetches them together.
 *
 *  A range starting at -2 starts at the partition's earliest offset; one whose start is no longer in the log
 *  starts at the earliest too (as Spark's source with `failOnDataLoss=false`). */
object KafkaRanges {
  private val Earliest = -2L
  private val Headers = ArrayType(StructType(Seq(StructField("key", StringType), StructField("value", BinaryType))))
  private val Columns = StructType(Seq(StructField("key", BinaryType), StructField("value", BinaryType),
    StructField("topic", StringType), StructField("partition", IntegerType), StructField("offset", LongType),
    StructField("timestamp", TimestampType), StructField("timestampType", IntegerType)))

  final case class Range(topic: String, partition: Int, start: Long, end: Long) {
    def size: Long = end - math.max(start, 0L)
  }

  /** The records of topic `topics(i)`, partition `partitions(i)`, from offset `starts(i)` (-2: the earliest) to
   *  `ends(i)` (exclusive), read by `tasks` tasks (fewer when there are fewer ranges) with a consumer configured by
   *  `config` (Kafka client settings; deserializers, commits and offset resets are this reader's). A partition
   *  that yields nothing for `timeoutMs` fails its task, naming it. */
  def read(spark: SparkSession, topics: java.util.List[String], partitions: java.util.List[Number],
           starts: java.util.List[Number], ends: java.util.List[Number],
           config: java.util.Map[String, String], headers: Boolean, tasks: Int, timeoutMs: Long): DataFrame = {
    val ranges = topics.asScala.indices
      .map(i => Range(topics.get(i), partitions.get(i).intValue, starts.get(i).longValue, ends.get(i).longValue))
      .filter(r => r.start != r.end)
    val groups = balanced(ranges, math.max(1, tasks))
    val settings = config.asScala.toMap
    val rows = spark.sparkContext.parallelize(groups, math.max(1, groups.size))
      .mapPartitions(_.flatMap(group => consumed(group, settings, headers, timeoutMs)))
    spark.createDataFrame(rows, if (headers) Columns.add("headers", Headers) else Columns)
  }

  /** The ranges in at most `tasks` groups of about as many records: the largest first, each to the lightest. */
  private def balanced(ranges: Seq[Range], tasks: Int): Seq[Seq[Range]] = {
    val groups = Array.fill(math.min(tasks, ranges.size))(mutable.ArrayBuffer[Range]())
    val loads = Array.fill(groups.length)(0L)
    ranges.sortBy(-_.size).foreach { range =>
      val lightest = loads.indices.minBy(loads(_))
      groups(lightest) += range
      loads(lightest) += math.max(range.size, 1L)
    }
    groups.map(_.toSeq).toSeq
  }

  private def consumed(ranges: Seq[Range], config: Map[String, String], headers: Boolean,
                       timeoutMs: Long): Iterator[Row] = {
    val settings: Map[String, AnyRef] = config ++ Map(
      ConsumerConfig.CLIENT_ID_CONFIG -> s"pipeline-ranges-${UUID.randomUUID}",
      ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG -> "false",
      ConsumerConfig.AUTO_OFFSET_RESET_CONFIG -> "earliest")
    val consumer = new KafkaConsumer[Array[Byte], Array[Byte]](settings.asJava, new ByteArrayDeserializer,
      new ByteArrayDeserializer)
    TaskContext.get.addTaskCompletionListener[Unit](_ => consumer.close())
    val ends = ranges.map(r => new TopicPartition(r.topic, r.partition) -> r.end).toMap
    consumer.assign(ends.keys.asJavaCollection)
    ranges.foreach { r =>
      val partition = new TopicPartition(r.topic, r.partition)
      if (r.start == Earliest) consumer.seekToBeginning(Seq(partition).asJava) else consumer.seek(partition, r.start)
    }
    new Iterator[Row] {
      private val open = mutable.Set.from(ends.keys)
      private var polled: Iterator[Row] = Iterator.empty
      private var progressed = System.nanoTime

      def hasNext: Boolean = {
        while (!polled.hasNext && open.nonEmpty) polled = poll()
        polled.hasNext
      }

      def next(): Row = { hasNext; polled.next() }

      /** The next records up to their partitions' ends; a partition read to its end is paused. */
      private def poll(): Iterator[Row] = {
        val done = open.filter(p => consumer.position(p) >= ends(p))
        if (done.nonEmpty) { consumer.pause(done.asJava); open --= done; progressed = System.nanoTime }
        if (open.isEmpty) return Iterator.empty
        val records = consumer.poll(Duration.ofMillis(math.min(timeoutMs, 1000L))).asScala
          .filter(r => r.offset < ends(new TopicPartition(r.topic, r.partition))).map(row(_, headers)).toSeq
        if (records.nonEmpty) progressed = System.nanoTime
        else if (System.nanoTime - progressed > timeoutMs * 1000000L) {
          val waiting = open.toSeq.sortBy(_.toString).take(5).map(p => s"$p at ${consumer.position(p)} of ${ends(p)}")
          throw new IllegalStateException(s"Kafka gave no record for $timeoutMs ms while ${open.size} partition(s) " +
            s"were not read to the batch's end (${waiting.mkString(", ")}): is the broker reachable from the " +
            "executors, and were the records deleted by retention?")
        }
        records.iterator
      }
    }
  }

  /** A record as Spark's Kafka source gives it; `headers` null when it has none, as there. */
  private def row(record: ConsumerRecord[Array[Byte], Array[Byte]], headers: Boolean): Row = {
    val columns = Seq[Any](record.key, record.value, record.topic, record.partition, record.offset,
      new Timestamp(record.timestamp), record.timestampType.id)
    if (!headers) Row.fromSeq(columns)
    else {
      val listed = record.headers.toArray.map(h => Row(h.key, h.value)).toSeq
      Row.fromSeq(columns :+ (if (listed.isEmpty) null else listed))
    }
  }
}
