"""Parse commitlog segments on executors: segment bytes -> Arrow batches of dispatch rows.

One task per segment; each reads its segment in chunks through pyarrow.fs (local, HDFS,
S3), so memory per task does not grow with the segment size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from storelib.commitlog import RecordBatch, SegmentScanner
from storelib.config import BrokerConfig
from storelib.dispatch import Dispatch, dispatch_batch
from udfs.fs import resolve
from udfs.schema import KIND_DAMAGE, KIND_MESSAGE, KIND_SEGMENT_END, RECORD_SCHEMA


def _message_rows(segment: str, b: RecordBatch, d: Dispatch, index_before: int) -> pa.RecordBatch:
    n = len(b)
    counts = np.bincount(d.index_record, minlength=n) if len(d.index_record) else np.zeros(n, np.int64)
    ends = np.cumsum(counts)
    offsets = np.concatenate(([0], ends)).astype(np.int32)
    key_hashes = pa.ListArray.from_arrays(pa.array(offsets), pa.array(d.index_key_hash, pa.int32()))
    cols = {
        "segment": pa.array([segment] * n, pa.string()),
        "kind": pa.array(np.full(n, KIND_MESSAGE, np.int8)),
        "commitlog_offset": pa.array(b.physical_offset),
        "size": pa.array(b.total_size),
        "topic": pa.array(b.topic, pa.string()),
        "queue_id": pa.array(b.queue_id),
        "queue_offset": pa.array(b.queue_offset),
        "sys_flag": pa.array(b.sys_flag),
        "tags_code": pa.array(d.tags_code),
        "tags": pa.array(d.tags, pa.string()),
        "keys": pa.array(d.keys, pa.string()),
        "uniq_key": pa.array(d.uniq_key, pa.string()),
        "born_timestamp": pa.array(b.born_timestamp),
        "store_timestamp": pa.array(b.store_timestamp),
        "to_consume_queue": pa.array(d.to_consume_queue),
        "crc_ok": pa.array(b.crc_ok),
        "multi_dispatch": pa.array(d.multi_dispatch),
        "key_hashes": key_hashes,
        "index_seq": pa.array(index_before + ends - counts),
    }
    return _batch(cols, n)


def _batch(cols: dict[str, pa.Array], n: int) -> pa.RecordBatch:
    """A RECORD_SCHEMA batch: columns not given are null."""
    arrays = [cols[f.name] if f.name in cols else pa.nulls(n, f.type) for f in RECORD_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=RECORD_SCHEMA)


def _row(**values: object) -> pa.RecordBatch:
    return _batch({k: pa.array([v], RECORD_SCHEMA.field(k).type) for k, v in values.items()}, 1)


def parse_segment(uri: str, segment: str, start: int, size: int, cfg: BrokerConfig) -> Iterator[pa.RecordBatch]:
    """Rows for every message record of one segment, then its damage rows and its end row."""
    fs, path = resolve(uri)
    index_entries = 0
    last_message_offset = -1
    last_cq_ts = 0
    with fs.open_input_stream(path) as stream:
        scanner = SegmentScanner(stream, segment, start, size, check_crc=cfg.checkCRCOnRecover)
        for b in scanner:
            d = dispatch_batch(b, cfg)
            yield _message_rows(segment, b, d, index_entries)
            index_entries += len(d.index_key_hash)
            last_message_offset = int(b.physical_offset[-1])
            cq = np.flatnonzero(d.to_consume_queue)
            if len(cq):
                last_cq_ts = int(b.store_timestamp[cq[-1]])
            for i, value in d.bad_delay:
                yield _row(
                    segment=segment,
                    kind=KIND_DAMAGE,
                    commitlog_offset=int(b.physical_offset[i]),
                    reason="bad-delay-level",
                    detail=f"DELAY={value!r} is not an integer",
                )
    for dmg in scanner.damage:
        yield _row(segment=segment, kind=KIND_DAMAGE, commitlog_offset=dmg.offset, reason=dmg.kind, detail=dmg.detail)
    end = scanner.end
    assert end is not None
    yield _row(
        segment=segment,
        kind=KIND_SEGMENT_END,
        commitlog_offset=end.offset,
        reason=end.reason,
        detail=end.detail,
        index_seq=index_entries,
        messages=scanner.messages,
        last_store_timestamp=scanner.last_store_timestamp,
        last_cq_store_timestamp=last_cq_ts,
        last_message_offset=last_message_offset,
    )


def segment_parser(cfg: BrokerConfig) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: SEGMENT_SCHEMA rows in, RECORD_SCHEMA rows out."""

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for row in batch.to_pylist():
                yield from parse_segment(row["uri"], row["segment"], row["start"], row["size"], cfg)

    return parse
