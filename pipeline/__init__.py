"""The CDC lakehouse pipeline: CLI, configuration, Spark session, embedded stack and stages."""
