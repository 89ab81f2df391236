"""The timer store and the delay offsets on an executor: one task reads the store's timerlog/, timerwheel,
config/timercheck, config/delayOffset.json (and .bak) and the timer records the parse left in the scratch
directory, judges them (storelib.audit.timers) and, for a rebuild, writes the rebuilt timerwheel, timercheck and
delayOffset.json. It holds the timer records and one range of the timerlog at a time (the timerlog is folded range
by range: storelib.audit.timerfold)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from typing import TypedDict

import pyarrow as pa
import pyarrow.fs as pafs

from storelib.audit.timers import CHECKPOINT, DELAY_OFFSETS, WHEEL, Settings, TimerAudit, TimerStore, audit_timers
from storelib.broker import timers as rules
from storelib.formats import timerlog, timerwheel
from storelib.formats.rocksdbcq import RocksDBCopy
from storelib.layout import parse_offset_name
from udfs.fs import join, list_files, read_file, resolve, write_file, write_then_move
from udfs.schema import ArrowMap

RESULT_SCHEMA = pa.schema([("result", pa.string())])
RECORDS_PREFIX = "timer-records-"
PENDING_FILE = "pending.jsonl"


def records_path(scratch_uri: str, piece: str) -> str:
    """Where a parse leaves a piece's timer records (Arrow IPC; none when the piece has none)."""
    return f"{scratch_uri.rstrip('/')}/{RECORDS_PREFIX}{piece}"


def write_records(scratch_uri: str, piece: str, batches: list[pa.RecordBatch]) -> None:
    """A piece's timer records into the scratch directory (written under a temporary name, then moved)."""
    if not batches:
        return
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, rules.SCHEMA) as w:
        for b in batches:
            w.write_batch(b)
    write_then_move(*resolve(records_path(scratch_uri, piece)), sink.getvalue().to_pybytes())


def read_records(scratch_uri: str) -> pa.Table:
    """Every piece's timer records, in commitlog order."""
    fs, root = resolve(scratch_uri)
    tables = [
        pa.ipc.open_file(pa.py_buffer(read_file(fs, i.path))).read_all()
        for i in list_files(fs, root)
        if i.base_name.startswith(RECORDS_PREFIX) and not i.base_name.endswith(".tmp")
    ]
    table = pa.concat_tables(tables) if tables else rules.SCHEMA.empty_table()
    return table.sort_by("commitlog_offset")


def _text(fs: pafs.FileSystem, path: str) -> str | None:
    data = _bytes(fs, path)
    return data.decode("utf-8", "replace") if data is not None else None


def _bytes(fs: pafs.FileSystem, path: str) -> bytes | None:
    return read_file(fs, path) if fs.get_file_info(path).type == pafs.FileType.File else None


@dataclasses.dataclass(frozen=True)
class StoredLogFile:
    """A timerlog file of the store, walked range by range as it is read (timerlog.LogFile)."""

    fs: pafs.FileSystem
    path: str
    start: int
    size: int
    range_units: int = timerlog.RANGE_UNITS

    def ranges(self) -> Iterator[timerlog.Walk]:
        with self.fs.open_input_file(self.path) as f:
            read = f.read_at
            yield from timerlog.walk_ranges(lambda at, n: read(n, at), self.size, self.start, self.range_units)


def read_store(store_uri: str) -> TimerStore:
    """The store's timer files as they are (timerlog files walked as the broker's recovery walks them, range by
    range when the checks fold them)."""
    fs, root = resolve(store_uri)
    walks = []
    for info in sorted(list_files(fs, join(root, timerlog.DIR)), key=lambda i: i.base_name):
        start = parse_offset_name(info.base_name)
        if start is not None and info.type == pafs.FileType.File:
            walks.append(StoredLogFile(fs, info.path, start, info.size))
    snapshots = tuple(
        (i.base_name, read_file(fs, i.path))
        for i in list_files(fs, root)
        if timerwheel.snapshot_flag(i.base_name) is not None
    )
    return TimerStore(
        tuple(walks),
        _bytes(fs, join(root, WHEEL)),
        _bytes(fs, join(root, CHECKPOINT)),
        _text(fs, join(root, DELAY_OFFSETS)),
        _text(fs, join(root, DELAY_OFFSETS + ".bak")),
        snapshots,
        _rocksdb_timer_records(fs, root),
    )


