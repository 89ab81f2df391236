"""The message catalog: one Delta row per message of a store, for finding messages by key, time or queue.

Written by ``rmqstore rebuild --catalog TABLE`` from the rebuild's parsed records. Partitioned by
``store_id`` and ``store_date`` (the UTC day of ``store_timestamp``); within a day, files hold ranges of
(topic, queue_id, queue_offset), so a queue or time-range query reads few files. Rebuilding a store again
replaces that store's rows in one commit (the other stores' rows and the table's history stay).
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.delta import write_delta

PARTITION_BY = ["store_id", "store_date"]
SORT_BY = ["topic", "queue_id", "queue_offset"]
#: the record fields kept, in the broker's terms (see udfs.schema.MESSAGE_SCHEMA)
INDEX_FIELDS = [
    "topic",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "size",
    "tags_code",
    "tags",
    "keys",
    "uniq_key",
    "sys_flag",
    "born_timestamp",
    "store_timestamp",
    "segment",
    "to_consume_queue",
]
_STORE_ID = re.compile(r"[A-Za-z0-9._-]+")
_NOT_STORE_ID = re.compile(r"[^A-Za-z0-9._-]+")
_MS_PER_DAY = 86_400_000


def default_store_id(store: str) -> str:
    """A store id for a store path or URI when none is given: its characters outside ``[A-Za-z0-9._-]``
    runs turned into ``_`` (``s3a://backups/broker-a/store`` -> ``s3a_backups_broker-a_store``)."""
    return _NOT_STORE_ID.sub("_", store).strip("_") or "store"


def catalog_rows(records: DataFrame) -> DataFrame:
    """The catalog rows of a records DataFrame but ``store_id``: the message records, with the
    derived ``key_list`` (``keys`` split on single spaces, empties dropped, as the broker splits them for
    the IndexFile) and ``store_date`` (UTC)."""
    return records.select(
        *INDEX_FIELDS,
        F.filter(F.split(F.coalesce("keys", F.lit("")), " "), lambda k: k != "").alias("key_list"),
        F.date_from_unix_date(F.floor(F.col("store_timestamp") / _MS_PER_DAY).cast("int")).alias("store_date"),
    )


def write_catalog(spark: SparkSession, records_df: DataFrame, table: str, store_id: str) -> dict:
    """Replace ``store_id``'s rows of the catalog at ``table`` (created if missing) with ``records_df``'s messages.

    ``records_df`` has udfs.schema.MESSAGE_SCHEMA's columns. ``store_id`` names the store in the catalog
    (letters, digits, ``._-``; e.g. the broker name). Returns write_delta's dict (version, files, rows, engine).
    """
    if not _STORE_ID.fullmatch(store_id):
        raise ValueError(f"store id {store_id!r}: use only letters, digits, '.', '_' and '-'")
    rows = catalog_rows(records_df)
    ordered = rows.repartitionByRange("store_date", *SORT_BY).sortWithinPartitions("store_date", *SORT_BY)
    return write_delta(
        ordered,
        table,
        "overwrite",
        PARTITION_BY,
        replace={"store_id": store_id},
        metadata={"job": "rebuild", "store_id": store_id},
    )
