"""A bounded-memory scanner of CommitLog segments and DLedger data files: it reads a segment in chunks from any binary
stream, walks its records (``Framing``: plain records, or DLedger entries each holding one), decodes their fields into
``RecordBatch`` arrays and says where and why the records stop (``SegmentEnd``). The record layout:
storelib.formats.commitlog.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Protocol

import numpy as np

from storelib.constants import (
    BLANK_MAGIC_CODE,
    DLEDGER_BLANK_MAGIC,
    DLEDGER_ENTRY_HEADER,
    DLEDGER_ENTRY_MAGIC,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
)
from storelib.formats import kernel
from storelib.formats.commitlog import HEAD_WORDS, MIN_RECORD_SIZE, parse_properties
from storelib.formats.dledger import entry_units

#: why a segment's records stop
END_BLANK = "blank"  # a BLANK record: the normal end of a full segment
END_ZERO_TAIL = "zero-tail"  # TOTALSIZE or magic 0: preallocated, never written
END_EOF = "eof"  # records run exactly to the end of the file
END_TORN = "torn"  # a record runs past the end of the file
END_BAD_MAGIC = "bad-magic"  # neither a message, a BLANK nor zeros
END_BAD_SIZE = "bad-size"  # TOTALSIZE too small to be a record
END_BAD_BLANK = "bad-blank"  # a BLANK whose TOTALSIZE is not the bytes left
END_UNREADABLE = "unreadable"  # the file could not be read (permissions, I/O error)
END_RANGE = "range-end"  # a byte range's scan reached its end on a record: the next range's (never a segment's end)

#: record-level damage; the scan goes on after it by TOTALSIZE
DAMAGE_CRC = "crc-mismatch"
DAMAGE_LENGTH = "length-mismatch"


@dataclasses.dataclass(frozen=True)
class SegmentEnd:
    """Where and why the records of one segment stop."""

    file: str
    reason: str
    offset: int  # commitlog (physical) offset where valid records end
    detail: str = ""

    @property
    def clean(self) -> bool:
        return self.reason in (END_BLANK, END_ZERO_TAIL, END_EOF)


@dataclasses.dataclass(frozen=True)
class RecordDamage:
    """A record that framed correctly but failed a check; it is not dispatched (CRC: see scanner)."""

    file: str
    kind: str
    offset: int  # commitlog offset of the record
    detail: str


@dataclasses.dataclass
class RecordBatch:
    """Fixed fields of consecutive message records as numpy arrays, variable ones as lists."""

    physical_offset: np.ndarray  # int64, where the record really is
    total_size: np.ndarray  # int32
    body_crc: np.ndarray  # int32
    queue_id: np.ndarray  # int32
    flag: np.ndarray  # int32
    queue_offset: np.ndarray  # int64
    stored_physical_offset: np.ndarray  # int64, the PHYSICALOFFSET field
    sys_flag: np.ndarray  # int32
    born_timestamp: np.ndarray  # int64
    store_timestamp: np.ndarray  # int64
    reconsume_times: np.ndarray  # int32
    prepared_transaction_offset: np.ndarray  # int64
    body_length: np.ndarray  # int32
    crc_ok: np.ndarray  # bool; True when CRC checking is off
    topic_code: np.ndarray  # int32: index into topic_names
    topic_names: list[str]
    buf: np.ndarray  # uint8: the bytes the positions below point into
    topic_start: np.ndarray  # int64 positions in buf
    props_start: np.ndarray
    props_len: np.ndarray
    #: DLedger framing: each record's entry header as the index unit it should have
    #: (storelib.formats.dledger.UNIT_DTYPE)
    entries: np.ndarray | None = None
    record_start: np.ndarray | None = None  # int64 positions of the records in buf

    def __len__(self) -> int:
        return len(self.physical_offset)

    def part(self, lo: int, hi: int) -> RecordBatch:
        """Records ``lo`` up to ``hi`` of the batch (the same buffer and topic names)."""
        values: dict[str, Any] = {}  # each field, whatever its type
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            values[f.name] = v[lo:hi] if isinstance(v, np.ndarray) and f.name != "buf" else v
        return RecordBatch(**values)

    @functools.cached_property
    def topic(self) -> list[str]:
        """Each record's topic (built once per batch: callers index it per record)."""
        return np.array(self.topic_names, dtype=object)[self.topic_code].tolist()

    @functools.cached_property
    def properties(self) -> list[dict[str, str]]:
        """Every record's properties parsed one by one (``parse_properties``); dispatch does not need this."""
        raw = self.buf.tobytes()
        return [
            parse_properties(raw[s : s + n].decode("utf-8", "replace"))
            for s, n in zip(self.props_start.tolist(), self.props_len.tolist())
        ]

    def text(self, start: np.ndarray, length: np.ndarray) -> list[str | None]:
        """Strings at (start, length) positions of buf; None where start < 0."""
        raw = self.buf.tobytes() if len(start) else b""
        return [
            None if s < 0 else raw[s : s + n].decode("utf-8", "replace")
            for s, n in zip(start.tolist(), length.tolist())
        ]


