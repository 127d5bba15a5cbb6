"""Streaming sources Spark reads through the Python data source API."""
