"""SQL access for other engines: Athena DDL and views over Glue (`athena`), and a HiveServer2 endpoint
(`hive_server`)."""
