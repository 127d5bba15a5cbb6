package cdc.spark

import java.time.ZoneId

import scala.jdk.CollectionConverters._

import org.apache.avro.Schema
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.unsafe.types.UTF8String

/** One writer's envelope read into the flat change record (`DebeziumEnvelope.Config.dataType`); `zone`: the
 *  session's, for the semantic types' conversions. */
final class EnvelopeProgram(writer: Schema, config: DebeziumEnvelope.Config, zone: ZoneId) {
  import AvroProgram._
  import EnvelopeProgram.State
  private val n = config.columns.length
  private val columnSlot: Map[String, Int] = config.columns.map(_.name()).zipWithIndex.toMap
  private val sourceSlot: Map[String, Int] = DebeziumEnvelope.SourceFields.zipWithIndex.toMap
  private val steps: Array[(Cursor, State) => Unit] = writer.getFields.asScala.map { w =>
    w.name() match {
      case "before" =>
        val r = optionalRecord(w.schema(), config.row, columnSlot.getOrElse(_, -1))
        (c: Cursor, s: State) => s.hasBefore = r(c, s.before)
      case "after" =>
        val r = optionalRecord(w.schema(), config.row, columnSlot.getOrElse(_, -1))
        (c: Cursor, s: State) => s.hasAfter = r(c, s.after)
      case "source" =>
        val readerSource = config.reader.getField("source").schema()
        val r = record(nonNull(w.schema()), nonNull(readerSource), sourceSlot.getOrElse(_, -1))
        (c: Cursor, s: State) => r(c, s.source)
      case "op" =>
        val r = value(w.schema(), Schema.create(Schema.Type.STRING))
        (c: Cursor, s: State) => s.op = r(c).asInstanceOf[UTF8String]
      case _ =>
        val k = skip(w.schema())
        (c: Cursor, _: State) => k(c)
    }
  }.toArray
  private val state = new State(n, DebeziumEnvelope.SourceFields.length)
  private val converts: Array[Any => Any] = config.conversions.map(_.convert(zone)).toArray
  private val placeholders: Array[Boolean] = config.conversions.map(_.holdsPlaceholder).toArray
  private val overflows: Array[Boolean] = config.conversions.map(_.overflows).toArray

  def read(c: Cursor): InternalRow = {
    val s = state
    java.util.Arrays.fill(s.before.asInstanceOf[Array[AnyRef]], null)
    java.util.Arrays.fill(s.after.asInstanceOf[Array[AnyRef]], null)
    java.util.Arrays.fill(s.source.asInstanceOf[Array[AnyRef]], null)
    s.op = null; s.hasBefore = false; s.hasAfter = false
    var i = 0
    while (i < steps.length) { steps(i)(c, s); i += 1 }
    val out = new Array[Any](config.width)
    val image = if (s.hasAfter) s.after else if (s.hasBefore) s.before else null
    var unchanged: List[UTF8String] = Nil
    var overflowed: List[UTF8String] = Nil
    if (image != null) {
      i = 0
      while (i < n) {
        val raw = image(i)
        if (raw != null) {
          if (placeholders(i) && DebeziumEnvelope.isPlaceholder(raw)) unchanged = config.names(i) :: unchanged
          else {
            val v = converts(i)(raw)
            out(i) = v
            if (v == null && overflows(i)) overflowed = config.names(i) :: overflowed
          }
        }
        i += 1
      }
    }
    val op = s.op
    out(n) = op
    val opChar = if (op != null && op.numBytes() == 1) op.getByte(0).toChar else ' '
    out(n + 1) = opChar == 'd' || opChar == 't'
    val src = s.source
    val snapshot = opChar == 'r'
    out(n + 2) = if (src(0) == null) null else src(0).asInstanceOf[Long] * 1000L
    val lsn = src(1).asInstanceOf[java.lang.Long]
    val (commit, event) = DebeziumEnvelope.sequence(src(2).asInstanceOf[AnyRef])
    out(n + 3) = if (snapshot) 0L else if (commit != null) commit else lsn
    out(n + 4) = if (event != null) event else lsn
    out(n + 5) = src(3); out(n + 6) = src(4); out(n + 7) = src(5); out(n + 8) = src(6)
    out(n + 9) = if (src(7) == null) null else UTF8String.fromString(src(7).toString)
    out(n + 10) = snapshot
    out(n + 11) = new GenericArrayData(unchanged.reverse.toArray[Any])
    out(n + 12) = new GenericArrayData(overflowed.reverse.toArray[Any])
    new GenericInternalRow(out)
  }
}

object EnvelopeProgram {
  final class State(columns: Int, sourceFields: Int) {
    val before = new Array[Any](columns)
    val after = new Array[Any](columns)
    val source = new Array[Any](sourceFields)
    var op: UTF8String = _
    var hasBefore = false
    var hasAfter = false
  }
}
