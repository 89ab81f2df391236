"""CommitLog segments: the message record codec and a bounded-memory segment scanner.

Record layout (v1, IPv4 hosts): TOTALSIZE i32, MAGICCODE i32, BODYCRC i32, QUEUEID i32,
FLAG i32, QUEUEOFFSET i64, PHYSICALOFFSET i64, SYSFLAG i32, BORNTIMESTAMP i64,
BORNHOST 4+4 (16+4 if SYSFLAG & 0x10), STORETIMESTAMP i64, STOREHOST 4+4 (16+4 if
SYSFLAG & 0x20), RECONSUMETIMES i32, PREPARED TRANSACTION OFFSET i64, BODYLENGTH i32 +
BODY, TOPICLENGTH i8 (v1) / i16 (v2) + TOPIC, PROPERTIESLENGTH i16 + PROPERTIES.

"When a record does not fit in the space left (it needs its own length plus 8 spare
bytes), the broker writes a BLANK record there": TOTALSIZE = bytes left, MAGIC = BLANK.
"A TOTALSIZE of 0 or a zero magic means nothing written yet".
"""

from __future__ import annotations

import dataclasses
import functools
import io
import ipaddress
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO, Protocol

import numpy as np

from storelib.constants import (
    BLANK_MAGIC_CODE,
    DLEDGER_BLANK_MAGIC,
    DLEDGER_ENTRY_HEADER,
    DLEDGER_ENTRY_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    FLAG_BORNHOST_V6,
    FLAG_STOREHOST_V6,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
)
from storelib.errors import StoreFormatError
from storelib.formats import kernel
from storelib.formats.dledger import entry_units

# Offsets of the fixed fields, valid up to BORNHOST.
OFF_TOTALSIZE = 0
OFF_MAGIC = 4
OFF_BODYCRC = 8
OFF_QUEUEID = 12
OFF_FLAG = 16
OFF_QUEUEOFFSET = 20
OFF_PHYSICALOFFSET = 28
OFF_SYSFLAG = 36
OFF_BORNTIMESTAMP = 40
OFF_BORNHOST = 48
#: bytes from BORNHOST's end to STOREHOST: STORETIMESTAMP
#: fields after STOREHOST: RECONSUMETIMES i32, PREPARED TRANSACTION OFFSET i64, BODYLENGTH i32
MIN_RECORD_SIZE = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2

_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP
_II = struct.Struct(">ii")


def host_length(sys_flag: int, flag_bit: int) -> int:
    """BORNHOST / STOREHOST length: 4-byte IPv4 + port, or 16-byte IPv6 + port."""
    return 20 if sys_flag & flag_bit else 8


def record_length(sys_flag: int, body_length: int, topic_length: int, properties_length: int, v2: bool) -> int:
    """``CommitLog.calMsgLength``: the TOTALSIZE implied by the variable parts."""
    return (
        4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + host_length(sys_flag, FLAG_BORNHOST_V6)
        + 8
        + host_length(sys_flag, FLAG_STOREHOST_V6)
        + 4
        + 8
        + 4
        + body_length
        + (2 if v2 else 1)
        + topic_length
        + 2
        + properties_length
    )


def body_crc(body: bytes) -> int:
    """BODYCRC: ``CRC32(body) & 0x7fffffff``."""
    return zlib.crc32(body) & 0x7FFFFFFF


# --- Properties ---------------------------------------------------------------------


