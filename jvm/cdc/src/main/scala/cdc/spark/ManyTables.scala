package cdc.spark

import java.util.concurrent.{Callable, Executors}

import scala.jdk.CollectionConverters._

import org.apache.iceberg.{DataFile, SnapshotUpdate, Table}
import org.apache.iceberg.catalog.{Namespace, TableIdentifier}
import org.apache.iceberg.exceptions.{AlreadyExistsException, ValidationException}
import org.apache.iceberg.expressions.{Expressions => IcebergExpressions}
import org.apache.iceberg.spark.{Spark3Util, SparkSchemaUtil}
import org.apache.iceberg.spark.source.{HasIcebergCatalog, SerializableTableWithSize}
import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.analysis.{NamespaceAlreadyExistsException, NoSuchNamespaceException,
  NoSuchTableException}
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.classic.{Dataset, SparkSession}
import org.apache.spark.sql.connector.catalog.{SupportsNamespaces, TableCatalog}
import org.apache.spark.sql.connector.expressions.{Expressions, Transform}
import org.apache.spark.sql.execution.SQLExecution
import org.apache.spark.sql.types.{DataType, StructType}

/** Appends to many small Iceberg tables in one Spark job, each table committed through Iceberg's Java API.
 *
 *  Why: a Kafka batch of a whole database is mostly quiet topics of a few rows each, and landing each through
 *  Spark's DataFrameWriterV2 cost about a second of driver and Spark work a table (its own job, its own commit:
 *  docs/benchmarks.md). Here each frame's plan (`queryExecution.toRdd`) is mapped by a task-side writer that writes
 *  its table's Parquet data files with Iceberg's own writers (`Parquet.writeData(...).forTable(table)`: the
 *  table's compression, metrics and other write properties), the union of those is coalesced to a few tasks (so
 *  500 tables are not 500 tasks), the files come back to the driver, and each table gets one `AppendFiles`
 *  commit with the snapshot properties the caller gives (its idempotence tag), from a small thread pool.
 *
 *  Frames must already be in their table's column order and Spark types (`tables/append.py` checks); columns
 *  named in `stamps` are written with the stamp's value (a long: micros for a timestamp) whatever the frame holds
 *  there, so the frames' generated code carries no per-batch literal. Tables must be `writable`: unpartitioned
 *  or partitioned by the day of one timestamp column. A quiet table's rows are few: each task writes one file per
 *  table and day, without rolling at the target file size. */
object ManyTables {
  /** Creates table `name` (`catalog.namespace.table`) as a create-as-select of `schemaJson` (a Spark struct,
   *  as `StructType.json` writes it) would, through the same Spark catalog call: partitioned by the day of
   *  `dayColumn` (null: unpartitioned), with `properties` and the owner Spark adds (the Spark user). Returns
   *  the Iceberg table. */
  def create(spark: SparkSession, name: String, schemaJson: String, dayColumn: String,
             properties: java.util.Map[String, String]): Table = {
    val found = Spark3Util.catalogAndIdentifier(spark, name)
    val partitioning: Array[Transform] = Option(dayColumn).map(column => Expressions.days(column): Transform).toArray
    found.catalog.asInstanceOf[TableCatalog].createTable(found.identifier,
      DataType.fromJson(schemaJson).asInstanceOf[StructType], partitioning, owned(spark, properties))
    Spark3Util.loadIcebergTable(spark, name)
  }

