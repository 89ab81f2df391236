"""The timer checks' view of the timerlog as a fold (Spark-free): each range of units (timerlog order) becomes a
``UnitFold`` (the wheel's touched slots, counts, the first unit of each finding) and two folds combine
associatively, so the timerlog is judged range by range with memory bounded by a range, the wheel (its size fixed
by the settings) and the rmq_sys_wheel_timer records the units are joined with (``RecordIndex``)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.broker import timers as rules
from storelib.formats import timerlog, timerwheel

NONE = -1  # no such unit (a position, an offset, a queue offset)


@dataclasses.dataclass(frozen=True)
class RecordIndex:
    """The rmq_sys_wheel_timer records sorted by commitlog offset: what a unit is joined with (by its offset)."""

    offsets: np.ndarray
    sizes: np.ndarray
    out_ms: np.ndarray  # TIMER_OUT_MS
    queue: np.ndarray  # queue offset
    pending: np.ndarray  # the latest record of a pending timer
    delivered: np.ndarray  # the latest record of a delivered timer

    @classmethod
    def of(cls, records: pa.Table, timers: list[rules.Message]) -> RecordIndex:
        t = records.filter(pc.equal(records["topic"], rules.TIMER_TOPIC)).sort_by("commitlog_offset")
        offsets = t["commitlog_offset"].to_numpy()
        pending = [m.commitlog_offset for m in timers if m.pending]
        delivered = [m.commitlog_offset for m in timers if m.delivered_at is not None]
        return cls(
            offsets,
            t["size"].to_numpy(),
            rules.int_column(t["timer_out_ms"]),
            t["queue_offset"].to_numpy(),
            np.isin(offsets, pending),
            np.isin(offsets, delivered),
        )

    @property
    def delivered_queue(self) -> int:
        """The last queue offset of a delivered timer's record."""
        return int(self.queue[self.delivered].max()) if self.delivered.any() else NONE

    def find(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each commitlog offset: whether a record starts there, and its index (clipped where none does)."""
        if not len(self.offsets):
            return np.zeros(len(offsets), bool), np.zeros(len(offsets), np.int64)
        at = np.minimum(np.searchsorted(self.offsets, offsets), len(self.offsets) - 1)
        return self.offsets[at] == offsets, at


@dataclasses.dataclass(frozen=True)
class Side:
    """What the wheel and the checkpoint take from a set of units: the wheel's touched slots, the timerlog's end
    after them, the latest slot time, the earliest slot time of a pending timer, the last queue offset of a record
    they enqueued, and how many pending timers among them lie before the 7-day look-back."""

    wheel: np.ndarray  # timerwheel.STATE_DTYPE
    end: int = NONE
    last_ms: int = NONE
    read_ms: int | None = None
    queue: int = NONE
    lookback: int = 0

    def then(self, b: Side) -> Side:
        """This side's units, then ``b``'s."""
        read = min((m for m in (self.read_ms, b.read_ms) if m is not None), default=None)
        return Side(
            timerwheel.combine(self.wheel, b.wheel),
            b.end if b.end != NONE else self.end,
            max(self.last_ms, b.last_ms),
            read,
            max(self.queue, b.queue),
            self.lookback + b.lookback,
        )


EMPTY_SIDE = Side(timerwheel.empty_state())


@dataclasses.dataclass(frozen=True)
class UnitFold:
    """A range of units as the checks see it. ``kept`` is the side of the units before the first one that points
    past the commitlog's end (the whole range's side while there is none); ``stray``: units pointing inside the log
    after that first one. ``first_*``: (timerlog position, fields) of the first unit of each finding."""

    units: int
    first_pos: int
    past: int
    first_past: tuple[int, int] | None  # position, commitlog offset
    stray: int
    bad_record: int
    first_bad_record: tuple[int, ...] | None  # position, commitlog offset, size
    wrong_time: int
    first_wrong_time: tuple[int, ...] | None  # position, commitlog offset, unit time, TIMER_OUT_MS
    units_per_record: np.ndarray  # plain units inside the log per record of the index
    units_elsewhere: Counter[int]  # plain units inside the log per commitlog offset no record starts at
    all: Side
    kept: Side

    def then(self, b: UnitFold) -> UnitFold:
        """This range's units, then ``b``'s (associative)."""
        all_ = self.all.then(b.all)
        if self.past:
            kept = self.kept
        elif b.past:
            kept = self.kept.then(b.kept)
        else:
            kept = all_  # one side: no unit points past the log
        return UnitFold(
            self.units + b.units,
            self.first_pos if self.first_pos != NONE else b.first_pos,
            self.past + b.past,
            self.first_past or b.first_past,
            self.stray + (b.units - b.past if self.past else b.stray),
            self.bad_record + b.bad_record,
            self.first_bad_record or b.first_bad_record,
            self.wrong_time + b.wrong_time,
            self.first_wrong_time or b.first_wrong_time,
            self.units_per_record + b.units_per_record,
            self.units_elsewhere + b.units_elsewhere,
            all_,
            kept,
        )

    @property
    def cut_at(self) -> int | None:
        """Where the units stop pointing into the log when every later one points past it (a truncated log leaves
        a suffix)."""
        return self.first_past[0] if self.first_past is not None and not self.stray else None

    @property
    def duplicates(self) -> int:
        """Records with more than one plain (not roll) unit inside the log."""
        return int((self.units_per_record > 1).sum()) + sum(n > 1 for n in self.units_elsewhere.values())


def empty(index: RecordIndex) -> UnitFold:
    """The fold of no unit."""
    none = np.zeros(len(index.offsets), np.int64)
    return UnitFold(0, NONE, 0, None, 0, 0, None, 0, None, none, Counter(), EMPTY_SIDE, EMPTY_SIDE)


@dataclasses.dataclass(frozen=True)
class FoldSettings:
    """The settings a fold needs: the wheel's precision, the commitlog's end, the 7-day look-back's floor."""

    precision_ms: int
    log_end: int
    floor_ms: int