def parse_properties(text: str) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties``: ``name\\x01value`` pieces split by ``\\x02``.

    Pieces without a separator, with an empty name or an empty value are skipped; a later
    duplicate name wins.
    """
    out: dict[str, str] = {}
    for piece in text.split(PROPERTY_SEPARATOR):
        name, _, value = piece.partition(NAME_VALUE_SEPARATOR)
        if name and value:
            out[name] = value
    return out


def format_properties(props: dict[str, str] | list[tuple[str, str]]) -> str:
    """4.9.8 ``messageProperties2String``: pairs joined by ``\\x02``, no separator after the last."""
    items = props.items() if isinstance(props, dict) else props
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in items)


# --- Hosts ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def encode_host(host: str) -> bytes:
    """``"10.0.0.1:10911"`` or ``"fd00::1:10911"`` (last colon splits the port) to address + port bytes."""
    addr, _, port = host.rpartition(":")
    return ipaddress.ip_address(addr.strip("[]")).packed + struct.pack(">i", int(port))


def decode_host(raw: bytes) -> str:
    addr = ipaddress.ip_address(raw[:-4])
    port = struct.unpack(">i", raw[-4:])[0]
    if addr.version == 6:
        # the broker prints IPv6 in Java's full form: 8 groups, no zero compression
        groups = struct.unpack(">8H", raw[:16])
        return ":".join(f"{g:x}" for g in groups) + f":{port}"
    return f"{addr}:{port}"


# --- One record -------------------------------------------------------------------------


@dataclasses.dataclass
class Message:
    """One message record, decoded; field names as in ``MessageExt``."""

    topic: str
    body: bytes = b""
    properties: str = ""
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    store_timestamp: int = 0
    store_host: str = "127.0.0.1:10911"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int | None = None  # None: computed from the body when encoding
    v2: bool = False

    def property_map(self) -> dict[str, str]:
        return parse_properties(self.properties)


@functools.lru_cache(maxsize=4096)
def _topic_field(topic: str, v2: bool) -> bytes:
    """TOPICLENGTH (i8, or i16 in v2) followed by the topic's UTF-8 bytes."""
    raw = topic.encode("utf-8")
    if not v2 and len(raw) > 127:
        raise StoreFormatError(f"topic of {len(raw)} bytes needs the v2 record layout")
    return struct.pack(">h" if v2 else ">b", len(raw)) + raw


_STORE_TS = struct.Struct(">q")
_MIDDLE = struct.Struct(">iqi")  # RECONSUMETIMES, PREPARED TRANSACTION OFFSET, BODYLENGTH
_PROPS_LEN = struct.Struct(">h")


def encode_message(m: Message) -> bytes:
    """The record bytes the broker writes for ``m`` (TOTALSIZE computed, BODYCRC if not given)."""
    topic = _topic_field(m.topic, m.v2)
    props = m.properties.encode("utf-8")
    born = encode_host(m.born_host)
    store = encode_host(m.store_host)
    sys_flag = (
        (m.sys_flag & ~(FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6))
        | (FLAG_BORNHOST_V6 if len(born) == 20 else 0)
        | (FLAG_STOREHOST_V6 if len(store) == 20 else 0)
    )
    if len(props) > 0x7FFF:
        raise StoreFormatError(f"properties of {len(props)} bytes exceed the int16 length field")
    topic_len = len(topic) - (2 if m.v2 else 1)
    total = record_length(sys_flag, len(m.body), topic_len, len(props), m.v2)
    crc = body_crc(m.body) if m.body_crc is None else m.body_crc
    magic = MESSAGE_MAGIC_CODE_V2 if m.v2 else MESSAGE_MAGIC_CODE
    head = _HEAD.pack(
        total, magic, crc, m.queue_id, m.flag, m.queue_offset, m.physical_offset, sys_flag, m.born_timestamp
    )
    middle = _MIDDLE.pack(m.reconsume_times, m.prepared_transaction_offset, len(m.body))
    return b"".join(
        (
            head,
            born,
            _STORE_TS.pack(m.store_timestamp),
            store,
            middle,
            m.body,
            topic,
            _PROPS_LEN.pack(len(props)),
            props,
        )
    )


def encode_blank(length: int) -> bytes:
    """A BLANK end-of-segment record: TOTALSIZE = ``length``, BLANK magic, then zeros."""
    if length < END_FILE_MIN_BLANK_LENGTH:
        raise StoreFormatError(f"a BLANK record needs 8 bytes, got {length}")
    return _II.pack(length, BLANK_MAGIC_CODE) + bytes(length - 8)