  /** Creates table `name` unpartitioned, as `create` does, with its first snapshot, an empty append (the table's
   *  first state, as time travel sees it), in the same metadata file: one catalog commit where a create and then
   *  an append made two, which a mirror run that builds hundreds of tables (and their pending tables) paid twice a
   *  table. Creates the namespace too when it is missing. Returns the Iceberg table. */
  def createEmpty(spark: SparkSession, name: String, schemaJson: String,
                  properties: java.util.Map[String, String]): Table = {
    val found = ActiveSession.within(spark)(Spark3Util.catalogAndIdentifier(spark, name))
    val catalog = found.catalog.asInstanceOf[HasIcebergCatalog].icebergCatalog
    val identifier = TableIdentifier.of(Namespace.of(found.identifier.namespace: _*), found.identifier.name)
    val schema = SparkSchemaUtil.convert(DataType.fromJson(schemaJson).asInstanceOf[StructType])
    def commit(): Unit = {
      val created = catalog.buildTable(identifier, schema).withProperties(owned(spark, properties)).createTransaction()
      created.newAppend().commit()
      created.commitTransaction()
    }
    try commit()
    catch {
      // Catalogs name a missing namespace each their own way (Glue: its EntityNotFoundException), and another
      // session may be creating it at this moment: after any failure but the table's own existence, the namespace
      // is made sure of (through Spark's catalog, which wraps a caching one) and the create tried once more.
      case failed: RuntimeException if !failed.isInstanceOf[AlreadyExistsException] =>
        val namespaces = found.catalog.asInstanceOf[SupportsNamespaces]
        if (!namespaces.namespaceExists(found.identifier.namespace)) {
          try namespaces.createNamespace(found.identifier.namespace, java.util.Map.of())
          catch { case _: NamespaceAlreadyExistsException => () }
        }
        commit()
    }
    catalog.loadTable(identifier)
  }

  /** A new table's properties: `properties` and the owner Spark adds (the Spark user). */
  private def owned(spark: SparkSession, properties: java.util.Map[String, String]): java.util.Map[String, String] =
    (properties.asScala + (TableCatalog.PROP_OWNER -> spark.sparkContext.sparkUser)).asJava

  /** Iceberg table `name` (`catalog.namespace.table`), or null when there is none: one catalog load, where asking
   *  whether it exists first loads it twice, and a missing table's exception would cross py4j. */
  def loaded(spark: SparkSession, name: String): Table =
    try Spark3Util.loadIcebergTable(spark, name)
    catch { case _: NoSuchTableException | _: NoSuchNamespaceException => null }

  /** Whether `append` writes this table's partitions: none, or the day of one top-level timestamp column. */
  def writable(table: Table): Boolean = TableFiles.writable(table)

  /** Writes each frame's rows into its table in one Spark job of at most `tasks` tasks, then commits each table
   *  once (`threads` at a time) with its snapshot properties (`snapshots`, one map a table), and completes the
   *  frames' observations (`Dataset.observe`) as a write of each would have. A table `guarded` takes its rows only
   *  if no other commit added data to it since the snapshot it was loaded at (a first build: two runs must not
   *  both write one). A frame with a `mirrors` entry (null: none) holds a mirror's changelog rows, which one task
   *  makes into the rows written (`MirrorRows`, whose `outcome` this sets); a table it leaves to be merged alone
   *  is not committed. Returns the rows written to each table, -1 for a guarded table that another commit wrote
   *  first (nothing of this write is in it), -2 for a table left alone. */
  def append(frames: java.util.List[Dataset[Row]], tables: java.util.List[Table],
             stamps: java.util.Map[String, java.lang.Number],
             snapshots: java.util.List[java.util.Map[String, String]], guarded: java.util.List[java.lang.Boolean],
             mirrors: java.util.List[MirrorRows], tasks: Int, threads: Int): Array[Long] = {
    require(frames.size == tables.size && tables.size == snapshots.size && tables.size == guarded.size &&
            tables.size == mirrors.size && !frames.isEmpty,
            "one table, one map of snapshot properties, one guard and one mirror (or null) a frame, at least one")
    val spark = frames.get(0).sparkSession
    val context = spark.sparkContext
    val shipped = context.broadcast(tables.asScala.map(SerializableTableWithSize.copyOf).toArray)
    val parts = frames.asScala.toSeq.zipWithIndex.map { case (frame, i) =>
      val stamped = stampsOf(Option(mirrors.get(i)).fold(frame.schema)(_.schema), stamps)
      Option(mirrors.get(i)) match {
        case None => frame.queryExecution.toRdd.mapPartitionsWithIndex((part, rows) =>
          Iterator((i, write(new TableFiles(shipped.value(i), part), rows, stamped), Option.empty[MirrorRows.Outcome])))
        case Some(mirror) => frame.queryExecution.toRdd.coalesce(1).mapPartitionsWithIndex { (part, rows) =>
          val (outcome, resolved) = mirror.rows(rows)
          Iterator((i, write(new TableFiles(shipped.value(i), part), resolved, stamped), Option(outcome)))
        }
      }
    }
    val union = context.union(parts)
    val written = try union.coalesce(math.max(1, math.min(tasks, union.getNumPartitions))).collect()
                  finally shipped.destroy()
    val outcomes = written.collect { case (i, _, Some(outcome)) => i -> outcome }.toMap
    outcomes.foreach { case (i, outcome) => mirrors.get(i).outcome = outcome }
    val alone = outcomes.collect { case (i, outcome) if outcome.alone => i }.toSet
    val files = written.filterNot(part => alone(part._1)).groupMap(_._1)(_._2).view.mapValues(_.flatten.toSeq).toMap
    val kept = tables.asScala.indices.filterNot(alone)
    val committed = commit(kept.map(tables.get), kept.indices.flatMap(k => files.get(kept(k)).map(k -> _)).toMap,
                           kept.map(snapshots.get), threads, kept.map(guarded.get(_).booleanValue))
    val rows = Array.fill(tables.size)(-2L)
    kept.zip(committed).foreach { case (i, count) => rows(i) = count }
    frames.asScala.zip(tables.asScala).foreach { case (frame, table) =>
      SQLExecution.withNewExecutionId(frame.queryExecution, Some(s"append to ${table.name}"))(())
    }
    rows
  }

