"""Schema-registry clients, wire formats and Avro encoding."""
