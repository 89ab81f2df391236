"""Write ConsumeQueue and IndexFile files on executors, streaming, into the staging directory."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from storelib.config import BrokerConfig
from storelib.constants import HostileNameError
from storelib.consumequeue import QueueFiles, queue_dir
from storelib.findings import Finding
from storelib.indexfile import IndexHeader, build_index_file_head, entries_per_file, index_file_size
from udfs.fs import join, resolve, write_file
from udfs.schema import INDEX_ENTRY_DTYPE, INDEX_SUMMARY_SCHEMA, QUEUE_SUMMARY_SCHEMA

ArrowMap = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


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

    def add_run(self, first_queue_offset: int, units: bytes) -> None:
        if self.refused is None:
            self._write(self.files.add_run(first_queue_offset, units))

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
    """``mapInArrow`` over runs sorted by (topic, queue_id, queue_offset): write every queue's files.

    Input columns: topic, queue_id, queue_offset (of a run's first unit), count, data (units).
    Output: one QUEUE_SUMMARY_SCHEMA row per queue.
    """
    file_size = cfg.cq_file_size

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        current: _QueueWriter | None = None
        done: list[dict[str, object]] = []
        for b in batches:
            for run in b.to_pylist():
                key = (run["topic"], run["queue_id"])
                if current is None or (current.topic, current.queue_id) != key:
                    if current is not None:
                        done.append(current.finish())
                    current = _QueueWriter(out_uri, *key, file_size)
                current.add_run(run["queue_offset"], run["data"])
        if current is not None:
            done.append(current.finish())
        if done:
            yield pa.RecordBatch.from_pylist(done, schema=QUEUE_SUMMARY_SCHEMA)

    return write


def _entries(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=INDEX_ENTRY_DTYPE)


INDEX_HEADER_FIELDS = tuple(f.name for f in dataclasses.fields(IndexHeader))


def index_part_name(file_no: int) -> str:
    """An IndexFile's name in the staging directory, until every file's first timestamp is known."""
    return f".part-{file_no:08d}"


def index_file_writer(out_uri: str, cfg: BrokerConfig) -> ArrowMap:
    """``mapInArrow`` over index runs sorted by (file_no, g): build and write each IndexFile.

    Input columns: file_no, g (of a run's first entry), count, data. A run may also hold the
    previous file's last entry, the file's inherited endPhyOffset/endTimestamp ((0, 0) for
    the first file). Output: one INDEX_SUMMARY_SCHEMA row per file.
    """
    per_file = entries_per_file(cfg.maxIndexNum)
    size = index_file_size(cfg.maxHashSlotNum, cfg.maxIndexNum)

    def build(file_no: int, parts: list[np.ndarray], inherited: tuple[int, int]) -> pa.RecordBatch:
        e = np.concatenate(parts)
        header, head = build_index_file_head(e["key_hash"], e["commitlog_offset"], e["store_timestamp"], inherited, cfg)
        fs, root = resolve(out_uri)
        write_file(fs, join(root, "index", index_part_name(file_no)), head, size)
        row = {"file_no": file_no, "first_store_timestamp": int(e["store_timestamp"][0]), **dataclasses.asdict(header)}
        return pa.RecordBatch.from_pylist([row], schema=INDEX_SUMMARY_SCHEMA)

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        current: int | None = None
        parts: list[np.ndarray] = []
        inherited = (0, 0)
        for b in batches:
            for run in b.to_pylist():
                file_no, g0 = run["file_no"], run["g"]
                if current is not None and file_no != current:
                    yield build(current, parts, inherited)
                    parts, inherited = [], (0, 0)
                current = file_no
                entries = _entries(run["data"])
                lo, hi = file_no * per_file, (file_no + 1) * per_file
                if g0 <= lo - 1 < g0 + run["count"]:
                    last = entries[lo - 1 - g0]
                    inherited = (int(last["commitlog_offset"]), int(last["store_timestamp"]))
                if g0 + run["count"] > lo:
                    parts.append(entries[max(g0, lo) - g0 : min(g0 + run["count"], hi) - g0])
        if current is not None:
            yield build(current, parts, inherited)

    return write
