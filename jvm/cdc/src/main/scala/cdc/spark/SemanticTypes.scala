package cdc.spark

import java.math.{BigInteger, BigDecimal => JavaBigDecimal}
import java.time.ZoneId

import org.apache.avro.{LogicalTypes, Schema}
import org.apache.spark.sql.avro.SchemaConverters
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.util.DateTimeUtils
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/** A row column's lake type, and how its value, as `AvroProgram` reads it, becomes that. `rawType`: the type
 *  Spark's `from_avro` gives the value before (a TOAST placeholder is found on it, when it is text or bytes);
 *  `overflows`: a value that does not fit is a dead letter (`DecimalOverflow`), not a null; `convert`: given the
 *  session's time zone, the conversion (null stays null). */
final case class Conversion(dataType: DataType, rawType: DataType, overflows: Boolean,
                            convert: ZoneId => Any => Any) {
  def holdsPlaceholder: Boolean = rawType == StringType || rawType == BinaryType
}

/** Kafka Connect's and Debezium's semantic types into the lake types they mean, as `cdc/semantic_types.py`
 *  converts them with column expressions (the reference; the map and its reasons are in docs/types.md): the
 *  same types, values and nulls. `cdc/native.py` sends only the Avro forms handled here. */
object SemanticTypes {
  private val MicrosPerDay = 86400000000L
  private val VariableScale = DecimalType(38, 18)
  private val Digits38 = BigInteger.TEN.pow(38)  // the column path reads unscaled digits as decimal(38, 0)
  private val Epoch = UTF8String.fromString("1970-01-01T")
  private val identity: ZoneId => Any => Any = _ => v => v

  /** The conversion of a row column whose reader schema (optionally a union with null) is `field`. */
  def of(field: Schema): Conversion = {
    val avro = AvroProgram.nonNull(field)
    val raw = SchemaConverters.toSqlType(avro).dataType
    def to(dataType: DataType, convert: Any => Any) = Conversion(dataType, raw, overflows = false, _ => convert)
    Option(avro.getProp("connect.name")).getOrElse("") match {
      case "io.debezium.time.Date" | "org.apache.kafka.connect.data.Date" => to(DateType, v => v)
      case "io.debezium.time.Timestamp" | "org.apache.kafka.connect.data.Timestamp" =>
        to(TimestampNTZType, micros(unit(avro, 1000000L)))
      case "io.debezium.time.MicroTimestamp" => to(TimestampNTZType, micros(unit(avro, 1000L)))
      case "io.debezium.time.NanoTimestamp" => to(TimestampNTZType, micros(unit(avro, 1L)))
      case "io.debezium.time.ZonedTimestamp" =>
        Conversion(TimestampType, raw, overflows = false, zone => v => instant(v.asInstanceOf[UTF8String], zone))
      case "io.debezium.time.Time" => to(StringType, v => timeOfDay(v.asInstanceOf[Int] * 1000L))
      case "io.debezium.time.MicroTime" => to(StringType, v => timeOfDay(v.asInstanceOf[Long]))
      case "io.debezium.time.NanoTime" => to(StringType, v => timeOfDay(Math.floorDiv(v.asInstanceOf[Long], 1000L)))
      case "io.debezium.time.ZonedTime" =>
        Conversion(StringType, raw, overflows = false, zone => v => {
          val at = instant(UTF8String.concat(Epoch, v.asInstanceOf[UTF8String]), zone)
          if (at == null) null else timeOfDay(at.asInstanceOf[Long])
        })
      case "org.apache.kafka.connect.data.Decimal" => decimal(avro, raw)
      case "io.debezium.data.VariableScaleDecimal" =>
        val scale = avro.getField("scale").pos(); val value = avro.getField("value").pos()
        Conversion(VariableScale, raw, overflows = true, _ => v => {
          val r = v.asInstanceOf[InternalRow]
          if (r.isNullAt(value) || r.isNullAt(scale)) null
          else scaled(r.getBinary(value), r.getInt(scale), VariableScale)
        })
      case _ => Conversion(raw, raw, overflows = false, identity)  // text (Json, Uuid...), plain, or unmapped
    }
  }

