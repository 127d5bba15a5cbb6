"""`pipeline status`: how far behind each lake table is, in one place.

- `model`: what is reported of a table and of a transport source, and when a table counts as stale;
- `lake`: the facts the tables' own commit histories hold (Iceberg through pyiceberg, no Spark; Delta through
  Spark), and the dead-letter table;
- `transport`: what the changelog stage has not landed yet (Kafka from its checkpoint; SQS from the queue);
- `render`: plain text, JSON, and one self-contained HTML page with a lag chart per table.
"""

from pipeline.ops.status.collect import collect
from pipeline.ops.status.model import LakeStatus, SourceLag, TableStatus

__all__ = ["LakeStatus", "SourceLag", "TableStatus", "collect"]
