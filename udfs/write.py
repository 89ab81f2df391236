"""Write ConsumeQueue and IndexFile files on executors, streaming, into the staging directory."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from storelib.broker.config import BrokerConfig
from storelib.constants import LMQ_PREFIX
from storelib.errors import HostileNameError
from storelib.findings import Finding, finding
from storelib.formats.batchcq import BATCH_CONSUME_QUEUE, BCQ_STORE_UNIT_SIZE, BatchQueueFiles
from storelib.formats.consumequeue import (
    CONSUME_QUEUE,
    CQ_STORE_UNIT_SIZE,
    LooseEnds,
    Misplaced,
    QueueFiles,
    loose_ends,
    misplaced,
)
from storelib.formats.indexfile import (
    IndexHeader,
    IndexPlan,
    index_file_head_size,
    index_file_size,
    put_index_file_head,
)
from storelib.layout import commitlog_file, offset_file_name
from udfs.fs import join, resolve, write_file, write_in_place
from udfs.parse import cq_units_path, index_scratch_path
from udfs.schema import INDEX_ENTRY_DTYPE, QUEUE_SUMMARY_SCHEMA, ArrowMap


class _QueueWriter:
    """One queue's files, written as each completes (memory: one ConsumeQueue file): a ConsumeQueue, or a
    BatchConsumeQueue for a BatchCQ topic (``cfg.is_batch_cq``)."""

    def __init__(self, out_uri: str, topic: str, queue_id: int, cfg: BrokerConfig) -> None:
        self.topic, self.queue_id = topic, queue_id
        self.batch = cfg.is_batch_cq(topic)
        self.unit = BCQ_STORE_UNIT_SIZE if self.batch else CQ_STORE_UNIT_SIZE
        self.dense = cfg.dense_queue_offsets(topic)
        self.segment_size = cfg.mappedFileSizeCommitLog
        self.files = (
            BatchQueueFiles(cfg.mapperFileSizeBatchConsumeQueue)
            if self.batch
            else QueueFiles(cfg.cq_file_size, at_write_position=cfg.at_write_position(topic))
        )
        self.names: list[str] = []
        self.refused: Finding | None = None
        self.last_commitlog_offset = -1
        self.fs, root = resolve(out_uri)
        try:
            self.rel = (BATCH_CONSUME_QUEUE if self.batch else CONSUME_QUEUE).queue_dir(topic, queue_id)
            self.dir = join(root, self.rel)
        except HostileNameError as exc:
            self.refused = finding("hostile-topic-name", "commitlog", exc.reason, topic=topic, queue_id=queue_id)

    def add_run(self, first_queue_offset: int, units: bytes) -> None:
        """Units of consecutive queue offsets from ``first_queue_offset`` (a BatchConsumeQueue's carry their own)."""
        unit = self.unit
        self.last_commitlog_offset = int.from_bytes(units[-unit : -unit + 8], "big", signed=True)
        if self.refused is None:
            f = self.files
            files = f.add_run(units) if isinstance(f, BatchQueueFiles) else f.add_run(first_queue_offset, units)
            self._write(files)

    def _write(self, files: Iterator[tuple[str, bytes]]) -> None:
        for name, data in files:
            write_file(self.fs, join(self.dir, name), data, len(data))  # zeros after the last unit: a hole
            self.names.append(name)

    def finish(self) -> dict[str, object]:
        findings: list[dict[str, object]] = []
        if self.refused is not None:
            findings.append(self.refused.to_dict())
        else:
            self._write(self.files.finish())
        rel = "commitlog" if self.refused else self.rel
        for f in self.files.findings if self.dense else []:
            what = "missing from" if f.kind == "queue-offset-gap" else "repeated in"
            findings.append(
                finding(
                    f.kind,
                    rel,
                    f"{f.count} queue offset(s) from {f.queue_offset} {what} the commitlog",
                    topic=self.topic,
                    queue_id=self.queue_id,
                    queue_offset=f.queue_offset,
                    commitlog_offset=f.commitlog_offset,
                    count=f.count,
                ).to_dict()
            )
        q = self.files
        ends = LooseEnds()
        if self.dense and isinstance(q, QueueFiles) and not q.at_write_position:  # offsets its records claim
            placed = misplaced(q.findings, q.out_of_place)
            queue = (self.topic, self.queue_id)
            findings += [contradicted(queue, m, queue, self.segment_size).to_dict() for m in placed]
            ends = loose_ends(q, placed, lone=not self.topic.startswith(LMQ_PREFIX))
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "entries": q.entries,
            "min_offset": q.min_offset if q.min_offset is not None else 0,
            "max_offset": q.next_offset if q.next_offset is not None else 0,
            "files": self.names,
            "last_commitlog_offset": self.last_commitlog_offset,
            "findings": json.dumps(findings),
            "loose_ends": ends.to_json(),
        }


def contradicted(queue: tuple[str, int], m: Misplaced, named: tuple[str, int], segment_size: int) -> Finding:
    """``queue-header-contradicted``: the record at ``m.commitlog_offset`` belongs to ``queue`` at ``m.queue_offset``
    (the records around it there leave that offset free), but its header names ``named`` and ``m.claimed``."""
    (topic, queue_id), (other, other_id) = queue, named
    fields = ([f"topic {other}"] if other != topic else []) + ([f"QUEUEID {other_id}"] if other_id != queue_id else [])
    fields += [f"QUEUEOFFSET {m.claimed}"] if m.claimed != m.queue_offset else []
    base = m.commitlog_offset // segment_size * segment_size
    return finding(
        "queue-header-contradicted",
        commitlog_file(offset_file_name(base)),
        f"the record at commitlog offset {m.commitlog_offset} holds {', '.join(fields)}, but the records of "
        f"{topic}/{queue_id} before and after it in the log hold queue offsets {m.queue_offset - 1} and "
        f"{m.queue_offset + 1}: it is {topic}/{queue_id} queue offset {m.queue_offset}",
        topic=topic,
        queue_id=queue_id,
        queue_offset=m.queue_offset,
        commitlog_offset=m.commitlog_offset,
        file_offset=m.commitlog_offset - base,
        expected=f"{topic}/{queue_id} queue offset {m.queue_offset}",
        actual=f"{other}/{other_id} queue offset {m.claimed}",
    )