def fold_units(units: np.ndarray, positions: np.ndarray, index: RecordIndex, s: FoldSettings) -> UnitFold:
    """One range of units (timerlog order, UNIT_DTYPE) and their timerlog positions."""
    offsets = units["offset_py"].astype(np.int64)
    past = offsets >= s.log_end
    found, at = index.find(offsets)
    when = timerlog.unit_time(units)
    first = int(np.flatnonzero(past)[0]) if past.any() else len(units)
    all_ = _side(units, positions, when, found, at, index, s)
    kept = all_ if first == len(units) else _side(units[:first], positions[:first], when[:first], found, at, index, s)
    inside = ~past
    record = inside & found & (index.sizes[at] == units["size_py"] if len(index.offsets) else False)
    plain = inside & ((units["magic"] & timerlog.MAGIC_ROLL) == 0)
    bad = np.flatnonzero(inside & ~record)
    roll = (units["magic"] & timerlog.MAGIC_ROLL) != 0
    out_ms = index.out_ms[at] if len(index.offsets) else np.zeros(len(units), np.int64)
    wrong = np.flatnonzero(record & np.where(roll, when > out_ms, when != out_ms))
    return UnitFold(
        len(units),
        int(positions[0]) if len(units) else NONE,
        int(past.sum()),
        (int(positions[first]), int(offsets[first])) if first < len(units) else None,
        int(inside[first:].sum()),
        len(bad),
        _at(bad, positions, offsets, units["size_py"]),
        len(wrong),
        _at(wrong, positions, offsets, when, out_ms),
        np.bincount(at[plain & found], minlength=len(index.offsets)).astype(np.int64),
        Counter(offsets[plain & ~found].tolist()),
        all_,
        kept,
    )


def _at(which: np.ndarray, *columns: np.ndarray) -> tuple[int, ...] | None:
    """The first of ``which``'s columns, as ints (None: no such unit)."""
    return tuple(int(c[which[0]]) for c in columns) if len(which) else None


def _side(
    units: np.ndarray,
    positions: np.ndarray,
    when: np.ndarray,
    found: np.ndarray,
    at: np.ndarray,
    index: RecordIndex,
    s: FoldSettings,
) -> Side:
    """The side of ``units`` (a prefix of the range: ``found``, ``at`` and ``when`` are the range's)."""
    n = len(units)
    if not n:
        return EMPTY_SIDE
    found, at, when = found[:n], at[:n], when[:n]
    slot_ms = when // s.precision_ms * s.precision_ms
    waiting = found & index.pending[at] if len(index.offsets) else found
    return Side(
        timerwheel.partial(when, positions, units["magic"], s.precision_ms),
        int(positions[-1]) + timerlog.UNIT_SIZE,
        int(slot_ms.max()),
        int(slot_ms[waiting].min()) if waiting.any() else None,
        int(index.queue[at[found]].max()) if found.any() else NONE,
        int((waiting & (when < s.floor_ms)).sum()),
    )