  /** Commits each table's files (`files`: by the table's position in `tables`) with its snapshot properties
   *  (`snapshots`, in the same order), `threads` tables at a time; an append of no files commits too: the table
   *  then holds the batch, as Spark's write does. A `guarded` table's commit fails if another added data since
   *  the table's loaded snapshot (-1). Returns the rows each table gained. */
  def commit(tables: Seq[Table], files: Map[Int, Seq[DataFile]], snapshots: Seq[java.util.Map[String, String]],
             threads: Int, guarded: Seq[Boolean] = Nil): Array[Long] = {
    val pool = Executors.newFixedThreadPool(math.max(1, math.min(threads, tables.size)))
    try {
      val commits = tables.zipWithIndex.map { case (table, i) =>
        pool.submit(new Callable[Long] {
          override def call(): Long =
            commitOne(table, files.getOrElse(i, Nil), snapshots(i), guarded.lift(i).getOrElse(false))
        })
      }
      commits.map(_.get()).toArray
    } finally pool.shutdown()
  }

  private def commitOne(table: Table, files: Seq[DataFile], snapshot: java.util.Map[String, String],
                        guarded: Boolean): Long = {
    val update: SnapshotUpdate[_] = if (guarded) {
      val overwrite = table.newOverwrite()  // adds only, validated as an overwrite: no data added meanwhile
      Option(table.currentSnapshot).foreach(loaded => overwrite.validateFromSnapshot(loaded.snapshotId))
      overwrite.conflictDetectionFilter(IcebergExpressions.alwaysTrue).validateNoConflictingData()
      files.foreach(overwrite.addFile)
      overwrite
    } else {
      val append = table.newAppend()
      files.foreach(append.appendFile)
      append
    }
    snapshot.asScala.foreach { case (key, value) => update.set(key, value) }
    try update.commit() catch { case _: ValidationException if guarded => return -1L }
    files.map(_.recordCount).sum
  }

  private def stampsOf(schema: StructType, stamps: java.util.Map[String, java.lang.Number]): Array[(Int, Long)] =
    stamps.asScala.toArray.map { case (column, value) => schema.fieldIndex(column) -> value.longValue }

  /** One table's rows of one input partition, stamped, written to `files`. */
  private def write(files: TableFiles, rows: Iterator[InternalRow], stamps: Array[(Int, Long)]): Array[DataFile] = {
    try rows.foreach { row =>
      val target = if (stamps.isEmpty || row.isInstanceOf[UnsafeRow]) row else row.copy()
      stamps.foreach { case (ordinal, value) => target.setLong(ordinal, value) }
      files.write(target)
    } catch { case e: Throwable => files.close(); throw e }
    files.close()
  }
}
