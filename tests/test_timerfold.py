"""The timerlog judged as a fold, range by range (storelib.audit.timerfold, storelib.formats.timerlog.walk_ranges):
a walk read in ranges is the walk read whole; the fold of any split of the units, combined in timerlog order, is the
fold of them in one range (and the audit of a store read in any ranges is the audit of it read whole); the memory a
fold takes does not grow with the number of units."""

from __future__ import annotations

import dataclasses
import itertools
import struct
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from storelib.audit.timerfold import FoldSettings, RecordIndex, UnitFold, empty, fold_units
from storelib.audit.timers import Settings, TimerStore, audit_timers, fold_log
from storelib.broker import timers as rules
from storelib.formats import timerlog, timerwheel
from tests.test_timers import LEVELS, T0, copy, records, timer, unit
from udfs.timers import read_store

TURN = timerwheel.SLOTS * 1000  # a wheel's turn at 1,000 ms precision: the same slot, another time
N_RECORDS = 6  # rmq_sys_wheel_timer records at offsets 0, 300, ..., the last delivered
LOG_END = 300 * (N_RECORDS + 2)

#: a unit: which record it points at (N_RECORDS and above: none, or past the log), its time (slot, lap), its
#: magic (roll, delete), and whether its record's size is another
UNITS = st.lists(
    st.tuples(
        st.integers(0, N_RECORDS + 3),
        st.integers(0, 4),
        st.integers(0, 1),
        st.sampled_from([1, 1, 1, 3, 5]),
        st.booleans(),
    ),
    max_size=60,
)


def table() -> pa.Table:
    rows = [timer(300 * k, f"U{k}", T0 + k * 1000, k) for k in range(N_RECORDS)]
    return records(*rows, copy(LOG_END - 300, f"U{N_RECORDS - 1}", dequeue_ms="1"))


def log_bytes(draws: list[tuple[int, int, int, int, bool]]) -> bytes:
    """Units pointing at the records (or between them, or past the log's end), some duplicated, some late."""
    out = []
    for rec, t, lap, magic, other_size in draws:
        offset = 300 * rec if rec <= N_RECORDS + 1 else LOG_END + 300 * rec
        out.append(unit(offset, T0 + t * 1000 + lap * TURN, magic, size=301 if other_size else 300))
    return b"".join(out)


def cuts(n: int, draw: st.DrawFn) -> list[int]:
    return sorted(set(draw(st.lists(st.integers(0, n), max_size=5))))


def assert_same_fold(a: UnitFold, b: UnitFold) -> None:
    for f in dataclasses.fields(UnitFold):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name in ("all", "kept"):
            for g in dataclasses.fields(x):
                xs, ys = getattr(x, g.name), getattr(y, g.name)
                assert np.array_equal(xs, ys) if g.name == "wheel" else xs == ys, (f.name, g.name)
        elif isinstance(x, np.ndarray):
            assert np.array_equal(x, y), f.name
        else:
            assert x == y, f.name


@settings(max_examples=150, deadline=None)
@given(UNITS, st.data())
def test_the_fold_over_any_split_is_the_fold_in_one_range(draws: list, data: st.DataObject) -> None:
    """Cut the units anywhere: the ranges' folds combined in order are the one-range fold, field by field, whichever
    way the combining is grouped (associative)."""
    t = table()
    index = RecordIndex.of(t, rules.timer_states(t, (5, 5, 0)))
    fs = FoldSettings(1000, LOG_END, T0 + 2500)
    w = timerlog.walk(log_bytes(draws), 2080)
    whole = fold_units(w.units, w.positions, index, fs)
    at = [0, *cuts(len(w.units), data.draw), len(w.units)]
    parts = [fold_units(w.units[a:b], w.positions[a:b], index, fs) for a, b in itertools.pairwise(at)]
    left = empty(index)
    for p in parts:
        left = left.then(p)
    right = empty(index)
    for p in reversed(parts):
        right = p.then(right)
    assert_same_fold(left, whole)
    assert_same_fold(right, whole)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(["unit", "unit", "unit", "bad", "zeros", "blank"]), max_size=30),
    st.integers(0, 40),
    st.integers(1, 7),
)
def test_a_walk_read_in_ranges_is_the_walk_read_whole(kinds: list[str], tail: int, per: int) -> None:
    """Units, damage, zeros and a blank anywhere, a tail of any length: the ranges' units joined are the whole
    walk's, and the last range ends where and why the whole walk ends."""
    bad = bytearray(unit(0, T0))
    bad[12:16] = struct.pack(">i", 0x10)
    piece = {
        "unit": unit(0, T0),
        "bad": bytes(bad),
        "zeros": bytes(52),
        "blank": struct.pack(">iqi", 28, 0, timerlog.BLANK_MAGIC_CODE) + bytes(40),
    }
    data = b"".join(piece[k] for k in kinds) + (unit(0, T0) + bytes(52))[:tail]
    whole = timerlog.walk(data, 2080)
    ranges = list(timerlog.walk_ranges(lambda at, n: data[at : at + n], len(data), 2080, per))
    assert all(r.why == timerlog.END_MORE for r in ranges[:-1])
    assert (ranges[-1].end, ranges[-1].why) == (whole.end, whole.why)
    assert np.array_equal(np.concatenate([r.units for r in ranges]), whole.units)
    assert np.array_equal(np.concatenate([r.positions for r in ranges]), whole.positions)


