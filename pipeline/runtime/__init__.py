"""What the stages run on: the Spark session (`spark`), the JVM artifacts Maven resolves (`jvm`), Spark's Python
worker daemon (`worker_daemon`) and structured logs (`logs`)."""