  /** Nanoseconds per unit of a timestamp: its Avro logical type's, else its semantic type's (`default`). */
  private def unit(avro: Schema, default: Long): Long = avro.getLogicalType match {
    case _: LogicalTypes.TimestampMillis => 1000000L
    case _: LogicalTypes.TimestampMicros => 1000L
    case _ => default
  }

  /** A count of `nanos`-nanosecond units since the epoch as microseconds, floored (a wall-clock time). */
  private def micros(nanos: Long): Any => Any = nanos match {
    case 1000000L => v => v.asInstanceOf[Long] * 1000L
    case 1000L => v => v
    case _ => v => Math.floorDiv(v.asInstanceOf[Long], 1000L)
  }

  /** ISO-8601 text as the instant Spark's cast to timestamp reads (null where it reads none). */
  private def instant(text: UTF8String, zone: ZoneId): Any =
    DateTimeUtils.stringToTimestamp(text, zone).map(Long.box).orNull

  /** Microseconds as the time of day they fall on, `HH:mm:ss.SSSSSS`. */
  private def timeOfDay(micros: Long): UTF8String = {
    val m = Math.floorMod(micros, MicrosPerDay)
    val text = new java.lang.StringBuilder(15)
    def pad(n: Long, width: Int): Unit = {
      val digits = n.toString
      var i = digits.length; while (i < width) { text.append('0'); i += 1 }
      text.append(digits)
    }
    pad(m / 3600000000L, 2); text.append(':'); pad(m / 60000000L % 60, 2); text.append(':')
    pad(m / 1000000L % 60, 2); text.append('.'); pad(m % 1000000L, 6)
    UTF8String.fromString(text.toString)
  }

  /** Kafka Connect's Decimal: with `logicalType: decimal` as Spark reads it, else of the precision and scale its
   *  `connect.parameters` give (precision capped at 38), null when it does not fit. */
  private def decimal(avro: Schema, raw: DataType): Conversion = raw match {
    case d: DecimalType => Conversion(d, raw, overflows = false, _ => v => scaled(v.asInstanceOf[Array[Byte]],
      d.scale, d))
    case _ =>
      val parameters = Option(avro.getObjectProp("connect.parameters")) match {
        case Some(m: java.util.Map[_, _]) => m.asInstanceOf[java.util.Map[String, AnyRef]]
        case _ => java.util.Collections.emptyMap[String, AnyRef]()
      }
      def setting(parameter: String, attribute: String, default: Int): Int =
        Option(parameters.get(parameter)).orElse(Option(avro.getObjectProp(attribute)))
          .map(_.toString.toInt).getOrElse(default)
      val scale = setting("scale", "scale", 0)
      val target = DecimalType(math.min(setting("connect.decimal.precision", "precision", 38), 38), math.min(scale, 38))
      Conversion(target, raw, overflows = false, _ => v => scaled(v.asInstanceOf[Array[Byte]], scale, target))
  }

  /** Big-endian two's-complement unscaled digits and a scale as `target`, rounded half up as Spark's cast does;
   *  null when there are none, more than 38, a negative scale, or the value does not fit. Digits of a long at the
   *  target's scale, the common case (`numeric(p, s)` with p <= 18), make no `BigDecimal`. */
  private def scaled(unscaled: Array[Byte], scale: Int, target: DecimalType): Decimal = {
    if (unscaled.isEmpty || scale < 0) return null
    if (scale == target.scale && target.precision <= Decimal.MAX_LONG_DIGITS && unscaled.length <= 8) {
      var digits = unscaled(0).toLong  // the sign, extended
      var i = 1
      while (i < unscaled.length) { digits = (digits << 8) | (unscaled(i) & 0xffL); i += 1 }
      val bound = Decimal.POW_10(target.precision)
      return if (digits > -bound && digits < bound) Decimal.createUnsafe(digits, target.precision, scale) else null
    }
    val digits = new BigInteger(unscaled)
    if (digits.abs.compareTo(Digits38) >= 0) return null
    val value = Decimal(new JavaBigDecimal(digits, scale))
    if (value.changePrecision(target.precision, target.scale)) value else null
  }
}