#: why the walk stopped: (end reason, detail), or None and the bytes of the record (entry) to read whole
Check = tuple[tuple[str, str] | None, int]


def check_record(head: np.ndarray, left: int) -> Check:
    """Where the record walk stopped, from the record's first 8 bytes (``head``) and the bytes ``left`` in the
    segment: the module docstring's rules (a message, a BLANK of exactly the bytes left, or zeros)."""
    if left < 8:
        return ((END_TORN, f"{left} stray bytes at the end") if head.any() else (END_ZERO_TAIL, "")), 0
    total, magic = HEAD_WORDS.unpack_from(head.data)
    if magic in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        if total < MIN_RECORD_SIZE:
            return (END_BAD_SIZE, f"TOTALSIZE {total} is below the {MIN_RECORD_SIZE}-byte minimum"), 0
        if total > left:
            return (END_TORN, f"TOTALSIZE {total} runs {total - left} bytes past the end of the segment"), 0
        return None, total
    if magic == BLANK_MAGIC_CODE:
        if total != left:
            return (END_BAD_BLANK, f"BLANK TOTALSIZE {total}, but {left} bytes are left in the segment"), 0
        return (END_BLANK, ""), 0
    if total == 0 or magic == 0:
        return (END_ZERO_TAIL, ""), 0
    return (END_BAD_MAGIC, f"magic code 0x{magic & 0xFFFFFFFF:08X} (TOTALSIZE {total})"), 0


def check_entry(head: np.ndarray, left: int) -> Check:
    """Where the DLedger entry walk stopped, from the entry's first 56 bytes (``head``): an entry (magic 1, size =
    48 + the TOTALSIZE of the one message record it holds), the end mark (magic -1, then exactly the bytes left;
    zeros after it, no BLANK record), or zeros (``MmapFileList.preAppend``, ``DLedgerEntryCoder``)."""
    if left < 8:
        return check_record(head, left)
    magic, size = HEAD_WORDS.unpack_from(head.data)
    if magic == DLEDGER_BLANK_MAGIC:
        if size != left:
            return (END_BAD_BLANK, f"end-of-file mark says {size} bytes left, but {left} are"), 0
        return (END_BLANK, ""), 0
    if magic == 0 or size == 0:
        return (END_ZERO_TAIL, ""), 0
    if magic != DLEDGER_ENTRY_MAGIC:
        return (END_BAD_MAGIC, f"DLedger entry magic {magic} (size {size})"), 0
    if size > left:
        return (END_TORN, f"entry size {size} runs {size - left} bytes past the end of the file"), 0
    if size < DLEDGER_ENTRY_HEADER + MIN_RECORD_SIZE:
        return (END_BAD_SIZE, f"entry size {size} cannot hold a message record"), 0
    body = size - DLEDGER_ENTRY_HEADER
    stop, total = check_record(head[DLEDGER_ENTRY_HEADER:], body)
    if stop is None and total == body:
        return None, size
    if stop is None or stop[0] in (END_TORN, END_BAD_SIZE):
        total = HEAD_WORDS.unpack_from(head.data, DLEDGER_ENTRY_HEADER)[0]
        return (END_BAD_SIZE, f"entry size {size}, but its record's TOTALSIZE is {total}"), 0
    return (END_BAD_MAGIC, f"the entry holds no message record ({stop[1] or stop[0]})"), 0


