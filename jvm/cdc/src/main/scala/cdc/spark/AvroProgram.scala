package cdc.spark

import scala.jdk.CollectionConverters._

import org.apache.avro.Schema
import org.apache.avro.Schema.Type._
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.unsafe.types.UTF8String

/** A position in one value's Avro binary, and the reads of its primitives. */
final class Cursor(var bytes: Array[Byte], var pos: Int) {
  def long(): Long = {
    var b = bytes(pos) & 0xff; pos += 1
    var n = (b & 0x7f).toLong; var shift = 7
    while ((b & 0x80) != 0) { b = bytes(pos) & 0xff; pos += 1; n |= (b & 0x7fL) << shift; shift += 7 }
    (n >>> 1) ^ -(n & 1)
  }
  /** A string's bytes, wrapped where they lie (the value's array is the row's own copy). */
  def string(): UTF8String = { val n = length(); val s = UTF8String.fromBytes(bytes, pos, n); pos += n; s }
  def binary(): Array[Byte] = {
    val n = length(); val a = java.util.Arrays.copyOfRange(bytes, pos, pos + n); pos += n; a
  }
  def float(): Float = java.lang.Float.intBitsToFloat(le(4).toInt)
  def double(): Double = java.lang.Double.longBitsToDouble(le(8))
  def skip(n: Int): Unit = { check(n); pos += n }

  private def length(): Int = { val n = long(); check(n); n.toInt }
  /** A body cut short, or a length that is not one, is malformed: never read past the value. */
  private def check(n: Long): Unit =
    if (n < 0 || pos + n > bytes.length) throw new IllegalArgumentException(s"malformed Avro: $n bytes at $pos")
  private def le(n: Int): Long = {
    check(n)
    var v = 0L; var i = 0
    while (i < n) { v |= (bytes(pos + i) & 0xffL) << (8 * i); i += 1 }
    pos += n
    v
  }
}

/** Reads one value and returns it as Spark holds it (boxed primitive, `UTF8String`, bytes, a struct's row) or null. */
trait Read { def apply(c: Cursor): Any }

/** Avro binary read straight from the bytes: the writer's schema resolved against the reader's once, into
 *  closures that read or skip each value. */
object AvroProgram {
  /** A reader of a value written as `writer`, returned as the reader type `reader` wants (primitive, record, or
   *  null). */
  def value(writer: Schema, reader: Schema): Read = (writer.getType, reader.getType) match {
    case (UNION, _) =>
      val branches = writer.getTypes.asScala
        .map(w => if (w.getType == NULL) null else value(w, nonNull(reader))).toArray
      c => { val b = branches(c.long().toInt); if (b == null) null else b(c) }
    case (_, UNION) => value(writer, nonNull(reader))
    case (NULL, _) => _ => null
    case (BOOLEAN, _) => c => { val v = c.bytes(c.pos) != 0; c.skip(1); v }
    case (INT, INT) => c => c.long().toInt
    case (INT | LONG, LONG) => c => c.long()
    case (INT | LONG, FLOAT) => c => c.long().toFloat
    case (INT | LONG, DOUBLE) => c => c.long().toDouble
    case (FLOAT, FLOAT) => c => c.float()
    case (FLOAT, DOUBLE) => c => c.float().toDouble
    case (DOUBLE, DOUBLE) => c => c.double()
    case (STRING, STRING) | (BYTES, STRING) => c => c.string()
    case (BYTES, BYTES) | (STRING, BYTES) => c => c.binary()
    case (RECORD, RECORD) =>  // as Spark holds a struct: the reader's fields, by name
      val width = reader.getFields.size
      val read = record(writer, reader, name => reader.getField(name).pos())
      c => { val out = new Array[Any](width); read(c, out); new GenericInternalRow(out) }
    case (w, r) => throw new IllegalArgumentException(s"no native read of $w as $r")
  }

  def nonNull(s: Schema): Schema =
    if (s.getType == UNION) s.getTypes.asScala.find(_.getType != NULL).getOrElse(s) else s

  /** Skips a value written as `writer`. */
  def skip(writer: Schema): Cursor => Unit = writer.getType match {
    case NULL => _ => ()
    case BOOLEAN => c => c.skip(1)
    case INT | LONG | ENUM => c => c.long()
    case FLOAT => c => c.skip(4)
    case DOUBLE => c => c.skip(8)
    case STRING | BYTES => c => c.skip(c.long().toInt)  // a negative length: `skip` refuses it
    case FIXED => val n = writer.getFixedSize; c => c.skip(n)
    case UNION =>
      val branches = writer.getTypes.asScala.map(skip).toArray
      c => branches(c.long().toInt)(c)
    case RECORD =>
      val fields = writer.getFields.asScala.map(f => skip(f.schema())).toArray
      c => { var i = 0; while (i < fields.length) { fields(i)(c); i += 1 } }
    case ARRAY | MAP =>
      val isMap = writer.getType == MAP
      val item = skip(if (isMap) writer.getValueType else writer.getElementType)
      c => {
        var n = c.long()
        while (n != 0) {
          if (n < 0) { c.skip(c.long().toInt) } // block of known size
          else { var i = 0L; while (i < n) { if (isMap) c.skip(c.long().toInt); item(c); i += 1 } }
          n = c.long()
        }
      }
  }

  /** Reads a record written as `writer` into `out` at the slots `slot` gives the reader's fields (-1: skip). */
  def record(writer: Schema, reader: Schema, slot: String => Int): (Cursor, Array[Any]) => Unit = {
    val steps = writer.getFields.asScala.map { w =>
      val r = if (reader == null) null else reader.getField(w.name())
      val target = if (r == null) -1 else slot(w.name())
      if (target < 0) { val s = skip(w.schema()); (c: Cursor, _: Array[Any]) => s(c) }
      else { val read = value(w.schema(), r.schema()); (c: Cursor, out: Array[Any]) => out(target) = read(c) }
    }.toArray
    (c, out) => { var i = 0; while (i < steps.length) { steps(i)(c, out); i += 1 } }
  }

  /** A union of null and a record: reads the record into `out`; false when the value is null. */
  def optionalRecord(writer: Schema, reader: Schema, slot: String => Int): (Cursor, Array[Any]) => Boolean = {
    val branches = writer.getTypes.asScala
      .map(w => if (w.getType == NULL) null else record(w, nonNull(reader), slot)).toArray
    (c, out) => { val b = branches(c.long().toInt); if (b == null) false else { b(c, out); true } }
  }
}
