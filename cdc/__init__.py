"""Change-event formats (Debezium envelope and unwrapped, DMS), the canonical change record, ordering."""