@dataclasses.dataclass(frozen=True)
class Framing:
    """How message records sit in a segment file: alone one after the other (``commitlog/``), or each as the body
    of a DLedger entry (``dledger-<selfId>/data/``) whose PHYSICALOFFSET is the entry's pos + 48."""

    name: str
    header: int  # bytes before each record
    check: Callable[[np.ndarray, int], Check]


COMMITLOG_FRAMING = Framing("commitlog", 0, check_record)
DLEDGER_FRAMING = Framing("dledger", DLEDGER_ENTRY_HEADER, check_entry)


def length_mismatch(total: int, implied: int) -> str:
    """What a record whose fields add up to ``implied`` (``kernel.layout``; -1: they cannot be read) says."""
    sum_text = f"add up to {implied}" if implied >= 0 else "are negative or run past the record"
    return f"TOTALSIZE {total} but the fields {sum_text}"


class Resync(Protocol):
    """A search past damage (``storelib.broker.resync.Resync``): from the walk's stop at file position ``at``, the
    next record start, with the scanner's buffer moved there; None when the segment holds none."""

    reasons: frozenset[str]

    def past(
        self, sc: SegmentScanner, buf: np.ndarray, buf_pos: int, at: int, stop: tuple[str, str], last_taken: int
    ) -> tuple[np.ndarray, int, int] | None: ...

    def covered(
        self, sc: SegmentScanner, buf: np.ndarray, buf_pos: int, at: int, total: int
    ) -> tuple[np.ndarray, int, int] | None: ...


class Extents(Protocol):
    """Where a file's bytes are data and where holes (``lseek`` SEEK_DATA / SEEK_HOLE): a hole reads as zeros."""

    def data_after(self, pos: int) -> int | None:
        """The first position at or after ``pos`` that holds data; None when only a hole follows."""
        ...

    def hole_after(self, pos: int) -> int:
        """The first position at or after ``pos`` in a hole (the file's size when none)."""
        ...


#: bytes compared at once in a run of zeros (``first_nonzero``)
ZERO_BLOCK = 1 << 20
#: what the walk reads where a hole starts: enough to see the zeros there
PAGE = 4096


def first_nonzero(a: np.ndarray, lo: int) -> int:
    """The position of the first byte of ``a`` at or after ``lo`` that is not zero; ``len(a)`` when none."""
    for b in range(lo, len(a), ZERO_BLOCK):
        block = a[b : b + ZERO_BLOCK]
        if block.any():
            return b + int(np.flatnonzero(block)[0])
    return len(a)


