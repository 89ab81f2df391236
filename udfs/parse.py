"""Parse commitlog segments on executors: segment bytes -> Arrow batches.

One task per segment; each reads its segment in chunks through pyarrow.fs (local, HDFS,
S3), so memory per task does not grow with the segment size. Two output modes over the
same scanner and dispatch rules:

- ``dispatch`` (the rebuild): per scanner batch, the ConsumeQueue units of each queue as
  packed runs (kind 3): a few rows per batch instead of one per message, so Spark moves
  bytes, not rows. The IndexFile entries, in put order, are streamed to a scratch file per
  segment, which the IndexFile tasks read by range: they never go through a shuffle;
- ``messages`` (catalog, audit): one row per message record (kind 0).
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from storelib.commitlog import END_UNREADABLE, RecordBatch, SegmentEnd, SegmentScanner
from storelib.config import BrokerConfig
from storelib.constants import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY
from storelib.consumequeue import encode_units
from storelib.dispatch import Dispatch, dispatch_batch
from udfs.fs import resolve
from udfs.schema import (
    INDEX_ENTRY_DTYPE,
    KIND_CQ_RUN,
    KIND_DAMAGE,
    KIND_MESSAGE,
    KIND_SEGMENT_END,
    RECORD_SCHEMA,
)

MODES = ("dispatch", "messages")


def _batch(cols: dict[str, pa.Array], n: int) -> pa.RecordBatch:
    """A RECORD_SCHEMA batch: columns not given are null."""
    arrays = [cols[f.name] if f.name in cols else pa.nulls(n, f.type) for f in RECORD_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=RECORD_SCHEMA)


def _row(**values: object) -> pa.RecordBatch:
    return _batch({k: pa.array([v], RECORD_SCHEMA.field(k).type) for k, v in values.items()}, 1)


def _strings(a: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.Array:
    """Arrow strings straight from the segment bytes at (start, length); null where start < 0."""
    valid = start >= 0
    length = np.where(valid, length, 0)
    offsets = np.concatenate(([0], np.cumsum(length))).astype(np.int32)
    data = a[np.repeat(start - offsets[:-1], length) + np.arange(offsets[-1])]
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    n = len(start)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data), bitmap, n - int(valid.sum()))


def _key_hash_lists(d: Dispatch, n: int) -> tuple[pa.Array, np.ndarray]:
    """Each record's index key hashes as a list column, and the number of entries before each record."""
    counts = np.bincount(d.index_record, minlength=n)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(d.index_key_hash, pa.int32())), offsets[:-1]


def message_rows(segment: str, b: RecordBatch, d: Dispatch, index_before: int) -> pa.RecordBatch:
    """One kind-0 row per message record."""
    n = len(b)
    key_hashes, before = _key_hash_lists(d, n)
    topics = pa.array(b.topic_names, pa.string()).take(pa.array(b.topic_code))
    cols = {
        "segment": pa.array([segment] * n, pa.string()),
        "kind": pa.array(np.full(n, KIND_MESSAGE, np.int8)),
        "commitlog_offset": pa.array(b.physical_offset),
        "size": pa.array(b.total_size),
        "topic": topics,
        "queue_id": pa.array(b.queue_id),
        "queue_offset": pa.array(b.queue_offset),
        "sys_flag": pa.array(b.sys_flag),
        "tags_code": pa.array(d.tags_code),
        "tags": _strings(b.buf, *d.values[PROPERTY_TAGS]),
        "keys": _strings(b.buf, *d.values[PROPERTY_KEYS]),
        "uniq_key": _strings(b.buf, *d.values[PROPERTY_UNIQ_KEY]),
        "born_timestamp": pa.array(b.born_timestamp),
        "store_timestamp": pa.array(b.store_timestamp),
        "to_consume_queue": pa.array(d.to_consume_queue),
        "crc_ok": pa.array(b.crc_ok),
        "multi_dispatch": pa.array(d.multi_dispatch),
        "key_hashes": key_hashes,
        "index_seq": pa.array(index_before + before.astype(np.int64)),
    }
    return _batch(cols, n)


