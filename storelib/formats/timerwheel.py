"""``timerwheel``: the timer store's wheel (``TimerWheel``, 5.0+), one file of 2 x 604,800 slots of 32 bytes
(38,707,200 bytes whatever the settings: ``slotsTotal = TIMER_WHEEL_TTL_DAY * DAY_SECS``), mapped whole.

A slot: timeMs / precisionMs (i64), firstPos (i64), lastPos (i64), num (i32), magic (i32). A time t (ms) lives in
slot (t / precisionMs) % 1,209,600; ``getSlot(t)`` answers a slot whose first field is not t / precisionMs as
empty (-1, -1, -1, num 0, magic 0). ``doEnqueue`` appends a unit to the timerlog and puts its slot: firstPos the
slot's (or the unit's when empty), lastPos the unit, num +1 (-1 for a delete unit), magic the slot's. So the wheel
is a fold of the timerlog in order (``fold``), and dequeue walks a slot from lastPos back along the units' prevPos.
The file on disk is what the last flush copied (every timerFlushIntervalMs, not at shutdown).

5.4.0 added optional snapshots (``timerWheelSnapshotFlush``, default false): ``timerwheel.<timerlog flush
position>`` files, written every timerWheelSnapshotIntervalMs; at start the newest is loaded instead of the
mapped ``timerwheel`` and recovery replays the timerlog from its position minus one file.
"""

from __future__ import annotations

import re

import numpy as np

from storelib.formats.timerlog import MAGIC_DELETE

SLOTS_TOTAL = 7 * 86_400  # TIMER_WHEEL_TTL_DAY * DAY_SECS
SLOTS = 2 * SLOTS_TOTAL
SLOT_SIZE = 32
WHEEL_SIZE = SLOTS * SLOT_SIZE
FILE = "timerwheel"
SNAPSHOT = re.compile(r"timerwheel\.(-?[0-9]+)\Z")  # TimerWheel.getMaxSnapshotFlag: the name's suffix as a long

SLOT_DTYPE = np.dtype([("time", ">i8"), ("first_pos", ">i8"), ("last_pos", ">i8"), ("num", ">i4"), ("magic", ">i4")])
assert SLOT_DTYPE.itemsize == SLOT_SIZE

#: the state of the slots a fold touched: slot index, the slot's fields (native ints), and whether the slot's run
#: (the units since its last change of time) holds every unit of that slot the fold saw
STATE_DTYPE = np.dtype(
    [
        ("slot", "<i8"),
        ("time", "<i8"),
        ("first_pos", "<i8"),
        ("last_pos", "<i8"),
        ("num", "<i8"),
        ("magic", "<i8"),
        ("whole", "?"),
    ]
)


def slot_index(time_ms: np.ndarray, precision_ms: int) -> np.ndarray:
    """``getSlotIndex``: (t / precisionMs) % (2 * slotsTotal)."""
    return (np.asarray(time_ms, np.int64) // precision_ms) % SLOTS


def read_slots(data: bytes | memoryview) -> np.ndarray:
    """The slots of a wheel file's bytes (a short file's missing slots are not there)."""
    return np.frombuffer(data, SLOT_DTYPE, count=len(data) // SLOT_SIZE)


def partial(times: np.ndarray, positions: np.ndarray, magics: np.ndarray, precision_ms: int) -> np.ndarray:
    """The touched slots after ``putSlot`` of each unit (timerlog order) on an empty wheel (STATE_DTYPE, sorted by
    slot). A slot keeps its run of units while they share its time; a unit of another time starts a new run
    (firstPos = the unit, num from 0, magic 0)."""
    if not len(times):
        return empty_state()
    ticks = np.asarray(times, np.int64) // precision_ms
    slots = ticks % SLOTS
    delta = np.where(np.asarray(magics) & MAGIC_DELETE, -1, 1).astype(np.int64)
    order = np.argsort(slots, kind="stable")
    slots, ticks, pos, delta = slots[order], ticks[order], np.asarray(positions, np.int64)[order], delta[order]
    # the last run of each slot: the units after the slot's last change of time
    last = np.r_[slots[1:] != slots[:-1], True]
    run_start = np.r_[True, (slots[1:] != slots[:-1]) | (ticks[1:] != ticks[:-1])]
    starts = np.maximum.accumulate(np.where(run_start, np.arange(len(slots)), 0))
    sums = np.cumsum(delta)
    at = np.flatnonzero(last)
    begin = starts[at]
    out = np.zeros(len(at), STATE_DTYPE)
    out["slot"], out["time"], out["first_pos"], out["last_pos"] = slots[at], ticks[at], pos[begin], pos[at]
    out["num"] = sums[at] - np.where(begin > 0, sums[begin - 1], 0)
    out["whole"] = begin == np.r_[0, at[:-1] + 1]
    return out


def combine(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """The state of the units of ``before`` then those of ``after`` (both STATE_DTYPE): a slot of ``after`` whose
    run is whole and of the time ``before`` left there continues that run (its firstPos, num, magic); any other slot
    of ``after`` replaces the one before. Associative, with ``empty_state`` as identity: a fold over any split."""
    if not len(before) or not len(after):
        return after if not len(before) else before
    i = np.minimum(np.searchsorted(before["slot"], after["slot"]), len(before) - 1)
    same = before["slot"][i] == after["slot"]
    joins = after["whole"] & same & (before["time"][i] == after["time"])
    new = after.copy()
    j = i[joins]
    new["first_pos"][joins] = before["first_pos"][j]
    new["num"][joins] += before["num"][j]
    new["magic"][joins] = before["magic"][j]
    new["whole"] = np.where(joins, before["whole"][i], after["whole"] & ~same)
    out = np.concatenate((before[~np.isin(before["slot"], after["slot"])], new))
    return out[np.argsort(out["slot"], kind="stable")]


def fold(
    state: np.ndarray, times: np.ndarray, positions: np.ndarray, magics: np.ndarray, precision_ms: int
) -> np.ndarray:
    """The touched slots after ``putSlot`` of each unit (timerlog order) on top of ``state`` (the slots a fold of
    earlier units touched)."""
    return combine(state, partial(times, positions, magics, precision_ms))


def empty_state() -> np.ndarray:
    return np.zeros(0, STATE_DTYPE)


def wheel_bytes(state: np.ndarray) -> bytes:
    """The whole wheel file: the folded slots, zeros elsewhere (a new wheel is ``setLength`` zeros)."""
    wheel = np.zeros(SLOTS, SLOT_DTYPE)
    idx = state["slot"]
    wheel["time"][idx], wheel["first_pos"][idx], wheel["last_pos"][idx] = (
        state["time"],
        state["first_pos"],
        state["last_pos"],
    )
    wheel["num"][idx], wheel["magic"][idx] = state["num"], state["magic"]
    return wheel.tobytes()


def differing_slots(live: np.ndarray, rebuilt: np.ndarray) -> np.ndarray:
    """Indexes of the slots that differ (a short live wheel's missing slots differ where the rebuilt is not zero)."""
    n = len(rebuilt)
    padded = np.zeros(n, SLOT_DTYPE)
    padded[: min(n, len(live))] = live[:n]
    return np.flatnonzero(padded != rebuilt)


def snapshot_flag(name: str) -> int | None:
    """The timerlog position a ``timerwheel.<flag>`` snapshot was taken at, None for another name."""
    m = SNAPSHOT.match(name)
    return int(m.group(1)) if m else None