class SegmentScanner:
    """Walk one commitlog segment (or DLedger data file: ``framing``) with bounded memory, yielding RecordBatch
    objects.

    Reads ``chunk_size`` bytes at a time from any binary stream (a local file, or a
    pyarrow stream on HDFS/S3): memory stays near ``chunk_size`` plus one record,
    whatever the segment size. After iteration, ``end`` says where and why records
    stop and ``damage`` lists records that failed a check. A CRC mismatch does not
    stop the scan (the record framed correctly; its header is intact): it is recorded
    and the batch marks it in ``crc_ok``. A record whose fields do not add up to its
    TOTALSIZE is recorded, left out of the batch, and the walk goes on by TOTALSIZE.

    A byte range of the segment: ``start`` (a file position where the walk from the segment's start has a record:
    ``find_record_start``) and ``stop`` (the range's end): the scan takes the records that start before
    ``stop``; when it gets to one at or after it, ``end`` is END_RANGE there (the next range's first record),
    and when the walk stops there instead, ``end`` says why, as the whole segment's scan would.
    The stream must be at ``start``.

    ``extents`` (a seekable stream's file, where the file system tells its holes): a read stops where a hole
    starts, and ``past_zeros`` jumps over holes instead of reading them.
    """

    def __init__(
        self,
        stream: BinaryIO,
        file: str,
        file_start_offset: int,
        file_size: int,
        check_crc: bool = True,
        chunk_size: int = 8 << 20,
        batch_records: int = 1 << 16,
        framing: Framing = COMMITLOG_FRAMING,
        start: int = 0,
        stop: int | None = None,
        resync: Resync | None = None,
        extents: Extents | None = None,
    ) -> None:
        self.stream = stream
        self.file = file
        self.base = file_start_offset
        self.file_size = file_size
        self.check_crc = check_crc
        self.chunk_size = chunk_size
        self.batch_records = batch_records
        self.framing = framing
        self.start = start
        self.stop = file_size if stop is None else min(stop, file_size)
        self.end: SegmentEnd | None = None
        self.damage: list[RecordDamage] = []
        self.messages = 0
        self.last_store_timestamp = 0
        self.resync = resync
        self.extents = extents

    def __iter__(self) -> Iterator[RecordBatch]:
        buf = np.zeros(0, dtype=np.uint8)
        buf_pos = self.start  # file position of buf[0]
        pos = self.start  # file position of the next record (DLedger: of the next entry)
        size = self.file_size
        header = self.framing.header
        positions = np.empty(self.batch_records, dtype=np.int64)  # of records in buf, relative to buf_pos
        count = 0
        last_taken = -1  # file position of the last record the walk took
        while True:
            left = size - pos
            if left == 0:
                self.end = SegmentEnd(self.file, END_EOF, self.base + pos)
                break
            # make sure the record header (8 bytes, after the entry header; or what is left) is in buf
            need = min(header + 8, left)
            if pos + need > buf_pos + len(buf):
                if count:
                    yield from self._decode(buf, buf_pos, positions[:count])
                    positions, count = np.empty(self.batch_records, dtype=np.int64), 0
                buf, buf_pos = self.refill(buf, buf_pos, pos, need)
                if pos + need > buf_pos + len(buf):
                    detail = f"file ends {size - (buf_pos + len(buf))} bytes short of its size"
                    self.end = SegmentEnd(self.file, END_TORN, self.base + pos, detail)
                    break
            # fast path: whole message records already in buf, walked by the kernel
            count, rel = kernel.walk(
                buf,
                pos - buf_pos,
                min(len(buf), size - buf_pos),
                positions,
                count,
                MIN_RECORD_SIZE,
                header,
                self.stop - buf_pos,
                self.resync is not None,  # stop at a record whose fields do not add up: Resync.covered looks inside it
            )
            if count:
                last_taken = buf_pos + int(positions[count - 1])
            if count == len(positions):
                pos = buf_pos + rel
                yield from self._decode(buf, buf_pos, positions)
                positions, count = np.empty(self.batch_records, dtype=np.int64), 0
                continue
            if pos != buf_pos + rel:
                pos = buf_pos + rel
                continue
            stop, need = self.framing.check(buf[rel : rel + min(size - pos, header + 8)], size - pos)
            if stop is None and self.resync is not None and pos < self.stop and pos + need <= buf_pos + len(buf):
                # the walk stopped at a whole record: its fields do not add up to its TOTALSIZE
                if count:
                    yield from self._decode(buf, buf_pos, positions[:count])
                    positions, count = np.empty(self.batch_records, dtype=np.int64), 0
                jump = self.resync.covered(self, buf, buf_pos, pos, need)
                if jump is None:  # taken by its TOTALSIZE, as a record that frames: _decode says the damage
                    positions[0], count, last_taken, pos = pos - buf_pos, 1, pos, pos + need
                else:
                    (buf, buf_pos, pos), last_taken = jump, -1
                continue
            if stop is not None and self.resync is not None and stop[0] in self.resync.reasons:
                if count:  # decoded first: the search needs the last sound record's store time and damage
                    yield from self._decode(buf, buf_pos, positions[:count])
                    positions, count = np.empty(self.batch_records, dtype=np.int64), 0
                jump = self.resync.past(self, buf, buf_pos, pos, stop, last_taken)
                if jump is not None:
                    buf, buf_pos, pos = jump
                    last_taken = -1
                    continue
            if stop is not None:
                self.end = SegmentEnd(self.file, stop[0], self.base + pos, stop[1])
                break
            if pos >= self.stop:  # a record the walk takes, at or after the range's end: the next range's
                self.end = SegmentEnd(self.file, END_RANGE, self.base + pos)
                break
            # the record straddles the end of buf: read on, then the fast path takes it
            if count:
                yield from self._decode(buf, buf_pos, positions[:count])
                positions, count = np.empty(self.batch_records, dtype=np.int64), 0
            buf, buf_pos = self.refill(buf, buf_pos, pos, need)
            if pos + need > buf_pos + len(buf):
                self.end = SegmentEnd(self.file, END_TORN, self.base + pos, "the file ends inside this record")
                break
        if count:
            yield from self._decode(buf, buf_pos, positions[:count])

    def refill(self, buf: np.ndarray, buf_pos: int, pos: int, need: int) -> tuple[np.ndarray, int]:
        """A new buffer from ``pos``: what buf holds from there, then reads until ``need`` bytes (at least a
        chunk) are in hand or the stream ends. Read straight into it (``readinto``): no copy of the chunk."""
        keep = buf[pos - buf_pos :]
        length = max(self.chunk_size, len(keep))
        if self.extents is not None:  # up to the next hole; in a hole, a page
            read_pos = pos + len(keep)
            length = min(length, len(keep) + max(self.extents.hole_after(read_pos) - read_pos, PAGE))
        new = np.empty(max(need, length), dtype=np.uint8)
        new[: len(keep)] = keep
        have = len(keep)
        view = new.data
        while have < len(new):
            got = self._read_into(view[have:])
            if not got:
                break
            have += got
        return new[:have], pos

    def past_zeros(self, buf: np.ndarray, buf_pos: int, q: int) -> tuple[np.ndarray, int, int] | None:
        """Past the zeros from file position ``q``: (buf, buf_pos, the first position a record can start at), that
        is 3 bytes before the first byte that is not zero (a record's TOTALSIZE holds its first such byte, its
        magic the next); None when only zeros follow to the end of the file. Holes are jumped over, not read."""
        while True:
            rel = first_nonzero(buf, max(q - buf_pos, 0))
            if rel < len(buf):
                return buf, buf_pos, max(q, buf_pos + rel - 3)
            end = buf_pos + len(buf)
            if end >= self.file_size:
                return None
            q = max(q, end - 3)
            data = self.extents.data_after(end) if self.extents is not None else end
            if data is None:
                return None
            if data - 3 > end:  # a hole: seek to the data after it
                q = data - 3
                self.stream.seek(q)
                buf, buf_pos = np.zeros(0, dtype=np.uint8), q
            buf, buf_pos = self.refill(buf, buf_pos, q, min(self.file_size - q, 8))
            if buf_pos + len(buf) <= end and len(buf) < 8:
                return None  # the file ends short of its size

    def _read_into(self, view: memoryview) -> int:
        """``readinto`` where the stream has it (files, pyarrow streams); a copy of ``read`` where not."""
        try:
            return self.stream.readinto(view) or 0  # type: ignore[attr-defined]  # BinaryIO does not declare it
        except (AttributeError, NotImplementedError, io.UnsupportedOperation):
            piece = self.stream.read(len(view))
            view[: len(piece)] = piece
            return len(piece)

    def _decode(self, a: np.ndarray, buf_pos: int, p: np.ndarray) -> Iterator[RecordBatch]:
        f = dict(zip(kernel.DECODED, kernel.decode(a, p, self.check_crc)))
        ok = f["implied_size"] == f["total_size"]
        if not ok.all():
            for i in np.flatnonzero(~ok).tolist():
                detail = length_mismatch(int(f["total_size"][i]), int(f["implied_size"][i]))
                self.damage.append(RecordDamage(self.file, DAMAGE_LENGTH, self.base + buf_pos + int(p[i]), detail))
            p, f = p[ok], {k: v[ok] for k, v in f.items()}
        if len(p) == 0:
            return
        crc_ok = np.ones(len(p), dtype=bool)
        if self.check_crc:
            crc_ok = f["computed_crc"] == f["body_crc"]
            for i in np.flatnonzero(~crc_ok).tolist():
                self.damage.append(
                    RecordDamage(
                        self.file,
                        DAMAGE_CRC,
                        self.base + buf_pos + int(p[i]),
                        f"BODYCRC {f['body_crc'][i]} stored, {f['computed_crc'][i]} computed",
                    )
                )
        topic_code, first = kernel.intern_runs(a, f["topic_start"], f["topic_len"])
        starts, lengths = f["topic_start"][first].tolist(), f["topic_len"][first].tolist()
        self.messages += len(p)
        self.last_store_timestamp = int(f["store_timestamp"][-1])
        yield RecordBatch(
            physical_offset=self.base + buf_pos + p,
            **{name: f[name] for name in kernel.DECODED[:12]},
            crc_ok=crc_ok,
            topic_code=topic_code,
            topic_names=[a[s : s + n].tobytes().decode("utf-8", "replace") for s, n in zip(starts, lengths)],
            buf=a,
            topic_start=f["topic_start"],
            props_start=f["props_start"],
            props_len=f["props_len"],
            entries=entry_units(a, p - self.framing.header) if self.framing.header else None,
            record_start=p,
        )