def dispatch_rows(segment: str, b: RecordBatch, d: Dispatch) -> pa.RecordBatch:
    """Kind-3 rows: one per run of consecutive queue offsets of one queue, units as on disk."""
    cq = np.flatnonzero(d.to_consume_queue)
    code, qid, qo = b.topic_code[cq], b.queue_id[cq], b.queue_offset[cq]
    order = np.lexsort((qo, qid, code))  # stable within a queue: commitlog order
    cq, code, qid, qo = cq[order], code[order], qid[order], qo[order]
    new_run = np.ones(len(cq), dtype=bool)
    new_run[1:] = (code[1:] != code[:-1]) | (qid[1:] != qid[:-1]) | (qo[1:] != qo[:-1] + 1)
    starts = np.flatnonzero(new_run)
    ends = np.append(starts[1:], len(cq))
    units = encode_units(b.physical_offset[cq], b.total_size[cq], d.tags_code[cq])
    n = len(starts)
    cols = {
        "segment": pa.array([segment] * n, pa.string()),
        "kind": pa.array(np.full(n, KIND_CQ_RUN, np.int8)),
        "commitlog_offset": pa.array(b.physical_offset[cq[starts]]),
        "topic": pa.array([b.topic_names[c] for c in code[starts].tolist()], pa.string()),
        "queue_id": pa.array(qid[starts]),
        "queue_offset": pa.array(qo[starts]),
        "count": pa.array((ends - starts).astype(np.int64)),
        "data": pa.array([units[s * 20 : e * 20] for s, e in zip(starts.tolist(), ends.tolist())], pa.binary()),
    }
    return _batch(cols, n)


def index_entries(b: RecordBatch, d: Dispatch) -> bytes:
    """The batch's IndexFile entries in put order, packed as INDEX_ENTRY_DTYPE."""
    entries = np.empty(len(d.index_record), dtype=INDEX_ENTRY_DTYPE)
    entries["key_hash"] = d.index_key_hash
    entries["commitlog_offset"] = b.physical_offset[d.index_record]
    entries["store_timestamp"] = b.store_timestamp[d.index_record]
    return entries.tobytes()


def index_scratch_path(scratch_uri: str, segment: str) -> str:
    """Where a dispatch-mode parse leaves a segment's IndexFile entries for the IndexFile tasks."""
    return f"{scratch_uri.rstrip('/')}/index-entries-{segment}"


def reset_peak_rss() -> None:
    """Start a new peak-RSS measurement for this task (Linux: ``echo 5 > /proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss() -> int:
    """Peak RSS in bytes since reset_peak_rss (VmHWM), or of the whole process where that is not known."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def parse_segment(
    uri: str, segment: str, start: int, size: int, cfg: BrokerConfig, mode: str = "messages", scratch: str = ""
) -> Iterator[pa.RecordBatch]:
    """The rows of one segment (see the module docstring), then its damage rows and its end row.

    In dispatch mode the IndexFile entries go, in put order, to ``index_scratch_path(scratch,
    segment)`` (written under a temporary name, renamed when complete), not into rows.
    """
    reset_peak_rss()
    fs, path = resolve(uri)
    index_out = None
    if mode == "dispatch":
        sfs, spath = resolve(index_scratch_path(scratch, segment))
        sfs.create_dir(spath.rsplit("/", 1)[0], recursive=True)
        index_out = sfs.open_output_stream(spath + ".tmp")
    index_entries_written = 0
    last_message_offset = -1
    last_cq_ts = 0
    scanner = None
    try:
        with fs.open_input_stream(path) as stream:
            scanner = SegmentScanner(stream, segment, start, size, check_crc=cfg.checkCRCOnRecover)
            for b in scanner:
                d = dispatch_batch(b, cfg)
                if index_out is None:
                    yield message_rows(segment, b, d, index_entries_written)
                else:
                    yield dispatch_rows(segment, b, d)
                    index_out.write(index_entries(b, d))
                index_entries_written += len(d.index_key_hash)
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
        end = scanner.end
    except OSError as exc:  # unreadable: reported as this segment's end, never a crashed job
        end = SegmentEnd(segment, END_UNREADABLE, max(start, last_message_offset), f"cannot read {uri}: {exc}")
    if index_out is not None:
        index_out.close()
        sfs.move(spath + ".tmp", spath)
    for dmg in scanner.damage if scanner else []:
        yield _row(segment=segment, kind=KIND_DAMAGE, commitlog_offset=dmg.offset, reason=dmg.kind, detail=dmg.detail)
    assert end is not None
    yield _row(
        segment=segment,
        kind=KIND_SEGMENT_END,
        commitlog_offset=end.offset,
        reason=end.reason,
        detail=end.detail,
        index_seq=index_entries_written,
        messages=scanner.messages if scanner else 0,
        last_store_timestamp=scanner.last_store_timestamp if scanner else 0,
        last_cq_store_timestamp=last_cq_ts,
        last_message_offset=last_message_offset,
        worker_peak_rss=peak_rss(),
    )


def segment_parser(
    cfg: BrokerConfig, mode: str, scratch: str = ""
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: SEGMENT_SCHEMA rows in, RECORD_SCHEMA rows out."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    if mode == "dispatch" and not scratch:
        raise ValueError("dispatch mode needs a scratch directory for the IndexFile entries")

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for row in batch.to_pylist():
                yield from parse_segment(row["uri"], row["segment"], row["start"], row["size"], cfg, mode, scratch)

    return parse
