"""Arrow schemas of what the executors hand back to Spark."""

from __future__ import annotations

import pyarrow as pa

#: rows produced by parsing commitlog segments (udfs.parse): in "messages" mode one per
#: message record (kind 0); in "dispatch" mode (the rebuild) packed runs instead: ConsumeQueue
#: units of one queue with consecutive queue offsets (kind 3). Both modes add one row per
#: damaged record (kind 2) and per segment end (kind 1).
KIND_MESSAGE = 0
KIND_SEGMENT_END = 1
KIND_DAMAGE = 2
KIND_CQ_RUN = 3

#: a dispatch-mode scratch file of IndexFile entries: one per index key, in put order (internal)
INDEX_ENTRY_DTYPE = [("key_hash", "<i4"), ("commitlog_offset", "<i8"), ("store_timestamp", "<i8")]

RECORD_SCHEMA = pa.schema(
    [
        ("segment", pa.string()),  # commitlog file name (20-digit start offset)
        ("kind", pa.int8()),
        ("commitlog_offset", pa.int64()),  # record / end-of-records / damaged record offset
        ("size", pa.int32()),  # TOTALSIZE
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),  # kind 3: queue offset of the first unit
        ("sys_flag", pa.int32()),
        ("tags_code", pa.int64()),
        ("tags", pa.string()),
        ("keys", pa.string()),
        ("uniq_key", pa.string()),
        ("born_timestamp", pa.int64()),
        ("store_timestamp", pa.int64()),
        ("to_consume_queue", pa.bool_()),
        ("crc_ok", pa.bool_()),
        ("multi_dispatch", pa.bool_()),
        ("key_hashes", pa.list_(pa.int32())),  # IndexFile keyHash of each key, in put order
        ("index_seq", pa.int64()),  # index entries before this record in its segment; kind 1: total
        ("reason", pa.string()),  # kind 1: why records stop; kind 2: damage kind
        ("detail", pa.string()),
        ("messages", pa.int64()),  # kind 1: message records in the segment
        ("last_store_timestamp", pa.int64()),  # kind 1: of the segment's last message
        ("last_cq_store_timestamp", pa.int64()),  # kind 1: of its last ConsumeQueue-dispatched message
        ("last_message_offset", pa.int64()),  # kind 1: commitlog offset of its last message record
        ("worker_peak_rss", pa.int64()),  # kind 1: peak RSS of the Python worker after this segment (bytes)
        ("count", pa.int64()),  # kind 3: units in data
        ("data", pa.binary()),  # kind 3: ConsumeQueue units as on disk
    ]
)

#: input of the parse stage: one row per commitlog segment
SEGMENT_SCHEMA = pa.schema(
    [("uri", pa.string()), ("segment", pa.string()), ("start", pa.int64()), ("size", pa.int64())]
)

#: one row per queue written by udfs.write.write_consume_queues
QUEUE_SUMMARY_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("entries", pa.int64()),
        ("min_offset", pa.int64()),
        ("max_offset", pa.int64()),  # one past the last queue offset
        ("files", pa.list_(pa.string())),
        ("findings", pa.string()),  # JSON list of storelib.findings.Finding dicts
    ]
)

#: one row per IndexFile written by udfs.write.write_index_files
INDEX_SUMMARY_SCHEMA = pa.schema(
    [
        ("file_no", pa.int64()),
        ("first_store_timestamp", pa.int64()),  # of its first entry: gives its name
        ("begin_timestamp", pa.int64()),
        ("end_timestamp", pa.int64()),
        ("begin_phy_offset", pa.int64()),
        ("end_phy_offset", pa.int64()),
        ("hash_slot_count", pa.int32()),
        ("index_count", pa.int32()),
    ]
)

#: one row per IndexFile to build: where its entries are in the segments' scratch files
INDEX_TASK_SCHEMA = pa.schema([("file_no", pa.int64()), ("plan", pa.string())])
