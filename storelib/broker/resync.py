"""Scanning past damage: where a record does not frame, the next record start the records themselves prove.

The broker's recovery stops at the first record ``checkMessageAndReturnSize`` rejects; the records after it are
still where they were written. A record starts at file position ``q`` of a segment at commitlog offset ``base``
when all of these hold there:

- its MAGICCODE is a message magic (v1 or v2) and its PHYSICALOFFSET field is ``base + q`` (the broker writes each
  record's own commitlog offset into it), its TOTALSIZE is at least a record's minimum and frames inside the
  segment (and inside ``MAX_RECORD``), its fields add up to it, its BODYCRC matches its body, a ``__CRC32#``
  property (5.2+) where present matches its first TOTALSIZE - 20 bytes, and its STORETIMESTAMP is not before the
  last sound record's before the damage (what a truncation left behind is older than what was written after it:
  two such records one after the other end the search, ``left_behind``);
- or it is the segment's end-of-file BLANK: the BLANK magic with TOTALSIZE exactly the bytes left.

The search goes byte by byte (records are not aligned), vectorised: zeros passed over (holes jumped, not read:
``SegmentScanner.past_zeros``), then positions whose magic bytes match, then their PHYSICALOFFSET, then the full
check of the few left. Memory stays within the scanner's chunk plus one record.
What lies between is a ``Hole``: its byte range and, best effort, what can still be read of each message whose
header it holds (never trusted for writing).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import TYPE_CHECKING

import numpy as np

from storelib.broker.dispatch import computed_property_crc, property_crc
from storelib.constants import (
    BLANK_MAGIC_CODE,
    FLAG_BORNHOST_V6,
    FLAG_STOREHOST_V6,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_CRC32,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
)
from storelib.formats import kernel
from storelib.formats.commitlog import MIN_RECORD_SIZE, host_length, parse_properties
from storelib.formats.scanner import (
    DAMAGE_LENGTH,
    END_BAD_BLANK,
    END_BAD_MAGIC,
    END_BAD_SIZE,
    END_TORN,
    END_ZERO_TAIL,
    FIND_WINDOW,
    length_mismatch,
)

if TYPE_CHECKING:
    from storelib.formats.scanner import SegmentScanner

#: the finding kind of a Hole (storelib.findings.KINDS)
DAMAGED_RECORDS = "damaged-records"
#: the walk's stops a search past damage starts from (a BLANK or the end of the file end a segment cleanly)
RESYNC_REASONS = frozenset((END_BAD_MAGIC, END_BAD_SIZE, END_BAD_BLANK, END_TORN, END_ZERO_TAIL))
#: the largest TOTALSIZE a record found past damage may have: more than the broker's maxMessageSize (4 MiB)
MAX_RECORD = FIND_WINDOW
#: messages of one hole listed by what is left of them; the others are counted
MAX_LISTED = 1000
_MAGICS = [struct.pack(">i", m) for m in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE)]
_MESSAGE_MAGICS = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)
_FIRST_BYTES = np.array(sorted({m[0] for m in _MAGICS}), dtype=np.uint8)
_PHYS = 28  # PHYSICALOFFSET's position in a record
_HEAD = 36  # bytes up to PHYSICALOFFSET's end


@dataclasses.dataclass(frozen=True)
class DamagedMessage:
    """What can still be read of a message record inside damage (None: not readable); never trusted for writing."""

    commitlog_offset: int
    queue_id: int | None = None
    queue_offset: int | None = None
    store_timestamp: int | None = None
    topic: str | None = None
    uniq_key: str | None = None
    keys: str | None = None

    def describe(self) -> str:
        """``TopicA/3 queue offset 17 UNIQ_KEY … KEYS … stored at …`` with whatever is known."""
        parts = [f"at {self.commitlog_offset}"]
        if self.topic is not None or self.queue_id is not None:
            parts.append(f"{self.topic or '?'}/{self.queue_id if self.queue_id is not None else '?'}")
        for name, value in (
            ("queue offset", self.queue_offset),
            ("UNIQ_KEY", self.uniq_key),
            ("KEYS", self.keys),
            ("store time", self.store_timestamp),
        ):
            if value is not None:
                parts.append(f"{name} {value}")
        return " ".join(parts)


@dataclasses.dataclass(frozen=True)
class Hole:
    """Damaged bytes [start, end) (commitlog offsets) of one segment: records there do not frame (``reason``,
    ``detail``: where the walk stopped); ``end`` is the next sound record (or the end-of-file BLANK)."""

    file: str
    start: int
    end: int
    reason: str
    detail: str
    messages: tuple[DamagedMessage, ...] = ()
    unlisted: int = 0  # further record headers in the hole, not listed (MAX_LISTED)


def _i32(a: np.ndarray, p: int) -> int:
    return int.from_bytes(a[p : p + 4].tobytes(), "big", signed=True)


def _i64(a: np.ndarray, p: int) -> int:
    return int.from_bytes(a[p : p + 8].tobytes(), "big", signed=True)


def _older(a: np.ndarray, q: int, last_store_timestamp: int) -> bool:
    """The record header at ``q`` holds a STORETIMESTAMP before ``last_store_timestamp``."""
    message = read_what_is_left(a[q:], 0, 0)
    return message.store_timestamp is not None and 0 <= message.store_timestamp < last_store_timestamp


def left_behind(a: np.ndarray, q: int, last_store_timestamp: int) -> bool:
    """The record header at ``q`` starts what a truncation left behind: it and the record its TOTALSIZE leads to
    (whose header ``a`` holds, its PHYSICALOFFSET that far on) were both stored before ``last_store_timestamp``. One
    older header alone is damage like any other (a store time flipped where no CRC looks)."""
    total = _i32(a, q)
    nxt = q + total
    if total < MIN_RECORD_SIZE or nxt + _HEAD > len(a) or _i32(a, nxt + 4) not in _MESSAGE_MAGICS:
        return False
    if _i64(a, nxt + _PHYS) - _i64(a, q + _PHYS) != total:
        return False
    return _older(a, q, last_store_timestamp) and _older(a, nxt, last_store_timestamp)


def candidates(a: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Positions ``q`` in [lo, hi) of ``a`` whose bytes q+4 .. q+8 are a message or BLANK magic (hi <= len(a) - 8).

    The first magic byte is compared over the window, the other three only where it matched (zeros: none)."""
    n = max(0, hi - lo)
    first = a[lo + 4 : lo + 4 + n]
    hit = np.flatnonzero(np.isin(first, _FIRST_BYTES))
    out = []
    for magic in _MAGICS:
        q = hit[first[hit] == magic[0]]
        for k in range(1, 4):
            q = q[a[lo + 4 + k + q] == magic[k]]
        out.append(q)
    return lo + np.sort(np.concatenate(out))


