"""Arrow schemas of what the executors hand back to Spark, one per kind of result.

A parse task returns either ConsumeQueue runs (the rebuild) or message rows (catalog, audit); what it says
about each segment (storelib.broker.segments.SegmentSummary) and the IndexFile entries go to files in the work
directory instead, so no result is a union of unrelated columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa

#: what a ``mapInArrow`` task runs: the task's input batches in, its output batches out
ArrowMap = Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]

#: the rebuild's parse output: a run of ConsumeQueue units of one queue for consecutive queue offsets, as on disk,
#: in the scratch file of the piece that parsed them (udfs.parse.cq_units_path)
CQ_RUN_SCHEMA = pa.schema(
    [
        ("segment", pa.string()),  # commitlog file the run comes from
        ("piece", pa.string()),  # the parse piece whose scratch file holds the units
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),  # of the run's first unit
        ("count", pa.int64()),  # units: 20 bytes each (46 in a BatchCQ topic's queue)
        ("units_at", pa.int64()),  # where the run's first unit is in the piece's file
        ("commitlog_offset", pa.int64()),  # of the run's first unit's record: breaks ties between runs
    ]
)

#: one row per message record (catalog and audit)
MESSAGE_SCHEMA = pa.schema(
    [
        ("segment", pa.string()),  # commitlog file name (20-digit start offset)
        ("commitlog_offset", pa.int64()),
        ("size", pa.int32()),  # TOTALSIZE
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("sys_flag", pa.int32()),
        ("tags_code", pa.int64()),
        ("tags", pa.string()),
        ("keys", pa.string()),
        ("uniq_key", pa.string()),
        ("born_timestamp", pa.int64()),
        ("store_timestamp", pa.int64()),
        ("to_consume_queue", pa.bool_()),
        ("crc_ok", pa.bool_()),
        ("key_hashes", pa.list_(pa.int32())),  # IndexFile keyHash of each key, in put order
        ("body_crc", pa.int32()),  # BODYCRC as stored
    ]
)

#: a scratch file of IndexFile entries: one per index key, in put order (internal)
INDEX_ENTRY_DTYPE = [("key_hash", "<i4"), ("commitlog_offset", "<i8"), ("store_timestamp", "<i8")]

#: one row per queue written by udfs.write.consume_queue_writer
QUEUE_SUMMARY_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("entries", pa.int64()),
        ("min_offset", pa.int64()),
        ("max_offset", pa.int64()),  # one past the last queue offset
        ("files", pa.list_(pa.string())),
        ("last_commitlog_offset", pa.int64()),  # of its last unit: which segments touch the queue
        ("findings", pa.string()),  # JSON list of storelib.findings.Finding dicts
        ("loose_ends", pa.string()),  # storelib.formats.consumequeue.LooseEnds as JSON
    ]
)

#: a DLedger index file: built by a rebuild (units written), or a live one compared with it (first_bad, bad)
DLEDGER_INDEX_SCHEMA = pa.schema(
    [
        ("file", pa.string()),  # store-relative: dledger-<selfId>/index/<20-digit offset>
        ("units", pa.int64()),  # units up to the last entry's
        ("first_bad", pa.int64()),  # audit: first unit that differs, -1 none
        ("bad", pa.int64()),  # audit: units that differ
        ("live_size", pa.int64()),  # audit: the live file's size, -1 when it is missing
    ]
)

#: a message one store holds and the other lacks (rmqstore diff --out): what a producer sent, as the store holds it
MISSING_MESSAGE_SCHEMA = pa.schema(
    [
        ("store", pa.string()),  # the store that holds it, as given on the command line
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("commitlog_offset", pa.int64()),
        ("keys", pa.string()),
        ("tags", pa.string()),
        ("uniq_key", pa.string()),
        ("properties", pa.string()),  # PROPERTIES as stored: name \x01 value \x02 ...
        ("body", pa.binary()),
        ("flag", pa.int32()),
        ("sys_flag", pa.int32()),
        ("born_timestamp", pa.int64()),
        ("store_timestamp", pa.int64()),
    ]
)
