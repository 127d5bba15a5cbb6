"""Configuration: the typed, validated settings model (`settings`) and the Kafka client options derived from it
(`kafka`)."""
