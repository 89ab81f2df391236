"""StoreCheckpoint: one 4096-byte page; physicMsgTimestamp i64 @0, logicsMsgTimestamp i64 @8,
indexMsgTimestamp i64 @16 (5.0 adds masterFlushedOffset @24, 5.1.1 confirmPhyOffset @32, 5.5.0
logicsPhysicalOffset @40; a 4.9.x page is zero there)."""

from __future__ import annotations

import dataclasses
import struct

from storelib.constants import CHECKPOINT_SIZE
from storelib.errors import StoreFormatError

_FIELDS = struct.Struct(">qqqqqq")
_MIN_SIZE = 40  # a page is read from at least its first five fields (the sixth, 5.5.0's, may be cut off)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    logics_physical_offset: int = 0

    def with_5x_fields_of(self, live: Checkpoint | None) -> Checkpoint:
        """This checkpoint's timestamps with the 5.x offsets of ``live`` (kept as the broker wrote them)."""
        if live is None:
            return self
        return dataclasses.replace(
            self,
            master_flushed_offset=live.master_flushed_offset,
            confirm_phy_offset=live.confirm_phy_offset,
            logics_physical_offset=live.logics_physical_offset,
        )

    def pack(self) -> bytes:
        return _FIELDS.pack(*dataclasses.astuple(self)).ljust(CHECKPOINT_SIZE, b"\0")

    @classmethod
    def unpack(cls, data: bytes, file: str = "checkpoint") -> Checkpoint:
        if len(data) < _MIN_SIZE:
            raise StoreFormatError(f"checkpoint is {len(data)} bytes, expected {CHECKPOINT_SIZE}", file)
        return cls(*_FIELDS.unpack_from(bytes(data[: _FIELDS.size]).ljust(_FIELDS.size, b"\0"), 0))

    def min_timestamp(self) -> int:
        """``StoreCheckpoint.getMinTimestamp``: min(physic, logics) minus 3 s, not below 0."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)