def read_what_is_left(a: np.ndarray, q: int, offset: int) -> DamagedMessage:
    """The fields of the record header at ``q`` in ``a`` (commitlog ``offset``) that lie in ``a`` and hold sane
    lengths: queue, queue offset, store time, then topic and properties."""
    n = len(a)
    if q + 28 > n:
        return DamagedMessage(offset)
    qid, qoff = _i32(a, q + 12), _i64(a, q + 20)
    sys_flag = _i32(a, q + 36) if q + 40 <= n else 0
    p = q + 48 + host_length(sys_flag, FLAG_BORNHOST_V6)
    if p + 8 > n:
        return DamagedMessage(offset, qid, qoff)
    store_ts = _i64(a, p)
    p += 8 + host_length(sys_flag, FLAG_STOREHOST_V6) + 12
    total = _i32(a, q)
    end = min(n, q + total) if total > 0 else n
    topic, props = _variable_part(a, q, p, end)
    values = parse_properties(props) if props is not None else {}
    return DamagedMessage(offset, qid, qoff, store_ts, topic, values.get(PROPERTY_UNIQ_KEY), values.get(PROPERTY_KEYS))


def _variable_part(a: np.ndarray, q: int, p: int, end: int) -> tuple[str | None, str | None]:
    """(topic, properties text) from BODYLENGTH at ``p`` on, where each length fits before ``end``."""
    if p + 4 > end:
        return None, None
    body = _i32(a, p)
    p += 4 + body
    v2 = _i32(a, q + 4) == MESSAGE_MAGIC_CODE_V2
    width = 2 if v2 else 1
    if body < 0 or p + width > end:
        return None, None
    topic_len = int.from_bytes(a[p : p + width].tobytes(), "big", signed=True)
    p += width
    if topic_len < 0 or p + topic_len + 2 > end:
        return None, None
    topic = a[p : p + topic_len].tobytes().decode("utf-8", "replace") or None  # no topic is empty: zeros
    p += topic_len
    props_len = int.from_bytes(a[p : p + 2].tobytes(), "big", signed=True)
    p += 2
    if props_len < 0 or p + props_len > end:
        return topic, None
    return topic, a[p : p + props_len].tobytes().decode("utf-8", "replace")


