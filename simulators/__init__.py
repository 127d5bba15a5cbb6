"""The DMS/Debezium CDC simulator and its ground-truth log."""