#: how far past a byte range's start ``find_record_start`` looks for its first record: more than a record's size
#: (the broker's maxMessageSize is 4 MiB by default)
FIND_WINDOW = 8 << 20


def find_record_start(
    read_at: Callable[[int, int], bytes],
    base: int,
    size: int,
    at: int,
    window: int = FIND_WINDOW,
    extents: Extents | None = None,
) -> int | None:
    """The file position of the first message record at or after ``at`` in a segment of ``size`` bytes at commitlog
    offset ``base``, as the records tell it (``kernel.find_record``: a record stores its own PHYSICALOFFSET, and the
    one after it agrees), within ``window`` bytes; None when none is found there. ``read_at(nbytes, offset)``.
    A hole (``extents``) is not read: no record starts more than 3 bytes before the data after it.

    A guess: the piece before (storelib.broker.segments.merge_pieces) says where its walk from the segment's start went.
    """
    start = at
    if extents is not None:
        data_at = extents.data_after(at)
        if data_at is None:
            return None
        start = max(at, data_at - 3)
    end = min(at + window, size)
    data = read_at(end - start, start) if end > start else b""
    a = np.frombuffer(data, dtype=np.uint8)
    q = kernel.find_record(a, 0, base + start, size - start, MIN_RECORD_SIZE)
    return None if q < 0 else start + int(q)


def find_properties(
    a: np.ndarray, start: np.ndarray, length: np.ndarray, names: tuple[str, ...], split_pairs: bool = False
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Value (start, length) in ``a`` of each named property of each record, start -1 when absent.

    ``string2messageProperties`` over the bytes: pieces split by ``\\x02``, the first ``\\x01`` of
    a piece ends its name; pieces with an empty name or an empty value are skipped and a later
    duplicate wins. ``split_pairs`` (releases before 4.9.1: ``piece.split("\\x01")`` must give two parts): a
    piece whose value holds another ``\\x01`` is skipped, trailing ``\\x01`` are dropped.
    """
    raw = [name.encode("utf-8") for name in names]
    name_bytes = np.frombuffer(b"".join(raw) or b"\0", dtype=np.uint8)
    name_end = np.cumsum([len(r) for r in raw], dtype=np.int64)
    starts, lengths = kernel.find_properties(
        a, kernel.as_int64(start), kernel.as_int64(length), name_bytes, name_end, split_pairs
    )
    return {name: (starts[j], lengths[j]) for j, name in enumerate(names)}