class _PieceFiles:
    """The parse's unit files (udfs.parse.cq_units_path) a writer task reads runs from, each opened once."""

    def __init__(self, scratch: str) -> None:
        self.scratch = scratch
        self.open: dict[str, Any] = {}

    def read(self, piece: str, at: int, size: int) -> bytes:
        if piece not in self.open:
            fs, path = resolve(cq_units_path(self.scratch, piece))
            self.open[piece] = fs.open_input_file(path)
        data = self.open[piece].read_at(size, at)
        if len(data) != size:
            raise EOFError(f"{cq_units_path(self.scratch, piece)}: {size} bytes at {at} asked, {len(data)} there")
        return data

    def close(self) -> None:
        for f in self.open.values():
            f.close()


def consume_queue_writer(out_uri: str, scratch: str, cfg: BrokerConfig) -> ArrowMap:
    """``mapInArrow`` over runs sorted by jobs.pipeline.consume_queues.QUEUE_ORDER: write every queue's files.

    Input columns: topic, queue_id, queue_offset (of a run's first unit), count, and where its units are: piece,
    units_at (udfs.parse.PieceUnits). Output: one QUEUE_SUMMARY_SCHEMA row per queue.
    """

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        current: _QueueWriter | None = None
        done: list[dict[str, object]] = []
        units = _PieceFiles(scratch)
        try:
            for b in batches:
                for run in b.to_pylist():
                    key = (run["topic"], run["queue_id"])
                    if current is None or (current.topic, current.queue_id) != key:
                        if current is not None:
                            done.append(current.finish())
                        current = _QueueWriter(out_uri, *key, cfg)
                    data = units.read(run["piece"], run["units_at"], run["count"] * current.unit)
                    current.add_run(run["queue_offset"], data)
        finally:
            units.close()
        if current is not None:
            done.append(current.finish())
        if done:
            yield pa.RecordBatch.from_pylist(done, schema=QUEUE_SUMMARY_SCHEMA)

    return write


_ENTRY_SIZE = np.dtype(INDEX_ENTRY_DTYPE).itemsize


def index_part_name(file_no: int) -> str:
    """An IndexFile's name in the staging directory, until every file's first timestamp is known."""
    return f".part-{file_no:08d}"


def read_entries(uri: str, first: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
    """Entries [first, stop) of a segment's scratch file of IndexFile entries, read straight into ``out`` (a new
    array when None)."""
    out = np.empty(stop - first, dtype=INDEX_ENTRY_DTYPE) if out is None else out
    fs, path = resolve(uri)
    with fs.open_input_file(path) as f:
        f.seek(first * _ENTRY_SIZE)
        view = out.view(np.uint8).data
        have = 0
        while have < len(view):
            got = f.readinto(view[have:])
            if not got:
                raise EOFError(f"{uri}: {len(view) - have} bytes of IndexFile entries missing")
            have += got
    return out


def planned_entries(scratch: str, plan: IndexPlan) -> np.ndarray:
    """One IndexFile's entries in put order: its slices of the segments' scratch files, read into one array."""
    out = np.empty(sum(stop - first for _, first, stop in plan.slices), dtype=INDEX_ENTRY_DTYPE)
    at = 0
    for segment, first, stop in plan.slices:
        read_entries(index_scratch_path(scratch, segment), first, stop, out[at : at + stop - first])
        at += stop - first
    return out


def write_index_file(
    out_uri: str, file_no: int, entries: np.ndarray, inherited: tuple[int, int], cfg: BrokerConfig
) -> IndexHeader:
    """IndexFile ``file_no`` under ``out_uri``/index from its ``entries`` (INDEX_ENTRY_DTYPE, in put order; none
    for the broker's empty successor file), its head built in place (udfs.fs.write_in_place); its header."""
    fs, root = resolve(out_uri)
    return write_in_place(
        fs,
        join(root, "index", index_part_name(file_no)),
        index_file_size(cfg.maxHashSlotNum, cfg.maxIndexNum),
        index_file_head_size(len(entries), cfg),
        lambda out: put_index_file_head(
            out, entries["key_hash"], entries["commitlog_offset"], entries["store_timestamp"], inherited, cfg
        ),
    )


def build_index_file(
    out_uri: str, scratch: str, cfg: BrokerConfig, file_no: int, plan: IndexPlan
) -> tuple[int, IndexHeader]:
    """IndexFile ``file_no`` under ``out_uri``/index from its entries: ``plan`` says where they are (the slices of the
    segments' scratch files, udfs.parse.index_scratch_path) and which entry ended the previous file, whose
    endPhyOffset/endTimestamp this one starts from. Its first entry's store timestamp (which names it) and header."""
    e = planned_entries(scratch, plan)
    inherited = (0, 0)
    if plan.inherited:
        seg, at = plan.inherited
        last = read_entries(index_scratch_path(scratch, seg), at, at + 1)[0]
        inherited = (int(last["commitlog_offset"]), int(last["store_timestamp"]))
    return int(e["store_timestamp"][0]), write_index_file(out_uri, file_no, e, inherited, cfg)