@dataclasses.dataclass(frozen=True)
class InRanges:
    """A timerlog file held in memory, walked ``per`` units at a time."""

    start: int
    data: bytes
    per: int

    def ranges(self) -> Iterator[timerlog.Walk]:
        return timerlog.walk_ranges(lambda at, n: self.data[at : at + n], len(self.data), self.start, self.per)


@settings(max_examples=40, deadline=None)
@given(UNITS, st.integers(1, 9), st.booleans())
def test_a_store_audited_in_ranges_is_the_store_audited_whole(draws: list, per: int, snapshot: bool) -> None:
    """Every finding, the rebuilt files, the cut and the counts of a store whose timerlog is read in ranges (two
    files) are those of the same store read whole."""
    t = table()
    data = log_bytes(draws)
    half = len(data) // 104 * 52
    files = ((0, data[:half] + bytes(52)), (2080, data[half:]))
    snap = (("timerwheel.2000", bytes(timerwheel.WHEEL_SIZE)),) if snapshot else ()
    s = Settings(1000, 2080, (5, 5, 0), LEVELS, T0 + 60_000, LOG_END)
    ranged = TimerStore(tuple(InRanges(a, d, per) for a, d in files), None, None, None, None, snap)
    whole = TimerStore(tuple(timerlog.walk(d, a) for a, d in files), None, None, None, None, snap)
    assert audit_timers(ranged, t, s) == audit_timers(whole, t, s)


def write_log(root: Path, units: int, file_units: int) -> None:
    """A timerlog of ``units`` units over files of ``file_units`` units, pointing at 100 records (each many times)
    filed under 1,000 times."""
    k = np.arange(units)
    arr = np.zeros(units, timerlog.UNIT_DTYPE)
    arr["size"], arr["prev_pos"], arr["magic"], arr["enqueue_ms"] = 52, -1, 1, T0
    arr["delay_ms"], arr["offset_py"], arr["size_py"] = k % 1000 * 1000, k % 100 * 300, 300
    (root / "timerlog").mkdir(parents=True)
    size = file_units * 52 + 16
    for at in range(0, units, file_units):
        data = arr[at : at + file_units].tobytes()
        (root / "timerlog" / timerlog.file_name(at // file_units * size)).write_bytes(data + bytes(size - len(data)))


def peak_of_fold(root: Path, units: int) -> int:
    write_log(root, units, 20_000)
    store = read_store(str(root))
    store = dataclasses.replace(store, timerlog=tuple(dataclasses.replace(f, range_units=4096) for f in store.timerlog))
    t = records(*(timer(300 * k, f"U{k}", T0, k) for k in range(100)))
    s = Settings(1000, 20_000 * 52 + 16, (5, 5, 0), LEVELS, T0, 10**9)
    index = RecordIndex.of(t, rules.timer_states(t, (5, 5, 0)))
    tracemalloc.start()
    try:
        log = fold_log(store, index, s)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert log.fold.units == units and log.fold.duplicates == 100
    return peak


def test_the_memory_of_a_fold_does_not_grow_with_the_units(tmp_path: Path) -> None:
    """A timerlog ten times longer (1,000,000 units, 52 MB, over 50 files) folds in the memory of one range and the
    touched slots: its peak is within 1 MB of the short one's and far below the units' bytes."""
    small = peak_of_fold(tmp_path / "small", 100_000)
    large = peak_of_fold(tmp_path / "large", 1_000_000)
    assert large < small + 1_000_000
    assert large < 1_000_000 * 52 / 20
