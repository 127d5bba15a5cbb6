package cdc.spark

import org.apache.spark.sql.{SparkSession => AnySparkSession}
import org.apache.spark.sql.classic.SparkSession

/** Work run with a session the calling thread's active one. Why: Spark reads a catalog's settings, the first time a
 *  session names the catalog, from the thread's active session, and py4j runs each Python thread's calls on a JVM
 *  thread of its own, whose active session may be another (a mirror's sessions from `SessionPool` met
 *  CATALOG_NOT_FOUND there). */
object ActiveSession {
  /** `body`, with `spark` active in this thread meanwhile; the session active before is put back. */
  def within[T](spark: SparkSession)(body: => T): T = {
    val before = AnySparkSession.getActiveSession
    AnySparkSession.setActiveSession(spark)
    try body
    finally before.fold(AnySparkSession.clearActiveSession())(AnySparkSession.setActiveSession)
  }
}
