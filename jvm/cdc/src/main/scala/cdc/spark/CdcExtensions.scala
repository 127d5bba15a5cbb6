package cdc.spark

import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.catalyst.FunctionIdentifier
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo

/** The pipeline's functions, registered in every session that lists this class in `spark.sql.extensions`. */
class CdcExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit =
    extensions.injectFunction((FunctionIdentifier(DebeziumEnvelope.Name),
      new ExpressionInfo(classOf[DebeziumEnvelope].getName, DebeziumEnvelope.Name), DebeziumEnvelope.build _))
}
