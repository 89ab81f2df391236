"""Parse commitlog segments on executors: segment bytes -> ConsumeQueue runs or message rows.

A task parses its consecutive segments one after the other, each in chunks through pyarrow.fs (local,
HDFS, S3), so memory per task does not grow with the segment size. Two output modes over the same scanner
and dispatch rules:

- ``dispatch`` (the rebuild): the piece's ConsumeQueue units into a scratch file, each queue's together, and
  one CQ_RUN_SCHEMA row per run of consecutive queue offsets (PieceUnits): Spark moves a few rows, not the units;
- ``messages`` (catalog, audit): one MESSAGE_SCHEMA row per message record.

Either way each segment leaves two files in the scratch directory: its IndexFile entries in put order
(read by range by the IndexFile tasks, never shuffled) and its SegmentSummary (JSON). Both are written under
a temporary name and moved into place, so a task that runs twice leaves the same files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from storelib.broker.config import BrokerConfig
from storelib.broker.dispatch import Dispatch, dispatch_batch, rule_inputs
from storelib.broker.resync import DamagedMessage, Resync
from storelib.broker.rule_choice import RuleInputs
from storelib.broker.segments import (
    FINGERPRINT_COLUMNS,
    Damage,
    Piece,
    PieceSummary,
    Segment,
    SegmentSummary,
    fingerprint,
)
from storelib.broker.timers import timer_records
from storelib.constants import DLEDGER_ENTRY_HEADER, LMQ_PREFIX, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY
from storelib.formats import batchcq
from storelib.formats.consumequeue import CQ_STORE_UNIT_SIZE, encode_units
from storelib.formats.dledger import entry_damage
from storelib.formats.scanner import (
    COMMITLOG_FRAMING,
    DAMAGE_CRC,
    END_RANGE,
    END_UNREADABLE,
    Extents,
    RecordBatch,
    SegmentScanner,
    find_record_start,
)
from udfs.fs import local_extents, resolve, write_then_move
from udfs.schema import CQ_RUN_SCHEMA, INDEX_ENTRY_DTYPE, MESSAGE_SCHEMA, ArrowMap
from udfs.timers import write_records

MODES = ("dispatch", "messages")
#: bytes a parse task reads at a time: small enough that a batch's passes (walk, decode, properties, hashes) over
#: the same bytes find them in the core's cache (make bench measures the choice)
PARSE_CHUNK = 2 << 20
#: bytes of rows a parse task hands Spark at a time: each batch handed over has a fixed cost in pyspark's serializer
#: and the JVM's reader whatever its size, so chunks' rows (message rows, a batch per chunk; the runs of a task's
#: consecutive small segments, a batch per segment) are joined up to this
OUT_BATCH_BYTES = 8 << 20


def _strings(a: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.Array:
    """Arrow strings straight from the segment bytes at (start, length); null where start < 0."""
    valid = start >= 0
    length = np.where(valid, length, 0)
    offsets = np.concatenate(([0], np.cumsum(length))).astype(np.int32)
    data = a[np.repeat(start - offsets[:-1], length) + np.arange(offsets[-1])]
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    n = len(start)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data), bitmap, n - int(valid.sum()))


def message_rows(segment: str, b: RecordBatch, d: Dispatch) -> pa.RecordBatch:
    """One MESSAGE_SCHEMA row per message record."""
    n = len(b)
    counts = np.bincount(d.index_record, minlength=n)
    key_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int32)
    cols = {
        "segment": pa.array([segment] * n, pa.string()),
        "commitlog_offset": pa.array(b.physical_offset),
        "size": pa.array(b.total_size),
        "topic": pa.array(b.topic_names, pa.string()).take(pa.array(b.topic_code)),
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
        "key_hashes": pa.ListArray.from_arrays(pa.array(key_offsets), pa.array(d.index_key_hash, pa.int32())),
        "body_crc": pa.array(b.body_crc),
    }
    return pa.RecordBatch.from_arrays([cols[f.name] for f in MESSAGE_SCHEMA], schema=MESSAGE_SCHEMA)


def _queue_order(names: list[str], code: np.ndarray, first: np.ndarray, units: np.ndarray) -> np.ndarray:
    """Each unit's place in its queue: its queue offset, or in an LMQ queue its record's commitlog offset (the
    unit's first 8 bytes)."""
    lmq = np.array([n.startswith(LMQ_PREFIX) for n in names], bool)[code]
    if not lmq.any():
        return first
    return np.where(lmq, units[:, :8].copy().view(">i8").ravel(), first)


class PieceUnits:
    """The ConsumeQueue units of a piece's batches, kept until the piece ends (its units are ~3% of its bytes at
    723-byte records): then one scratch file in which each queue's units follow one another (``cq_units_path``),
    and one CQ_RUN_SCHEMA row per run of them, whose ``units_at`` says where its bytes are. Spark moves the rows
    only, not the units (one row per run of consecutive queue offsets, not one per record).

    ConsumeQueue and LMQ queues get 20-byte units (queue offset = position); a BatchCQ topic's queues get
    46-byte units whose queue offset is msgBaseOffset (the writer knows those topics from the config). A queue's
    units are in queue offset order, an LMQ queue's in commitlog order (its records' offsets may repeat or leave one
    out: QueueFiles ``at_write_position`` takes them as the broker dispatches them), so each run is both.
    """

    def __init__(self) -> None:
        self.names: dict[str, int] = {}  # queue name (topic or LMQ queue) -> its code in this piece
        self.parts: dict[int, list[tuple[np.ndarray, ...]]] = {CQ_STORE_UNIT_SIZE: [], batchcq.BCQ_STORE_UNIT_SIZE: []}

    def add(self, b: RecordBatch, d: Dispatch) -> None:
        """Take a batch's units: (queue code, queue id, first queue offset, next queue offset, bytes) per unit."""
        simple = np.flatnonzero(d.to_consume_queue & ~d.batch_cq)
        lmq_names = sorted(set(d.lmq.queue))
        codes = self._codes([*b.topic_names, *lmq_names])
        lmq_code = np.array([len(b.topic_names) + lmq_names.index(q) for q in d.lmq.queue], np.int64)
        rec = np.concatenate((simple, d.lmq.record))
        qo = np.concatenate((b.queue_offset[simple], d.lmq.queue_offset))
        units = encode_units(b.physical_offset[rec], b.total_size[rec], d.tags_code[rec])
        code = codes[np.concatenate((b.topic_code[simple], lmq_code)).astype(np.int64)]
        self._keep(CQ_STORE_UNIT_SIZE, code, np.concatenate((b.queue_id[simple], d.lmq.queue_id)), qo, qo + 1, units)
        bcq = np.flatnonzero(d.batch_cq)
        base, size = d.msg_base_offset[bcq], d.batch_size[bcq]
        ts = b.store_timestamp[bcq]
        units = batchcq.encode_units(b.physical_offset[bcq], b.total_size[bcq], d.tags_code[bcq], ts, base, size)
        self._keep(batchcq.BCQ_STORE_UNIT_SIZE, codes[b.topic_code[bcq]], b.queue_id[bcq], base, base + size, units)

    def _codes(self, names: list[str]) -> np.ndarray:
        """This piece's codes of a batch's queue names, by the batch's code."""
        return np.array([self.names.setdefault(n, len(self.names)) for n in names], np.int32)

    def _keep(self, unit: int, *columns: Any) -> None:
        *keys, units = columns
        self.parts[unit].append((*keys, np.frombuffer(units, np.uint8).reshape(-1, unit)))

    def write(self, scratch: str, piece: str, segment: str) -> pa.RecordBatch:
        """Write the units to ``piece``'s file in ``scratch`` (cq_units_path) and return their runs: consecutive
        queue offsets of one queue, a row each."""
        names = list(self.names)
        rows: list[tuple[str, int, int, int, int, int]] = []  # queue, queue id, first queue offset, count, units_at,
        # and the commitlog offset of the run's first unit
        data: list[bytes] = []
        at = 0
        for unit, parts in self.parts.items():
            if not parts:
                continue
            code, qid, first, nxt, units = (np.concatenate([p[k] for p in parts]) for k in range(5))
            order = np.lexsort((_queue_order(names, code, first, units), qid, code))  # stable: commitlog order
            code, qid, first, nxt = code[order], qid[order], first[order], nxt[order]
            new_run = np.ones(len(code), dtype=bool)
            new_run[1:] = (code[1:] != code[:-1]) | (qid[1:] != qid[:-1]) | (first[1:] != nxt[:-1])
            starts = np.flatnonzero(new_run)
            counts = np.diff(np.append(starts, len(code)))
            units = units[order]
            rows += zip(
                (names[c] for c in code[starts].tolist()),
                qid[starts].tolist(),
                first[starts].tolist(),
                counts.tolist(),
                (at + unit * starts).tolist(),
                units[starts, :8].copy().view(">i8").ravel().tolist(),  # a unit starts with its record's offset
            )
            data.append(units.tobytes())
            at += len(order) * unit
        write_then_move(*resolve(cq_units_path(scratch, piece)), b"".join(data))
        topic, queue_id, first_offset, count, units_at, commitlog_offset = zip(*rows) if rows else ((),) * 6
        cols = [
            pa.array([segment] * len(rows), pa.string()),
            pa.array([piece] * len(rows), pa.string()),
            pa.array(topic, pa.string()),
            pa.array(queue_id, pa.int32()),
            pa.array(first_offset, pa.int64()),
            pa.array(count, pa.int64()),
            pa.array(units_at, pa.int64()),
            pa.array(commitlog_offset, pa.int64()),
        ]
        return pa.RecordBatch.from_arrays(cols, schema=CQ_RUN_SCHEMA)


def index_entries(b: RecordBatch, d: Dispatch) -> bytes:
    """The batch's IndexFile entries in put order, packed as INDEX_ENTRY_DTYPE."""
    entries = np.empty(len(d.index_record), dtype=INDEX_ENTRY_DTYPE)
    entries["key_hash"] = d.index_key_hash
    entries["commitlog_offset"] = b.physical_offset[d.index_record]
    entries["store_timestamp"] = b.store_timestamp[d.index_record]
    return entries.tobytes()


def index_scratch_path(scratch_uri: str, segment: str) -> str:
    """Where a parse leaves a segment's IndexFile entries for the IndexFile tasks."""
    return f"{scratch_uri.rstrip('/')}/index-entries-{segment}"


def cq_units_path(scratch_uri: str, piece: str) -> str:
    """Where a parse leaves a piece's ConsumeQueue units for the writers (PieceUnits)."""
    return f"{scratch_uri.rstrip('/')}/cq-units-{piece}"


def dledger_units_path(scratch_uri: str, segment: str) -> str:
    """Where a parse leaves a DLedger segment's entry headers, as the index units they should have."""
    return f"{scratch_uri.rstrip('/')}/dledger-units-{segment}"


def entry_range(entries: list[np.ndarray]) -> dict[str, int]:
    """SegmentSummary's index and term of a DLedger segment's first and last entry (none: no fields)."""
    if not entries:
        return {}
    first, last = entries
    return {
        "first_entry_index": int(first["index"]),
        "first_entry_term": int(first["term"]),
        "last_entry_index": int(last["index"]),
        "last_entry_term": int(last["term"]),
    }


def summary_path(scratch_uri: str, segment: str) -> str:
    """Where a parse leaves a segment's SegmentSummary (JSON)."""
    return f"{scratch_uri.rstrip('/')}/summary-{segment}.json"


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


class _Tally:
    """What a piece's batches add up to, for its PieceSummary."""

    def __init__(self) -> None:
        self.index_entries = 0
        self.first_ts = 0
        self.last_message_offset = -1
        self.last_cq_ts = 0
        self.has_cq = False
        self.damage: list[Damage] = []
        self.columns = [(0, 0)] * len(FINGERPRINT_COLUMNS)  # (crc32, bytes) of each
        self.after: dict[int, int] = {}  # damaged record's offset -> message records at or after it
        self.inputs = RuleInputs()
        self.stretch_inputs: dict[int, RuleInputs] = {}  # by stretch (BrokerConfig.releaseStretches), when several
        self.entries: list[np.ndarray] = []  # DLedger segments: (first, last) entry units, for the summary
        self.crc_failed: dict[int, DamagedMessage] = {}  # records failing their BODYCRC by commitlog offset

    def add_entries(self, b: RecordBatch, units: np.ndarray) -> None:
        """Take a batch's DLedger entry headers (``b.entries``): damage where recovery would stop
        (``storelib.formats.dledger``)."""
        before = None if not self.entries else (int(self.entries[-1]["index"]), int(self.entries[-1]["term"]))
        for at, kind, detail in entry_damage(units, b.physical_offset - DLEDGER_ENTRY_HEADER, before):
            self.damage.append(Damage(kind, at, detail))
        self.entries = [self.entries[0] if self.entries else units[0], units[-1]]

    def add(self, b: RecordBatch, d: Dispatch, damaged: list[int], cfg: BrokerConfig, stretch: int = 0) -> None:
        """Take a batch (of the stretch ``stretch``); ``damaged``: the commitlog offsets of the damaged records found
        so far."""
        for k, name in enumerate(FINGERPRINT_COLUMNS):
            data = getattr(d if name in _DISPATCHED else b, name).tobytes()
            crc, size = self.columns[k]
            self.columns[k] = (zlib.crc32(data, crc), size + len(data))
        self.index_entries += len(d.index_key_hash)
        inputs = rule_inputs(d, cfg)
        self.inputs += inputs
        self.stretch_inputs[stretch] = self.stretch_inputs.get(stretch, RuleInputs()) + inputs
        if self.last_message_offset < 0:
            self.first_ts = int(b.store_timestamp[0])
        self.last_message_offset = int(b.physical_offset[-1])
        cq = np.flatnonzero(d.to_consume_queue)
        if len(cq):
            self.last_cq_ts = int(b.store_timestamp[cq[-1]])
            self.has_cq = True
        for i, value in d.bad_delay:
            offset = int(b.physical_offset[i])
            self.damage.append(Damage("bad-delay-level", offset, f"DELAY={value!r} is not an integer"))
        for i, detail in d.bad_crc_property:
            self.damage.append(
                Damage("crc-property-mismatch", int(b.physical_offset[i]), detail, messages=(named(b, d, i),))
            )
        for i in np.flatnonzero(~b.crc_ok).tolist():
            self.crc_failed[int(b.physical_offset[i])] = named(b, d, i)
        for offset in damaged + [x.commitlog_offset for x in self.damage]:
            self.after[offset] = self.after.get(offset, 0) + int((b.physical_offset >= offset).sum())


def named(b: RecordBatch, d: Dispatch, i: int) -> DamagedMessage:
    """The record ``i`` of a batch as a damaged record's finding names it (it frames: every field is read)."""
    uniq_start, uniq_len = d.values[PROPERTY_UNIQ_KEY]
    keys_start, keys_len = d.values[PROPERTY_KEYS]
    uniq, keys = b.text(uniq_start[i : i + 1], uniq_len[i : i + 1]) + b.text(keys_start[i : i + 1], keys_len[i : i + 1])
    return DamagedMessage(
        int(b.physical_offset[i]),
        int(b.queue_id[i]),
        int(b.queue_offset[i]),
        int(b.store_timestamp[i]),
        b.topic_names[int(b.topic_code[i])],
        uniq,
        keys,
    )


_DISPATCHED = {"tags_code", "index_key_hash"}  # fingerprinted columns of the Dispatch, the others the RecordBatch's


def parse_segment(seg: Segment, cfg: BrokerConfig, mode: str, scratch: str) -> Iterator[pa.RecordBatch]:
    """The rows of one whole segment (see the module docstring); its entries and summary go to ``scratch``."""
    return parse_piece(Piece(seg, 0, seg.size), cfg, mode, scratch)


def _scan(piece: Piece, cfg: BrokerConfig, stream: BinaryIO, extents: Extents | None) -> SegmentScanner | None:
    """The scanner of the piece's records, the stream moved to the first; None when no record starts in it."""
    seg = piece.segment
    start = 0
    if piece.lo:
        read_at = stream.read_at  # type: ignore[attr-defined]  # a random-access file
        found = find_record_start(read_at, seg.start, seg.size, piece.lo, extents=extents)
        if found is None:
            return None
        start = found
        stream.seek(start)
    stop = piece.hi if piece.number < piece.count - 1 else None
    check = cfg.checkCRCOnRecover
    resync = Resync() if seg.framing is COMMITLOG_FRAMING else None  # past damage (DLedger entries: not yet)
    framing = seg.framing
    return SegmentScanner(
        stream,
        seg.name,
        seg.start,
        seg.size,
        check,
        PARSE_CHUNK,
        framing=framing,
        start=start,
        stop=stop,
        resync=resync,
        extents=extents,
    )


def _damaged(scanner: SegmentScanner) -> list[int]:
    """Commitlog offsets of the damaged records and holes the scanner found so far."""
    holes = scanner.resync.holes if isinstance(scanner.resync, Resync) else []
    return [x.offset for x in scanner.damage] + [h.start for h in holes]


def parse_piece(piece: Piece, cfg: BrokerConfig, mode: str, scratch: str) -> Iterator[pa.RecordBatch]:
    """The rows of one piece of a segment (the whole segment, or a byte range: storelib.broker.segments.Piece); its
    entries and PieceSummary go to ``scratch`` under the piece's name."""
    reset_peak_rss()
    seg = piece.segment
    fs, path = resolve(seg.uri)
    sfs, entries_path = resolve(index_scratch_path(scratch, piece.name))
    sfs.create_dir(entries_path.rsplit("/", 1)[0], recursive=True)
    tally, scanner = _Tally(), None
    units_path = resolve(dledger_units_path(scratch, seg.name))[1] + ".tmp"
    dledger = seg.framing.header > 0
    units_out = sfs.open_output_stream(units_path) if dledger else contextlib.nullcontext()
    end = (END_RANGE, seg.start + piece.lo, "no record starts in this range")
    queued = PieceUnits()
    timers: list[pa.RecordBatch] = []  # the records of timers and delay levels (storelib.broker.timers)
    with sfs.open_output_stream(entries_path + ".tmp") as index_out, units_out as u:
        try:
            extents = local_extents(fs, path)  # where it has them, holes are jumped over: the stream must seek
            random_access = piece.lo or extents is not None
            with fs.open_input_file(path) if random_access else fs.open_input_stream(path) as stream:
                scanner = _scan(piece, cfg, stream, extents)
                for whole in scanner or ():
                    for stretch, lo, hi, c in cfg.stretch_parts(whole.physical_offset):
                        b = whole if hi - lo == len(whole) else whole.part(lo, hi)
                        d = dispatch_batch(b, c)
                        if mode == "dispatch":
                            queued.add(b, d)
                        else:
                            yield message_rows(seg.name, b, d)
                        index_out.write(index_entries(b, d))
                        found = timer_records(b)
                        if found is not None:
                            timers.append(found)
                        if b.entries is not None:  # a DLedger segment's: its units file is open
                            assert u is not None
                            u.write(b.entries.tobytes())
                            tally.add_entries(b, b.entries)
                        tally.add(b, d, _damaged(scanner) if scanner else [], c, stretch)
            if scanner is not None:
                assert scanner.end is not None  # set when the scan is done
                end = (scanner.end.reason, scanner.end.offset, scanner.end.detail)
        except OSError as exc:  # unreadable: reported as this segment's end, never a crashed job
            end = (END_UNREADABLE, max(seg.start, tally.last_message_offset), f"cannot read {seg.uri}: {exc}")
    sfs.move(entries_path + ".tmp", entries_path)
    write_records(scratch, piece.name, timers)
    if dledger:
        sfs.move(units_path, units_path.removesuffix(".tmp"))
    if mode == "dispatch":
        runs = queued.write(scratch, piece.name, seg.name)
        if runs.num_rows:
            yield runs
    _, spath = resolve(summary_path(scratch, piece.name))
    write_then_move(sfs, spath, _piece_summary(piece, scanner, tally, end).to_json().encode())


def _piece_summary(
    piece: Piece, scanner: SegmentScanner | None, tally: _Tally, end: tuple[str, int, str]
) -> PieceSummary:
    found = []
    for x in scanner.damage if scanner else []:
        message = tally.crc_failed.get(x.offset) if x.kind == DAMAGE_CRC else None
        found.append(Damage(x.kind, x.offset, x.detail, messages=(message,) if message else ()))
    if scanner is not None and isinstance(scanner.resync, Resync):
        found += [Damage.of_hole(h) for h in scanner.resync.holes]
    damage = [dataclasses.replace(x, messages_after=tally.after.get(x.commitlog_offset, 0)) for x in found]
    damage += [dataclasses.replace(x, messages_after=tally.after.get(x.commitlog_offset, 0)) for x in tally.damage]
    messages = scanner.messages if scanner else 0
    summary = SegmentSummary(
        segment=piece.segment.name,
        end_reason=end[0],
        end_offset=end[1],
        detail=end[2],
        messages=messages,
        index_entries=tally.index_entries,
        first_store_timestamp=tally.first_ts,
        last_store_timestamp=scanner.last_store_timestamp if scanner else 0,
        last_cq_store_timestamp=tally.last_cq_ts,
        last_message_offset=tally.last_message_offset,
        worker_peak_rss=peak_rss(),
        fingerprint=fingerprint(tally.columns, messages),
        damage=tuple(sorted(damage, key=lambda x: x.commitlog_offset)),
        rule_inputs=tally.inputs,
        stretch_inputs=tuple(sorted(tally.stretch_inputs.items())) if set(tally.stretch_inputs) - {0} else (),
        **entry_range(tally.entries),
    )
    start = None if scanner is None else piece.segment.start + scanner.start
    handoff = end[1] if end[0] == END_RANGE and scanner is not None else None
    return PieceSummary(piece.name, summary, start, handoff, tally.has_cq, tuple(tally.columns))


def segment_parser(cfg: BrokerConfig, mode: str, scratch: str, tasks: list[list[Piece]]) -> ArrowMap:
    """The ``mapInArrow`` function: task numbers (``id``) in, CQ_RUN_SCHEMA or MESSAGE_SCHEMA rows out; task k
    parses ``tasks[k]``, consecutive segments (or one byte range of one: storelib.broker.segments.plan_parse_tasks) in
    offset order."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")

    def pieces(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for k in batch.column("id").to_pylist():
                for piece in tasks[k]:
                    yield from parse_piece(piece, cfg, mode, scratch)

    return lambda batches: coalesce(pieces(batches))


def coalesce(batches: Iterator[pa.RecordBatch], max_bytes: int = OUT_BATCH_BYTES) -> Iterator[pa.RecordBatch]:
    """The same rows in order, consecutive batches joined while they hold less than ``max_bytes``."""
    held: list[pa.RecordBatch] = []
    size = 0
    for b in batches:
        held.append(b)
        size += b.nbytes
        if size >= max_bytes:
            yield pa.concat_batches(held)
            held, size = [], 0
    if held:
        yield pa.concat_batches(held)
