"""Write ConsumeQueue and IndexFile files on executors, streaming, into the staging directory."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from storelib.config import BrokerConfig
from storelib.constants import HostileNameError
from storelib.consumequeue import QueueFiles, queue_dir
from storelib.findings import Finding
from storelib.indexfile import build_index_file
from udfs.fs import join, resolve, write_file
from udfs.schema import INDEX_SUMMARY_SCHEMA, QUEUE_SUMMARY_SCHEMA

ArrowMap = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def _runs(*keys: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of equal consecutive key tuples."""
    n = len(keys[0])
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(change)
    return list(zip(starts.tolist(), [*starts[1:].tolist(), n]))


class _QueueWriter:
    """One queue's files, written as each completes (memory: one ConsumeQueue file)."""

    def __init__(self, out_uri: str, topic: str, queue_id: int, file_size: int) -> None:
        self.topic, self.queue_id = topic, queue_id
        self.files = QueueFiles(file_size)
        self.names: list[str] = []
        self.refused: Finding | None = None
        self.fs, root = resolve(out_uri)
        try:
            self.dir = join(root, queue_dir(topic, queue_id))
        except HostileNameError as exc:
            self.refused = Finding(
                "hostile-topic-name", "error", "commitlog", exc.reason, topic=topic, queue_id=queue_id
            )

    def add(self, qo: np.ndarray, offset: np.ndarray, size: np.ndarray, tags_code: np.ndarray) -> None:
        if self.refused is None:
            self._write(self.files.add(qo, offset, size, tags_code))

    def _write(self, files: Iterator[tuple[str, bytes]]) -> None:
        for name, data in files:
            write_file(self.fs, join(self.dir, name), data)
            self.names.append(name)

    def finish(self) -> dict[str, object]:
        findings: list[dict[str, object]] = []
        if self.refused is not None:
            findings.append(self.refused.to_dict())
        else:
            self._write(self.files.finish())
        rel = f"consumequeue/{self.topic}/{self.queue_id}"
        for f in self.files.findings:
            what = "missing from" if f.kind == "queue-offset-gap" else "repeated in"
            findings.append(
                Finding(
                    f.kind,
                    "error",
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
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "entries": q.entries,
            "min_offset": q.min_offset if q.min_offset is not None else 0,
            "max_offset": q.next_offset if q.next_offset is not None else 0,
            "files": self.names,
            "findings": json.dumps(findings),
        }


def consume_queue_writer(out_uri: str, cfg: BrokerConfig) -> ArrowMap:
    """``mapInArrow`` over rows sorted by (topic, queue_id, queue_offset): write every queue's files.

    Input columns: topic, queue_id, queue_offset, commitlog_offset, size, tags_code.
    Output: one QUEUE_SUMMARY_SCHEMA row per queue.
    """
    file_size = cfg.cq_file_size

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        current: _QueueWriter | None = None
        done: list[dict[str, object]] = []
        for b in batches:
            if b.num_rows == 0:
                continue
            topic = b.column("topic").to_numpy(zero_copy_only=False)
            qid = b.column("queue_id").to_numpy()
            qo = b.column("queue_offset").to_numpy()
            off = b.column("commitlog_offset").to_numpy()
            size = b.column("size").to_numpy()
            tags = b.column("tags_code").to_numpy()
            for s, e in _runs(topic, qid):
                if current is None or (current.topic, current.queue_id) != (topic[s], int(qid[s])):
                    if current is not None:
                        done.append(current.finish())
                    current = _QueueWriter(out_uri, str(topic[s]), int(qid[s]), file_size)
                current.add(qo[s:e], off[s:e], size[s:e], tags[s:e])
        if current is not None:
            done.append(current.finish())
        if done:
            yield pa.RecordBatch.from_pylist(done, schema=QUEUE_SUMMARY_SCHEMA)

    return write


def index_file_writer(out_uri: str, cfg: BrokerConfig, plan: dict[int, tuple[str, tuple[int, int]]]) -> ArrowMap:
    """``mapInArrow`` over index entries sorted by (file_no, g): build and write each IndexFile.

    ``plan`` maps file_no to (file name, inherited (endPhyOffset, endTimestamp) of the
    previous file). Input columns: file_no, key_hash, commitlog_offset, store_timestamp.
    Output: one INDEX_SUMMARY_SCHEMA row per file.
    """

    def build(file_no: int, parts: list[pa.RecordBatch]) -> dict[str, object]:
        t = pa.Table.from_batches(parts)
        name, inherited = plan[file_no]
        header, data = build_index_file(
            t.column("key_hash").to_numpy(),
            t.column("commitlog_offset").to_numpy(),
            t.column("store_timestamp").to_numpy(),
            inherited,
            cfg,
        )
        fs, root = resolve(out_uri)
        write_file(fs, join(root, "index", name), data)
        return {"file_no": file_no, "name": name, **header.__dict__}

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        current: int | None = None
        parts: list[pa.RecordBatch] = []
        for b in batches:
            if b.num_rows == 0:
                continue
            file_no = b.column("file_no").to_numpy()
            for s, e in _runs(file_no):
                if current is not None and int(file_no[s]) != current:
                    yield pa.RecordBatch.from_pylist([build(current, parts)], schema=INDEX_SUMMARY_SCHEMA)
                    parts = []
                current = int(file_no[s])
                parts.append(b.slice(s, e - s))
        if current is not None:
            yield pa.RecordBatch.from_pylist([build(current, parts)], schema=INDEX_SUMMARY_SCHEMA)

    return write
