"""``timerlog/``: the timer store's log (``TimerLog``, 5.0+), files of ``mappedFileSizeTimerLog`` bytes (default
104,857,600) named by their 20-digit start offset, holding 52-byte units appended by ``doEnqueue``:

====  ====  =========================================================================
at    size  field
====  ====  =========================================================================
0     4     size (52)
4     8     prevPos: the timerlog offset of the previous unit of the same slot, -1 for none
12    4     magic: 1 default, | 2 roll, | 4 delete (``isMagicOK``: no bit above the low four)
16    8     enqueue time (the store's currWriteTimeMs, ms)
24    4     delay (ms): the unit's time is enqueue time + delay (for a roll unit, the roll time)
28    8     commitlog offset of the ``rmq_sys_wheel_timer`` record (UNIT_PRE_SIZE_FOR_MSG)
36    4     size of that record
40    4     Java ``String.hashCode`` of its REAL_TOPIC (UNIT_PRE_SIZE_FOR_METRIC), 0 for none
44    8     reserved, 0
====  ====  =========================================================================

A unit that does not fit with 16 bytes to spare ends the file: a 16-byte blank (int bytes left, long 0, int
BLANK_MAGIC_CODE), then zeros. The broker's recovery walks units until the blank or the first unit whose size is
not 52 or whose magic is not OK, and truncates the log there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np

from storelib.constants import BLANK_MAGIC_CODE  # TimerLog.BLANK_MAGIC_CODE: 0xBBCCDDEE ^ 1880681586 + 8, the same

UNIT_SIZE = 52
UNIT_PRE_SIZE_FOR_MSG = 28
MIN_BLANK_LEN = 16
MAGIC_DEFAULT, MAGIC_ROLL, MAGIC_DELETE = 1, 2, 4
DEFAULT_FILE_SIZE = 104_857_600  # MessageStoreConfig.mappedFileSizeTimerLog
DIR = "timerlog"

UNIT_DTYPE = np.dtype(
    [
        ("size", ">i4"),
        ("prev_pos", ">i8"),
        ("magic", ">i4"),
        ("enqueue_ms", ">i8"),
        ("delay_ms", ">i4"),
        ("offset_py", ">i8"),
        ("size_py", ">i4"),
        ("topic_hash", ">i4"),
        ("reserved", ">i8"),
    ]
)
assert UNIT_DTYPE.itemsize == UNIT_SIZE

#: why a walk of a timerlog file stopped (END_MORE: a range of the file, the walk goes on after it)
END_BLANK, END_ZERO, END_BAD, END_EOF, END_MORE = "blank", "zeros", "bad-unit", "eof", "more"
#: units a range of a timerlog file holds at most (a walk of a file is done range by range: 13.6 MB)
RANGE_UNITS = 1 << 18


def is_magic_ok(magic: np.ndarray) -> np.ndarray:
    """``TimerMessageStore.isMagicOK``: ``(magic | 0xF) == 0xF``."""
    return (np.asarray(magic) | 0xF) == 0xF


@dataclasses.dataclass(frozen=True)
class Walk:
    """The units of one timerlog file (or of a range of it) as the broker's recovery reads them: ``units`` from
    file offset ``at``, ``end`` the file offset where the walk stopped and ``why`` (END_*)."""

    start: int  # the file's start offset (its name)
    units: np.ndarray  # UNIT_DTYPE
    end: int  # file offset after the last unit read
    why: str
    at: int = 0  # the file offset of the first unit

    @property
    def positions(self) -> np.ndarray:
        """Each unit's timerlog offset."""
        return self.start + self.at + UNIT_SIZE * np.arange(len(self.units), dtype=np.int64)

    @property
    def end_offset(self) -> int:
        return self.start + self.end

    def ranges(self) -> Iterator[Walk]:
        """The walk as ranges (a walk held whole is its one range)."""
        yield self


class LogFile(Protocol):
    """A timerlog file whose walk is read range by range (the last range's ``end`` and ``why`` are the file's)."""

    @property
    def start(self) -> int:
        """The file's start offset (its name)."""

    def ranges(self) -> Iterator[Walk]: ...


def walk(data: bytes | memoryview, start: int) -> Walk:
    """``recoverAndRevise`` over one file's bytes: units while size is 52 and the magic is OK; the walk ends at
    the blank, at a unit of zeros (the unwritten rest), at any other unit (damage) or at the end of the data."""
    n = len(data) // UNIT_SIZE
    units = np.frombuffer(data, UNIT_DTYPE, count=n)
    bad = np.flatnonzero((units["size"] != UNIT_SIZE) | ~is_magic_ok(units["magic"]))
    k = int(bad[0]) if len(bad) else n
    if k == n:  # a blank may sit in the last, partial unit (it needs MIN_BLANK_LEN bytes)
        tail = bytes(data[n * UNIT_SIZE : n * UNIT_SIZE + MIN_BLANK_LEN])
        blank = len(tail) == MIN_BLANK_LEN and int.from_bytes(tail[12:], "big", signed=True) == BLANK_MAGIC_CODE
        return Walk(start, units, k * UNIT_SIZE, END_BLANK if blank else END_EOF)
    stop = units[k]
    if stop["magic"] == BLANK_MAGIC_CODE:
        why = END_BLANK
    elif not bytes(data[k * UNIT_SIZE : (k + 1) * UNIT_SIZE]).strip(b"\0"):
        why = END_ZERO
    else:
        why = END_BAD
    return Walk(start, units[:k], k * UNIT_SIZE, why)


def walk_ranges(read: Callable[[int, int], bytes], size: int, start: int, units: int = RANGE_UNITS) -> Iterator[Walk]:
    """``walk`` of a file of ``size`` bytes read ``units`` units at a time (``read(file offset, length)``): the same
    units and end, range by range; every range but the last ends with END_MORE."""
    at = 0
    while True:
        length = min(units * UNIT_SIZE, size - at)
        w = walk(read(at, length), start)
        if w.why != END_EOF or at + length >= size:
            yield Walk(start, w.units, at + w.end, w.why, at)
            return
        yield Walk(start, w.units, at + w.end, END_MORE, at)
        at += length


def unit_time(units: np.ndarray) -> np.ndarray:
    """The time each unit is filed under (ms): enqueue time + delay."""
    return units["enqueue_ms"].astype(np.int64) + units["delay_ms"].astype(np.int64)


def file_name(offset: int) -> str:
    return f"{offset:020d}"


def offset_for_last_unit(file_size: int) -> int:
    """``TimerLog.getOffsetForLastUnit``: where the last whole unit of a file can start."""
    return file_size - (file_size - MIN_BLANK_LEN) % UNIT_SIZE - MIN_BLANK_LEN - UNIT_SIZE