def _rocksdb_timer_records(fs: pafs.FileSystem, root: str) -> int:
    """How many records the RocksDB timer store holds (a read-only copy is opened); -1 when there is none, or the
    store is not on a local filesystem."""
    path = join(root, rules.ROCKSDB_DIR)
    if not isinstance(fs, pafs.LocalFileSystem) or fs.get_file_info(join(path, "CURRENT")).type != pafs.FileType.File:
        return -1
    with RocksDBCopy(path) as db:
        if rules.ROCKSDB_TIMER_FAMILY not in db.db.list_cf(str(db.tmp) + "/db"):
            return -1
        return sum(1 for _ in db.items(rules.ROCKSDB_TIMER_FAMILY))


def write_rebuilt(out_uri: str, result: TimerAudit) -> list[str]:
    """The rebuilt timer files into ``out_uri`` (store-relative names): what the rebuild writes, recover's sources."""
    fs, root = resolve(out_uri)
    written = []
    if result.wheel is not None:
        write_file(fs, join(root, WHEEL), result.wheel)
        written.append(WHEEL)
    if result.checkpoint is not None:
        write_file(fs, join(root, CHECKPOINT), result.checkpoint.pack())
        written.append(CHECKPOINT)
    if result.delay_offsets is not None:
        write_file(fs, join(root, DELAY_OFFSETS), result.delay_offsets.encode())
        written.append(DELAY_OFFSETS)
    return written


def write_pending(uri: str, result: TimerAudit) -> None:
    """The pending messages as JSON lines (by due time): enough to send each again."""
    lines = [json.dumps(pending_line(m), ensure_ascii=False) + "\n" for m in sorted(result.pending(), key=_due)]
    fs, path = resolve(uri)
    write_file(fs, path, "".join(lines).encode())


def _due(m: rules.Message) -> tuple[int, int]:
    return m.due_ms, m.commitlog_offset


def pending_line(m: rules.Message) -> dict[str, object]:
    """One pending message: where it waits, where it goes, when, and its keys."""
    return {
        "kind": m.kind,
        "topic": m.real_topic,
        "queue_id": m.real_qid,
        "due_ms": m.due_ms,
        "uniq_key": m.uniq_key,
        "keys": m.keys,
        "tags": m.tags,
        "commitlog_offset": m.commitlog_offset,
    }


def timer_task(store: str, scratch: str, settings: Settings, out: str | None, pending_out: str | None) -> ArrowMap:
    """The ``mapInArrow`` function of the one timer task: judge the store's timer files; write the rebuilt ones
    into ``out`` (rebuild) and the pending messages into ``pending_out``; one JSON row (``TimerAudit`` less its
    bytes) out."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for _ in batch.column("id").to_pylist():
                result = audit_timers(read_store(store), read_records(scratch), settings)
                written = write_rebuilt(out, result) if out is not None else []
                if pending_out is not None:
                    write_pending(pending_out, result)
                row = json.dumps(summary(result, written))
                yield pa.RecordBatch.from_arrays([pa.array([row], pa.string())], schema=RESULT_SCHEMA)

    return run


def summary(result: TimerAudit, written: list[str]) -> dict[str, object]:
    """What the driver needs of a TimerAudit: findings, counts, the files recover writes, the cut, the delay
    table, the pending messages by real topic."""
    return {
        "findings": [f.to_dict() for f in result.findings],
        "counts": result.counts,
        "writes": result.writes,
        "written": written,
        "cut_at": result.cut_at,
        "delay_table": {str(k): v for k, v in result.delay_table.items()},
        "pending": pending_by_topic(result.pending()),
    }


class PendingTopic(TypedDict):
    """The pending messages of one kind (timer, delay) and real topic."""

    kind: str
    topic: str
    pending: int
    first_due_ms: int
    last_due_ms: int


def pending_by_topic(pending: list[rules.Message]) -> list[PendingTopic]:
    """Per kind (timer, delay) and real topic: how many messages are pending, the earliest and the latest due."""
    by: dict[tuple[str, str], list[int]] = {}
    for m in pending:
        by.setdefault((m.kind, m.real_topic), []).append(m.due_ms)
    return [
        {"kind": k, "topic": t, "pending": len(d), "first_due_ms": min(d), "last_due_ms": max(d)}
        for (k, t), d in sorted(by.items())
    ]
