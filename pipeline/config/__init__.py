"""Configuration: the typed, validated settings model (`settings`), the Kafka client options derived from it
(`kafka`), and the one rule that masks its secrets wherever anything is printed or logged (`redaction`)."""
