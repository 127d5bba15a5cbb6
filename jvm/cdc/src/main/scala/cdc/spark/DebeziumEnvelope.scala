package cdc.spark

import java.time.ZoneId

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.avro.Schema
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Expression, TernaryExpression, TimeZoneAwareExpression}
import org.apache.spark.sql.catalyst.expressions.codegen.{CodegenContext, ExprCode}
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/** `cdc_debezium_envelope(value, schema_id, body_offset, config)`: a registry-framed Debezium envelope read
 *  straight into the change record's columns (`Config.dataType`), null when its id names no writer of `config` or
 *  its body does not decode. `config` is JSON: `reader` (the subject's latest schema, the row columns' source)
 *  and `writers` (schema id -> writer schema). Row columns land in the lake types their Kafka Connect semantic
 *  types mean (`SemanticTypes`); `cdc/native.py` decides which Avro forms come here. Time-zone aware: Debezium's
 *  zoned texts are read as Spark's cast reads them in the session's zone.
 *
 *  Why: the same done with `from_avro` and column expressions took four generated stages and copied the
 *  decoded envelope between two of them; fused into one, the generated method passed the JIT's size limit. */
case class DebeziumEnvelope(value: Expression, schemaId: Expression, bodyOffset: Expression, config: String,
                            timeZoneId: Option[String] = None)
    extends TernaryExpression with TimeZoneAwareExpression {
  override def first: Expression = value
  override def second: Expression = schemaId
  override def third: Expression = bodyOffset
  override def nullable: Boolean = true
  override def withTimeZone(timeZoneId: String): DebeziumEnvelope = copy(timeZoneId = Option(timeZoneId))

  @transient private lazy val parsed = DebeziumEnvelope.Config(config)
  override def dataType: DataType = parsed.dataType

  @transient private lazy val decoder = new DebeziumEnvelope.Decoder(parsed, zoneId)

  override protected def nullSafeEval(bytes: Any, id: Any, offset: Any): Any =
    decoder.decode(bytes.asInstanceOf[Array[Byte]], id.asInstanceOf[UTF8String], offset.asInstanceOf[Int])

  override def doGenCode(ctx: CodegenContext, ev: ExprCode): ExprCode = {
    val self = ctx.addReferenceObj("envelope", this, getClass.getName)
    nullSafeCodeGen(ctx, ev, (bytes, id, offset) =>
      s"""${ev.value} = (InternalRow) $self.nullSafeEval($bytes, $id, $offset);
         |${ev.isNull} = ${ev.value} == null;""".stripMargin)
  }

  override protected def withNewChildrenInternal(first: Expression, second: Expression, third: Expression
                                                 ): DebeziumEnvelope =
    copy(value = first, schemaId = second, bodyOffset = third)
}

object DebeziumEnvelope {
  val Name = "cdc_debezium_envelope"
  val Placeholder: UTF8String = UTF8String.fromString("__debezium_unavailable_value")
  /** What the envelope's `source` block gives, in `EnvelopeProgram`'s slots. */
  val SourceFields: Seq[String] = Seq("ts_ms", "lsn", "sequence", "connector", "db", "schema", "table", "txId")
  private val PlaceholderBytes: Array[Byte] = Placeholder.getBytes

  /** Whether a text or bytes value is Debezium's TOAST placeholder. */
  def isPlaceholder(value: Any): Boolean = value match {
    case text: UTF8String => text == Placeholder
    case bytes: Array[Byte] => java.util.Arrays.equals(bytes, PlaceholderBytes)
    case _ => false
  }

  def build(args: Seq[Expression]): Expression = {
    require(args.length == 4 && args(3).foldable, s"$Name(value, schema_id, body_offset, config): config is a literal")
    DebeziumEnvelope(args(0), args(1), args(2), args(3).eval().toString)
  }

  /** Debezium Postgres's `source.sequence`, `["<last commit LSN>","<event LSN>"]` (either null), as two longs. */
  def sequence(value: AnyRef): (java.lang.Long, java.lang.Long) = {
    if (value == null) return (null, null)
    val text = value.toString
    val comma = text.indexOf(',')
    if (comma < 0) (null, null) else (digits(text, 0, comma), digits(text, comma + 1, text.length))
  }

  private def digits(text: String, from: Int, to: Int): java.lang.Long = {
    var i = from; var n = 0L; var found = false
    while (i < to) {
      val c = text.charAt(i)
      if (c >= '0' && c <= '9') { n = n * 10 + (c - '0'); found = true }
      i += 1
    }
    if (found) n else null
  }

  /** A config's envelopes decoded, a program compiled once per writer; not thread-safe (one per task). */
  final class Decoder(config: Config, zone: ZoneId) {
    private val programs = new java.util.HashMap[UTF8String, EnvelopeProgram]()
    config.writers.foreach { case (id, writer) =>
      programs.put(UTF8String.fromString(id), new EnvelopeProgram(writer, config, zone))
    }
    private val cursor = new Cursor(null, 0)

    /** Whether `id` names one of the config's writers. */
    def writes(id: UTF8String): Boolean = programs.containsKey(id)

    /** The change record (`Config.dataType`) of a body at `offset` of `bytes`, written as writer `id`; null when
     *  `id` names no writer or the body does not decode. */
    def decode(bytes: Array[Byte], id: UTF8String, offset: Int): InternalRow = {
      val program = programs.get(id)
      if (program == null) return null
      cursor.bytes = bytes
      cursor.pos = offset
      try program.read(cursor) catch { case _: RuntimeException => null } // truncated or malformed: a dead letter
    }
  }

  final case class Config(text: String) {
    private val tree = new ObjectMapper().readTree(text)
    val reader: Schema = new Schema.Parser().parse(tree.get("reader").asText())
    val writers: Seq[(String, Schema)] = tree.get("writers").properties().asScala.toSeq
      .map(e => e.getKey -> new Schema.Parser().parse(e.getValue.asText()))
    val row: Schema = AvroProgram.nonNull(reader.getField("after").schema())
    val columns: Seq[Schema.Field] = row.getFields.asScala.toSeq
    val names: Array[UTF8String] = columns.map(f => UTF8String.fromString(f.name())).toArray
    val conversions: Seq[Conversion] = columns.map(f => SemanticTypes.of(f.schema()))
    /** The row columns, the change record's own, and `_overflowed`: the columns whose value did not fit. */
    val dataType: StructType = StructType(
      columns.zip(conversions).map { case (f, c) => StructField(f.name(), c.dataType) } ++ Seq(
        StructField("_op", StringType), StructField("_is_deleted", BooleanType),
        StructField("_source_ts", TimestampType),
        StructField("source_major", LongType), StructField("source_minor", LongType),
        StructField("connector", StringType), StructField("db", StringType), StructField("schema", StringType),
        StructField("table", StringType), StructField("tx_id", StringType), StructField("snapshot", BooleanType),
        StructField("_unchanged", ArrayType(StringType, containsNull = false)),
        StructField("_overflowed", ArrayType(StringType, containsNull = false))))
    val width: Int = dataType.length
  }
}
