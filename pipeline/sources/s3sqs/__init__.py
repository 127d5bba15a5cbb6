"""`s3-sqs`: a Spark streaming source that learns of new S3 objects from S3 event notifications on SQS.

- `options.py`: the connector's options (the seed connector's names and defaults), parsed and validated once.
- `events.py`: SQS message bodies (S3 events, SNS-wrapped, EventBridge) into the files they announce.
- `queue.py`: SQS calls (parallel long polls, deletes), on the driver.
- `tracker.py`: the RocksDB file and batch log inside the checkpoint; what makes a file count once.
- `files.py`: reading one object (csv, json, parquet, avro) into Arrow batches, on the executors; or, with
  `rowFormat=files`, only listing a batch's files for a reader that reads them itself (and their CSV headers).
- `reader.py`: the stream reader: plans batches from the queue, replays them from RocksDB.
- `status.py`: a small status file, so a driver can tell when the queue is drained.
"""