def sound_record(a: np.ndarray, q: int, last_store_timestamp: int) -> bool:
    """The record at ``q`` (wholly in ``a``, its TOTALSIZE checked) frames, its BODYCRC and ``__CRC32#`` (where
    present) match, and it was stored no earlier than ``last_store_timestamp``."""
    f = dict(zip(kernel.DECODED, kernel.decode(a, np.array([q], dtype=np.int64), True)))
    total = int(f["total_size"][0])
    if int(f["implied_size"][0]) != total or int(f["computed_crc"][0]) != int(f["body_crc"][0]):
        return False
    if int(f["store_timestamp"][0]) < last_store_timestamp:
        return False
    start, length = int(f["props_start"][0]), int(f["props_len"][0])
    value = parse_properties(a[start : start + length].tobytes().decode("utf-8", "replace")).get(PROPERTY_CRC32)
    if value is None:
        return True
    return property_crc(value) == computed_property_crc(a[q : q + total].tobytes())


class Resync:
    """The scanner's search past damage (``SegmentScanner(resync=Resync())``): each hole it crosses goes to
    ``holes``."""

    reasons = RESYNC_REASONS

    def __init__(self) -> None:
        self.holes: list[Hole] = []

    def past(
        self, sc: SegmentScanner, buf: np.ndarray, buf_pos: int, at: int, stop: tuple[str, str], last_taken: int
    ) -> tuple[np.ndarray, int, int] | None:
        """Search past the walk's stop at file position ``at`` (``last_taken``: the file position of the record
        before it, -1 when none) for the next record start; (buf, buf_pos, its file position), or None when the
        segment holds none. A length mismatch just before ``at`` was walked over by its TOTALSIZE, which may be the
        damage: the hole starts there instead, and the search right after it."""
        start = at
        walked_over = buf_pos <= last_taken
        before = (DAMAGE_LENGTH, sc.base + last_taken)
        length_damage = [d for d in sc.damage if walked_over and (d.kind, d.offset) == before]
        if length_damage:
            start = last_taken
        listed: list[DamagedMessage] = []
        unlisted = 0
        at_start = buf[start - buf_pos + 8 : start - buf_pos + _PHYS] if buf_pos <= start else buf[:0]
        if len(at_start) == _PHYS - 8 and at_start.any():  # where the walk got to: a record's start, not zeroed
            listed.append(read_what_is_left(buf[start - buf_pos :], 0, sc.base + start))
        q = start + 1
        size = sc.file_size
        while q + 8 <= size:
            if q + _HEAD > buf_pos + len(buf) or q < buf_pos:
                buf, buf_pos = sc.refill(buf, buf_pos, q, min(size - q, _HEAD))
                if q + 8 > buf_pos + len(buf):
                    return None  # the file ends short of its size
            skipped = sc.past_zeros(buf, buf_pos, q)  # no record starts in zeros: passed over, holes not read
            if skipped is None:
                return None
            buf, buf_pos, q = skipped
            if q + _HEAD > buf_pos + len(buf) and buf_pos + len(buf) < size:  # at the file's end: nothing to read
                continue
            hi = len(buf) - 8 if buf_pos + len(buf) >= size else len(buf) - _HEAD + 1
            found, q, heads = self._search(sc, buf, buf_pos, q - buf_pos, hi)
            for h in heads:
                if left_behind(buf, h, sc.last_store_timestamp):
                    return None  # what a truncation left behind, not damage: records older than the walk's last
                if len(listed) < MAX_LISTED:
                    listed.append(read_what_is_left(buf[h:], 0, sc.base + buf_pos + h))
                else:
                    unlisted += 1
            if found is None:
                continue
            if found < 0:  # a record to check reaches past buf: read it whole, then look again
                q = -found
                buf, buf_pos = sc.refill(buf, buf_pos, q, min(size - q, MAX_RECORD))
                continue
            for d in length_damage:
                sc.damage.remove(d)
            hole = Hole(sc.file, sc.base + start, sc.base + found, stop[0], stop[1], tuple(listed), unlisted)
            self.holes.append(hole)
            return buf, buf_pos, found
        return None

    def covered(
        self, sc: SegmentScanner, buf: np.ndarray, buf_pos: int, at: int, total: int
    ) -> tuple[np.ndarray, int, int] | None:
        """The record at file position ``at`` (wholly in ``buf``) whose fields do not add up to its TOTALSIZE
        ``total`` (the broker's recovery rejects it), when a record start the records prove lies inside it: its
        TOTALSIZE is inflated over sound records, and the bytes up to that start are a hole (reason END_BAD_SIZE);
        (buf, buf_pos, that start). None when there is none: the walk takes it by its TOTALSIZE."""
        implied = int(kernel.layout(buf, at - buf_pos, total)[-1])
        size = sc.file_size
        if at + min(size - at, total + _HEAD) > buf_pos + len(buf):  # every header that starts inside it
            buf, buf_pos = sc.refill(buf, buf_pos, at, min(size - at, total + _HEAD))
        q, heads = at + 1, [at]
        while True:
            hi = len(buf) - 8 if buf_pos + len(buf) >= size else len(buf) - _HEAD + 1
            found, _, more = self._search(sc, buf, buf_pos, q - buf_pos, min(hi, at + total - buf_pos))
            heads += [buf_pos + h for h in more]
            if found is None or found > 0 or -found == q:  # the same one again: the file ends short of its size
                break
            q = -found  # a record to check reaches past buf: read it whole (buf still from ``at``), then look again
            buf, buf_pos = sc.refill(buf, buf_pos, at, q - at + min(size - q, MAX_RECORD))
        if found is None or found < 0:
            return None
        listed = [read_what_is_left(buf[h - buf_pos :], 0, sc.base + h) for h in heads]
        detail = f"{length_mismatch(total, implied)}, and a record starts at {sc.base + found}"
        self.holes.append(Hole(sc.file, sc.base + at, sc.base + found, END_BAD_SIZE, detail, tuple(listed)))
        return buf, buf_pos, found

    def _search(
        self, sc: SegmentScanner, a: np.ndarray, a_pos: int, lo: int, hi: int
    ) -> tuple[int | None, int, list[int]]:
        """Candidates in [lo, hi) of ``a`` (file position ``a_pos``): (the file position of a record start, or
        minus the position of one that needs more bytes, or None; where to go on; positions of message headers that
        are no record start)."""
        size = sc.file_size
        heads: list[int] = []
        for c in candidates(a, lo, hi).tolist():
            pos = a_pos + c
            total = _i32(a, c)
            if _i32(a, c + 4) == BLANK_MAGIC_CODE:
                if total == size - pos:
                    return pos, pos, heads
                continue
            if c + _HEAD > len(a) or _i64(a, c + _PHYS) != sc.base + pos:
                continue
            if total < MIN_RECORD_SIZE or total > MAX_RECORD or pos + total > size:
                heads.append(c)
                continue
            if c + total > len(a):
                if c > 0:
                    return -pos, pos, heads
                heads.append(c)  # the file ends inside it
                continue
            if sound_record(a, c, sc.last_store_timestamp):
                return pos, pos, heads
            heads.append(c)
        return None, a_pos + max(hi, lo + 1), heads
