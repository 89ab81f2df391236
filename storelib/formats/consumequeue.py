"""ConsumeQueue files: 20-byte units (commitlog offset i64, size i32, tagsCode i64).

Entry ``n`` lives at logical byte offset ``n * 20``, in the file named
``floor(n*20 / fileSize) * fileSize`` (20 digits), at position ``n*20 % fileSize``.
"Pre-blank: when a queue's first file is created for an entry n > 0, every unit from the
file's start up to entry n is a BLANK unit: offset 0, size 0x7fffffff, tagsCode 0."
Files are always full size, zero-filled after the last entry.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

import numpy as np

from storelib.constants import INT32_MAX
from storelib.layout import CONSUMEQUEUE, offset_file_name, queue_dir

CQ_STORE_UNIT_SIZE = 20
CQ_BLANK_SIZE = INT32_MAX  # a pre-blank unit's size: Integer.MAX_VALUE (offset 0, tagsCode 0)


class QueueSettings(Protocol):
    """The broker settings that size consume queue files (storelib.broker.config.BrokerConfig has them)."""

    @property
    def mappedFileSizeConsumeQueue(self) -> int: ...

    @property
    def mapperFileSizeBatchConsumeQueue(self) -> int: ...


UNIT_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
assert UNIT_DTYPE.itemsize == CQ_STORE_UNIT_SIZE


def encode_units(offsets: np.ndarray, sizes: np.ndarray, tags_codes: np.ndarray) -> bytes:
    units = np.empty(len(offsets), dtype=UNIT_DTYPE)
    units["offset"] = offsets
    units["size"] = sizes
    units["tags_code"] = tags_codes
    return units.tobytes()


def decode_units(data: bytes | memoryview) -> np.ndarray:
    """Whole units of ``data`` as a structured array (offset, size, tags_code); a partial unit is ignored."""
    n = len(data) // CQ_STORE_UNIT_SIZE
    return np.frombuffer(data, dtype=UNIT_DTYPE, count=n)


def file_start(queue_offset: int, file_size: int) -> int:
    """Logical byte offset (= name) of the file holding entry ``queue_offset``."""
    return queue_offset * CQ_STORE_UNIT_SIZE // file_size * file_size


def is_pre_blank(units: np.ndarray) -> np.ndarray:
    """Which units are pre-blank units (offset 0, size Integer.MAX_VALUE, tagsCode 0, as ``fillPreBlank`` writes)."""
    return (units["offset"] == 0) & (units["size"] == CQ_BLANK_SIZE) & (units["tags_code"] == 0)


@dataclasses.dataclass(frozen=True)
class QueueFormat:
    """One kind of consume queue's files: ``<dir>/<topic>/<queueId>/<20-digit start byte>``, each
    ``file_size(cfg)`` bytes of fixed-size units; its recover keeps the units while the ``at_least_zero`` fields
    are >= 0 and the ``above_zero`` fields > 0."""

    name: str  # the broker's class
    dir: str  # the store directory holding the queues
    unit: np.dtype  # one unit as on disk
    decode: Callable[[bytes | memoryview], np.ndarray]  # whole units of a file's bytes
    size_setting: str  # the broker setting giving the file size in bytes
    at_least_zero: tuple[str, ...]
    above_zero: tuple[str, ...]
    queue_offset: str | None  # the unit field holding its queue offset (None: its position in the queue)
    pre_blank: bool  # a queue's first file may start with pre-blank units before its first entry

    @property
    def unit_size(self) -> int:
        return self.unit.itemsize

    def file_size(self, cfg: QueueSettings) -> int:
        return int(getattr(cfg, self.size_setting))

    def first_unit(self, name: str) -> int:
        """The queue position of a file's first unit: a file is named by its start byte in the queue."""
        return int(name) // self.unit_size

    def units_per_file(self, file_size: int) -> int:
        return file_size // self.unit_size

    def file_name(self, unit: int, file_size: int) -> str:
        """The name of the file of ``file_size`` bytes holding the unit at queue position ``unit``."""
        return offset_file_name(unit // self.units_per_file(file_size) * file_size)

    def file_offset(self, unit: int, file_size: int) -> int:
        """Where in its file of ``file_size`` bytes the unit at queue position ``unit`` starts."""
        return unit % self.units_per_file(file_size) * self.unit_size

    def whole_units(self, nbytes: int) -> int:
        """How many whole units ``nbytes`` bytes hold."""
        return nbytes // self.unit_size

    def partial_unit(self, nbytes: int) -> int:
        """The bytes of a partial unit ending ``nbytes`` bytes (0: none)."""
        return nbytes % self.unit_size

    def queue_dir(self, topic: str, queue_id: int) -> str:
        """The store-relative directory of a queue (storelib.layout.queue_dir: a hostile name raises)."""
        return queue_dir(topic, queue_id, self.dir)

    def valid(self, units: np.ndarray) -> np.ndarray:
        """Per unit: whether its recover keeps it (a pre-blank unit passes: its size is positive)."""
        ok = np.ones(len(units), dtype=bool)
        for field in self.at_least_zero:
            ok &= units[field] >= 0
        for field in self.above_zero:
            ok &= units[field] > 0
        return ok

    def valid_prefix(self, units: np.ndarray) -> int:
        """How many units its recover keeps: up to the first one that is not valid."""
        bad = np.flatnonzero(~self.valid(units))
        return int(bad[0]) if len(bad) else len(units)


#: ``ConsumeQueue``: ``ConsumeQueue.recover`` keeps units while ``offset >= 0 and size > 0``
CONSUME_QUEUE = QueueFormat(
    "ConsumeQueue", CONSUMEQUEUE, UNIT_DTYPE, decode_units, "cq_file_size", ("offset",), ("size",), None, True
)


@dataclasses.dataclass(frozen=True)
class QueueFinding:
    """Something wrong with the records of one queue (duplicate or missing queue offsets)."""

    kind: str  # "duplicate-queue-offset" or "queue-offset-gap"
    queue_offset: int
    count: int
    commitlog_offset: int  # of the record dropped (a duplicate) or of the one after the gap
    before: int = -1  # (a gap) the commitlog offset of the unit before it, -1 when none


@dataclasses.dataclass(frozen=True)
class Misplaced:
    """A record whose QUEUEOFFSET contradicts its queue: the records before and after it in commitlog order leave
    exactly one queue offset free between them, ``queue_offset``, and it lies between them but claims ``claimed``."""

    queue_offset: int
    commitlog_offset: int
    claimed: int


@dataclasses.dataclass
class QueueFiles:
    """Builds one queue's files from entries ordered by queue offset, one full file at a time.

    ``at_write_position``: runs come in dispatch (commitlog) order and each unit goes where
    ``ConsumeQueue.putMessagePositionInfo`` puts it (the 4.9.7 … 5.5.0 jars alike): a unit whose queue offset is
    below the queue's write position is skipped ("Build consume queue repeatedly"), one past it is written at the
    write position ("[BUG]logic queue order maybe wrong"); the queue's first unit at its own offset (pre-blank).
    """

    file_size: int
    at_write_position: bool = False
    findings: list[QueueFinding] = dataclasses.field(default_factory=list)
    entries: int = 0
    min_offset: int | None = None  # first queue offset written
    next_offset: int | None = None  # one past the last queue offset written
    files: int = 0
    last_commitlog_offset: int = -1  # of the last unit written
    #: (queue offset, commitlog offset) of each unit, dropped or not, that does not lie in the log between the units
    #: before and after it in queue order while they are in order (the first: after the next; the last: before the
    #: one before it)
    out_of_place: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    _last_two: tuple[int, int, int] = (-1, -1, -1)  # the last two commitlog offsets, the last one's queue offset
    _buf: bytearray | None = None
    _buf_start: int = 0

    def add(
        self, queue_offsets: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, tags_codes: np.ndarray
    ) -> Iterator[tuple[str, bytes]]:
        """Take the next entries (ascending queue offsets); yield every file they complete."""
        qo = np.asarray(queue_offsets, dtype=np.int64)
        if len(qo) == 0:
            return
        self._judge(qo, offsets)
        # duplicates: an entry at or below the last written offset is dropped, as the broker does
        prev = np.concatenate(([self.next_offset - 1 if self.next_offset is not None else -1], qo[:-1]))
        dup = qo <= np.maximum.accumulate(prev)  # at or below any offset written before it
        for i in np.flatnonzero(dup):
            self.findings.append(QueueFinding("duplicate-queue-offset", int(qo[i]), 1, int(offsets[i])))
        if dup.any():
            keep = ~dup
            qo, offsets, sizes, tags_codes = qo[keep], offsets[keep], sizes[keep], tags_codes[keep]
            if len(qo) == 0:
                return
        expected = np.concatenate(([self.next_offset if self.next_offset is not None else qo[0]], qo[:-1] + 1))
        before = np.concatenate(([self.last_commitlog_offset], offsets[:-1]))
        for i in np.flatnonzero(qo != expected):
            gap = int(qo[i] - expected[i])
            self.findings.append(
                QueueFinding("queue-offset-gap", int(expected[i]), gap, int(offsets[i]), int(before[i]))
            )
        self.last_commitlog_offset = int(offsets[-1])
        data = np.frombuffer(encode_units(offsets, sizes, tags_codes), dtype=np.uint8).reshape(-1, 20)
        if self.min_offset is None:
            self.min_offset = int(qo[0])
            self._open(file_start(int(qo[0]), self.file_size), pre_blank_until=int(qo[0]))
        elif self._buf is None:  # add_run emitted a file that ended exactly at its end
            self._open(file_start(int(qo[0]), self.file_size), pre_blank_until=None)
        pos = qo * CQ_STORE_UNIT_SIZE
        i = 0
        while i < len(qo):
            end_of_file = self._buf_start + self.file_size
            j = i + int(np.searchsorted(pos[i:], end_of_file))
            if j > i:
                rel = pos[i:j] - self._buf_start
                if rel[-1] - rel[0] == (j - 1 - i) * CQ_STORE_UNIT_SIZE:  # consecutive: one copy
                    self._file[rel[0] : rel[-1] + CQ_STORE_UNIT_SIZE] = data[i:j].tobytes()
                else:
                    view = np.frombuffer(self._file, dtype=np.uint8)
                    view[(rel[:, None] + np.arange(CQ_STORE_UNIT_SIZE)).ravel()] = data[i:j].ravel()
                i = j
            if i < len(qo):
                yield from self._emit()
                self._open(file_start(int(qo[i]), self.file_size), pre_blank_until=None)
        self.entries += len(qo)
        self.next_offset = int(qo[-1]) + 1

    def add_run(self, first_queue_offset: int, units: bytes) -> Iterator[tuple[str, bytes]]:
        """Take encoded units for consecutive queue offsets from ``first_queue_offset``; yield completed files.

        The common case (the run continues the queue) is copied as is; anything else goes through ``add``. At the
        write position, the run's units below it are skipped and the rest continue the queue.
        """
        if self.at_write_position and self.next_offset is not None:
            skipped = max(0, self.next_offset - first_queue_offset)
            units, first_queue_offset = units[skipped * CQ_STORE_UNIT_SIZE :], self.next_offset
        n = len(units) // CQ_STORE_UNIT_SIZE
        if n == 0:
            return
        u = decode_units(units)
        offsets = u["offset"]
        ordered = offsets[0] > self.last_commitlog_offset and bool((offsets[1:] > offsets[:-1]).all())
        if self.next_offset != first_queue_offset or not ordered:
            qo = np.arange(first_queue_offset, first_queue_offset + n, dtype=np.int64)
            yield from self.add(qo, offsets, u["size"], u["tags_code"])
            return
        self._judge(np.arange(first_queue_offset, first_queue_offset + n, dtype=np.int64), offsets)
        self.last_commitlog_offset = int(offsets[-1])
        pos = first_queue_offset * CQ_STORE_UNIT_SIZE
        done = 0
        while done < len(units):
            if self._buf is None:
                self._open(file_start((pos + done) // CQ_STORE_UNIT_SIZE, self.file_size), pre_blank_until=None)
            rel = pos + done - self._buf_start
            take = min(len(units) - done, self.file_size - rel)
            self._file[rel : rel + take] = units[done : done + take]
            done += take
            if rel + take == self.file_size:
                yield from self._emit()
        self.entries += n
        self.next_offset = first_queue_offset + n

    @property
    def _file(self) -> bytearray:
        """The file being filled: ``_open`` made it."""
        assert self._buf is not None
        return self._buf

    def _open(self, start: int, pre_blank_until: int | None) -> None:
        self._buf = bytearray(self.file_size)
        self._buf_start = start
        if pre_blank_until:
            n = pre_blank_until - start // CQ_STORE_UNIT_SIZE
            self._buf[: n * CQ_STORE_UNIT_SIZE] = encode_units(
                np.zeros(n, np.int64), np.full(n, CQ_BLANK_SIZE, np.int32), np.zeros(n, np.int64)
            )

    def _emit(self) -> Iterator[tuple[str, bytes]]:
        if self._buf is not None:
            self.files += 1
            yield offset_file_name(self._buf_start), bytes(self._buf)
            self._buf = None

    def _judge(self, qo: np.ndarray, offsets: np.ndarray) -> None:
        """Take the stream's next units (queue order, duplicates included) into ``out_of_place``; the last one waits
        for the unit after it."""
        left, last, last_qo = self._last_two
        o = np.concatenate(([left, last], np.asarray(offsets, dtype=np.int64)))
        q = np.concatenate(([-1, last_qo], qo))
        lo, mid, hi = o[:-2], o[1:-1], o[2:]
        out = (mid >= 0) & np.where(lo >= 0, (lo < hi) & ~((lo < mid) & (mid < hi)), mid > hi)
        self.out_of_place += [(int(a), int(b)) for a, b in zip(q[1:-1][out], mid[out])]
        self._last_two = (int(o[-2]), int(o[-1]), int(q[-1]))

    def finish(self) -> Iterator[tuple[str, bytes]]:
        """Yield the last, partly filled file."""
        left, last, last_qo = self._last_two
        if 0 <= last < left:  # the last unit lies before the one before it
            self.out_of_place.append((last_qo, last))
        yield from self._emit()


def misplaced(findings: Iterable[QueueFinding], out_of_place: Iterable[tuple[int, int]]) -> list[Misplaced]:
    """The records of one queue whose QUEUEOFFSET contradicts the records around them (no CRC covers it): for each
    gap of one queue offset ``q`` between units at commitlog offsets B and C, the one record that lies between B and
    C in the log but was put elsewhere in the queue (a duplicate dropped, a unit out of commitlog order), or C itself
    when another record claiming C's queue offset lies after it. None where not exactly one such record is found:
    the damaged record cannot be told from a sound one."""
    found = list(findings)
    dropped = {f.queue_offset: f.commitlog_offset for f in found if f.kind == "duplicate-queue-offset"}
    suspects = [(f.queue_offset, f.commitlog_offset) for f in found if f.kind == "duplicate-queue-offset"]
    suspects += list(out_of_place)
    out = []
    for gap in (f for f in found if f.kind == "queue-offset-gap" and f.count == 1 and f.before >= 0):
        q, lo, hi = gap.queue_offset, gap.before, gap.commitlog_offset
        hits = {p: claimed for claimed, p in suspects if lo < p < hi}
        if not hits and dropped.get(q + 1, -1) > hi:  # C claims q + 1, and so does a record after it
            hits = {hi: q + 1}
        if len(hits) == 1:
            ((p, claimed),) = hits.items()
            out.append(Misplaced(q, p, claimed))
    return out


@dataclasses.dataclass(frozen=True)
class LooseEnds:
    """What one queue leaves unexplained after ``misplaced``: gaps of one queue offset (queue offset, commitlog
    offsets of the units before and after it) and its records out of place or alone (queue offset claimed,
    commitlog offset)."""

    gaps: tuple[tuple[int, int, int], ...] = ()
    records: tuple[tuple[int, int], ...] = ()

    def to_json(self) -> str:
        return json.dumps({"gaps": self.gaps, "records": self.records})

    @classmethod
    def from_json(cls, text: str) -> LooseEnds:
        d = json.loads(text)
        return cls(tuple(map(tuple, d["gaps"])), tuple(map(tuple, d["records"])))


def loose_ends(q: QueueFiles, resolved: Iterable[Misplaced], lone: bool = True) -> LooseEnds:
    """The gaps of one queue offset ``misplaced`` did not fill, and the records it did not place: the duplicates
    dropped, the units out of commitlog order, and with ``lone`` the queue's only unit (not for an LMQ queue: its
    records are in their own topic's queue too)."""
    placed = {m.commitlog_offset for m in resolved}
    filled = {m.queue_offset for m in resolved}
    gaps = tuple(
        (f.queue_offset, f.before, f.commitlog_offset)
        for f in q.findings
        if f.kind == "queue-offset-gap" and f.count == 1 and f.before >= 0 and f.queue_offset not in filled
    )
    records = {(f.queue_offset, f.commitlog_offset) for f in q.findings if f.kind == "duplicate-queue-offset"}
    records |= set(q.out_of_place)
    if lone and q.entries == 1 and q.min_offset is not None:
        records.add((q.min_offset, q.last_commitlog_offset))
    return LooseEnds(gaps, tuple(sorted(r for r in records if r[1] not in placed)))


def strays(ends: Mapping[tuple[str, int], LooseEnds]) -> list[tuple[tuple[str, int], Misplaced, tuple[str, int]]]:
    """Records whose QUEUEID or topic (no CRC covers them) put them in another queue: for each gap of one queue
    offset between units at commitlog offsets B and C of a queue, the one record out of place in any other queue
    that lies between B and C in the log: (the queue it belongs to, where, the queue its header names). None where
    not exactly one such record is found."""
    records = sorted((p, claimed, queue) for queue, e in ends.items() for claimed, p in e.records)
    at = [r[0] for r in records]
    out = []
    for queue, e in ends.items():
        for q, lo, hi in e.gaps:
            hits = [r for r in records[bisect.bisect_right(at, lo) : bisect.bisect_left(at, hi)] if r[2] != queue]
            if len(hits) == 1:
                p, claimed, other = hits[0]
                out.append((queue, Misplaced(q, p, claimed), other))
    return out


def build_queue_files(entries: Iterable[tuple[int, int, int, int]], file_size: int) -> list[tuple[str, bytes]]:
    """All files of one queue from (queue offset, commitlog offset, size, tagsCode) tuples, in order."""
    rows = np.array(list(entries), dtype=np.int64).reshape(-1, 4)
    q = QueueFiles(file_size)
    out = list(q.add(rows[:, 0], rows[:, 1], rows[:, 2].astype(np.int32), rows[:, 3]))
    out.extend(q.finish())
    return out
