"""The `DYNAMODB` metadata committer: one item per (stream, batch, shard) in `kinesis.dynamodb.tableName`.

Key: `stream` (hash) and `batchShard` = `<batch, 20 digits>/<shard id>` (range), so one Query finds a batch's
shards and another the batches to forget. The table is created on first use (on demand capacity) when it does
not exist, as the seed does; reads are strongly consistent, so the driver sees what an executor just wrote.
"""

from __future__ import annotations

import json
from typing import Any

from pipeline.sources.kinesis.metadata import store_client
from pipeline.sources.kinesis.options import MetadataOptions

HASH, RANGE = "stream", "batchShard"


def _range(batch: int, shard_id: str = "") -> str:
    return f"{batch:020d}/{shard_id}"


class DynamoDbStore:
    def __init__(self, options: MetadataOptions) -> None:
        self.table, self.stream = options.table_name or "", options.stream_name
        self.address = f"DynamoDB table {self.table} at {options.endpoint_url or f'the AWS endpoint of {options.region}'}"
        self.dynamodb = store_client("dynamodb", options.region, options.endpoint_url)
        self._ready = False

    def get(self, batch: int, shard_id: str) -> dict[str, Any] | None:
        self._ensure_table()
        item = self.dynamodb.get_item(TableName=self.table, ConsistentRead=True,
                                      Key={HASH: {"S": self.stream}, RANGE: {"S": _range(batch, shard_id)}}).get("Item")
        return json.loads(item["record"]["S"]) if item else None

    def put(self, batch: int, shard_id: str, record: dict[str, Any]) -> None:
        self._ensure_table()
        self.dynamodb.put_item(TableName=self.table, Item={
            HASH: {"S": self.stream}, RANGE: {"S": _range(batch, shard_id)}, "record": {"S": json.dumps(record)}})

    def batch(self, batch: int) -> dict[str, dict[str, Any]]:
        items = self._query("begins_with(#r, :v)", _range(batch))
        return {item[RANGE]["S"].split("/", 1)[1]: json.loads(item["record"]["S"]) for item in items}

    def purge(self, below: int) -> int:
        items = self._query("#r < :v", _range(below))
        for item in items:
            self.dynamodb.delete_item(TableName=self.table, Key={HASH: item[HASH], RANGE: item[RANGE]})
        return len(items)

    def _query(self, condition: str, value: str) -> list[dict[str, Any]]:
        self._ensure_table()
        pages = self.dynamodb.get_paginator("query").paginate(
            TableName=self.table, ConsistentRead=True, KeyConditionExpression=f"#h = :h AND {condition}",
            ExpressionAttributeNames={"#h": HASH, "#r": RANGE},
            ExpressionAttributeValues={":h": {"S": self.stream}, ":v": {"S": value}})
        return [item for page in pages for item in page["Items"]]

    def _ensure_table(self) -> None:
        if self._ready:
            return
        try:
            self.dynamodb.describe_table(TableName=self.table)
        except self.dynamodb.exceptions.ResourceNotFoundException:
            try:
                self.dynamodb.create_table(
                    TableName=self.table, BillingMode="PAY_PER_REQUEST",
                    KeySchema=[{"AttributeName": HASH, "KeyType": "HASH"}, {"AttributeName": RANGE, "KeyType": "RANGE"}],
                    AttributeDefinitions=[{"AttributeName": HASH, "AttributeType": "S"},
                                          {"AttributeName": RANGE, "AttributeType": "S"}])
            except self.dynamodb.exceptions.ResourceInUseException:
                pass  # another task created it first
            self.dynamodb.get_waiter("table_exists").wait(TableName=self.table, WaiterConfig={"Delay": 1})
        self._ready = True
