"""Table formats (Iceberg, Delta) and catalogs."""
