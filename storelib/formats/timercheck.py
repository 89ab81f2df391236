"""``config/timercheck``: the timer store's progress (``TimerCheckpoint``, 5.0+), one 4096-byte page (mapped at
``OS_PAGE_SIZE``) of big-endian longs: lastReadTimeMs @0 (the wheel is read up to here), lastTimerLogFlushPos @8,
lastTimerQueueOffset @16 (``rmq_sys_wheel_timer`` queue 0 enqueued up to here), masterTimerQueueOffset @24, and the
DataVersion's stateVersion @32, timestamp @40, counter @48. The same in every 5.x release read (5.0.0 to 5.5.0)."""

from __future__ import annotations

import dataclasses
import struct

from storelib.errors import StoreFormatError

PAGE_SIZE = 4096
PATH = "config/timercheck"
_FIELDS = struct.Struct(">qqqqqqq")


@dataclasses.dataclass(frozen=True)
class TimerCheckpoint:
    last_read_time_ms: int = 0
    last_timer_log_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    data_version_timestamp: int = 0
    data_version_counter: int = 0

    def pack(self) -> bytes:
        return _FIELDS.pack(*dataclasses.astuple(self)).ljust(PAGE_SIZE, b"\0")

    @classmethod
    def unpack(cls, data: bytes, file: str = PATH) -> TimerCheckpoint:
        """The page's fields; a file shorter than its four offsets is refused (the broker maps a zero page)."""
        if len(data) < 32:
            raise StoreFormatError(f"the timer checkpoint is {len(data)} bytes, expected {PAGE_SIZE}", file)
        return cls(*_FIELDS.unpack_from(bytes(data[: _FIELDS.size]).ljust(_FIELDS.size, b"\0")))