def decode_message(buf: bytes | memoryview, pos: int = 0, file: str = "") -> Message:
    """Decode the record at ``pos``; raises StoreFormatError on a bad magic or length."""
    total, magic = _II.unpack_from(buf, pos)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        raise StoreFormatError(f"bad magic code 0x{magic & 0xFFFFFFFF:08X}", file, pos)
    (_, _, crc, qid, flag, qoff, phys, sys_flag, born_ts) = _HEAD.unpack_from(buf, pos)
    p = pos + OFF_BORNHOST
    bl = host_length(sys_flag, FLAG_BORNHOST_V6)
    born = decode_host(bytes(buf[p : p + bl]))
    p += bl
    (store_ts,) = struct.unpack_from(">q", buf, p)
    p += 8
    sl = host_length(sys_flag, FLAG_STOREHOST_V6)
    store = decode_host(bytes(buf[p : p + sl]))
    p += sl
    reconsume, prepared, body_len = struct.unpack_from(">iqi", buf, p)
    p += 16
    body = bytes(buf[p : p + body_len])
    p += body_len
    v2 = magic == MESSAGE_MAGIC_CODE_V2
    (topic_len,) = struct.unpack_from(">h" if v2 else ">b", buf, p)
    p += 2 if v2 else 1
    topic = bytes(buf[p : p + topic_len]).decode("utf-8", "replace")
    p += topic_len
    (props_len,) = struct.unpack_from(">h", buf, p)
    p += 2
    props = bytes(buf[p : p + props_len]).decode("utf-8", "replace")
    p += props_len
    if p - pos != total:
        raise StoreFormatError(f"TOTALSIZE {total} but the fields add up to {p - pos}", file, pos)
    return Message(
        topic,
        body,
        props,
        qid,
        flag,
        qoff,
        phys,
        sys_flag,
        born_ts,
        born,
        store_ts,
        store,
        reconsume,
        prepared,
        crc,
        v2,
    )


# --- The segment scanner ------------------------------------------------------------------

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
        values = {}
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
    total, magic = _II.unpack_from(head)
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
    magic, size = _II.unpack_from(head)
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
        total = _II.unpack_from(head, DLEDGER_ENTRY_HEADER)[0]
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


class Resync(Protocol):
    """A search past damage (``storelib.formats.resync.Resync``): from the walk's stop at file position ``at``, the
    next record start, with the scanner's buffer moved there; None when the segment holds none."""

    reasons: frozenset[str]

    def past(
        self, sc: SegmentScanner, buf: np.ndarray, buf_pos: int, at: int, stop: tuple[str, str], last_taken: int
    ) -> tuple[np.ndarray, int, int] | None: ...


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
        new = np.empty(max(need, self.chunk_size, len(keep)), dtype=np.uint8)
        new[: len(keep)] = keep
        have = len(keep)
        view = memoryview(new)
        while have < len(new):
            got = self._read_into(view[have:])
            if not got:
                break
            have += got
        return new[:have], pos

    def _read_into(self, view: memoryview) -> int:
        """``readinto`` where the stream has it (files, pyarrow streams); a copy of ``read`` where not."""
        try:
            return self.stream.readinto(view) or 0
        except (AttributeError, NotImplementedError, io.UnsupportedOperation):
            piece = self.stream.read(len(view))
            view[: len(piece)] = piece
            return len(piece)

    def _decode(self, a: np.ndarray, buf_pos: int, p: np.ndarray) -> Iterator[RecordBatch]:
        f = dict(zip(kernel.DECODED, kernel.decode(a, p, self.check_crc)))
        ok = f["implied_size"] == f["total_size"]
        if not ok.all():
            for i in np.flatnonzero(~ok).tolist():
                implied = f["implied_size"][i]
                sum_text = f"add up to {implied}" if implied >= 0 else "are negative or run past the record"
                self.damage.append(
                    RecordDamage(
                        self.file,
                        DAMAGE_LENGTH,
                        self.base + buf_pos + int(p[i]),
                        f"TOTALSIZE {f['total_size'][i]} but the fields {sum_text}",
                    )
                )
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
    read_at: Callable[[int, int], bytes], base: int, size: int, at: int, window: int = FIND_WINDOW
) -> int | None:
    """The file position of the first message record at or after ``at`` in a segment of ``size`` bytes at commitlog
    offset ``base``, as the records tell it (``kernel.find_record``: a record stores its own PHYSICALOFFSET, and the
    one after it agrees), within ``window`` bytes; None when none is found there. ``read_at(nbytes, offset)``.

    A guess: the piece before (storelib.broker.segments.merge_pieces) says where its walk from the segment's start went.
    """
    data = read_at(min(window, size - at), at) if size > at else b""
    a = np.frombuffer(data, dtype=np.uint8)
    q = kernel.find_record(a, 0, base + at, size - at, MIN_RECORD_SIZE)
    return None if q < 0 else at + int(q)


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
