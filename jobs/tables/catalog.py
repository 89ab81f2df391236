"""The message catalog: one Delta row per message of a store, for finding messages by key, time or queue.

Written by ``rmqstore rebuild --catalog TABLE`` from the rebuild's parsed records, with delta-spark (see
jobs.tables.delta for who writes which table). Rows are identified by (``store_id``, ``commitlog_offset``); a rebuild
MERGEs its store's rows into the table: new records are inserted, changed ones updated, and rows of that store
id no longer in the store deleted, so a rerun never duplicates a row and leaves the other stores untouched.
The table is liquid-clustered by ``store_id``, ``store_date`` and ``keys`` (OPTIMIZE after a write that added files), so
files hold one store's days and ranges of keys: a look-up by store, day or key reads few files. delta-rs
reads it (writer features clustering and domainMetadata; no deletion vectors), but cannot write it.
"""

from __future__ import annotations

import json
import re
import uuid

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.tables.delta import find_commit, require_delta_spark, spark_path

CLUSTER_BY = ["store_id", "store_date", "keys"]
ROW_KEY = ["store_id", "commitlog_offset"]  # one message record of one store
TABLE_PROPERTIES = {"delta.enableDeletionVectors": "false"}  # delta-rs cannot open tables with deletion vectors
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
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
    """MERGE ``records_df``'s messages into the catalog at ``table`` (created if missing) as store ``store_id``.

    ``records_df`` has udfs.schema.MESSAGE_SCHEMA's columns. ``store_id`` names the store in the catalog
    (letters, digits, ``._-``; e.g. the broker name). Afterwards the table holds exactly the store's messages
    under that id. Returns ``{"version", "inserted", "updated", "deleted"}`` of the MERGE's commit.
    """
    if not _STORE_ID.fullmatch(store_id):
        raise ValueError(f"store id {store_id!r}: use only letters, digits, '.', '_' and '-'")
    require_delta_spark(spark)
    from delta.tables import DeltaTable

    rows = catalog_rows(records_df).select(F.lit(store_id).alias("store_id"), "*")
    path = spark_path(table)
    create = DeltaTable.createIfNotExists(spark).location(path).addColumns(rows.schema).clusterBy(*CLUSTER_BY)
    for key, value in TABLE_PROPERTIES.items():
        create = create.property(key, value)
    create.execute()
    same_store = f"t.store_id = '{store_id}'"
    unchanged = " AND ".join(f"t.`{c}` <=> s.`{c}`" for c in rows.columns)
    write_id = uuid.uuid4().hex
    spark.conf.set(_USER_METADATA, json.dumps({"job": "rebuild", "store_id": store_id, "write_id": write_id}))
    try:
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(rows.alias("s"), f"{same_store} AND " + " AND ".join(f"t.{c} = s.{c}" for c in ROW_KEY))
            .whenMatchedUpdateAll(condition=f"NOT ({unchanged})")
            .whenNotMatchedInsertAll()
            .whenNotMatchedBySourceDelete(condition=same_store)
            .execute()
        )
    finally:
        spark.conf.unset(_USER_METADATA)
    commit = find_commit(table, write_id)
    counts = {k: int(commit["metrics"].get(f"numTargetRows{k.title()}", 0)) for k in ("inserted", "updated", "deleted")}
    if int(commit["metrics"].get("numTargetFilesAdded", 0)):
        spark.sql(f"OPTIMIZE delta.`{path}`")  # clusters the files the MERGE wrote by CLUSTER_BY
    return {"version": commit["version"], **counts}
