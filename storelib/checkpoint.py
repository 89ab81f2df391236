"""StoreCheckpoint: one 4096-byte page; physicMsgTimestamp i64 @0, logicsMsgTimestamp i64 @8,
indexMsgTimestamp i64 @16 (5.x adds masterFlushedOffset @24 and confirmPhyOffset @32)."""

from __future__ import annotations

import dataclasses
import struct

from storelib.constants import CHECKPOINT_SIZE
from storelib.errors import StoreFormatError

_FIELDS = struct.Struct(">qqqqq")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0

    def pack(self) -> bytes:
        return _FIELDS.pack(*dataclasses.astuple(self)).ljust(CHECKPOINT_SIZE, b"\0")

    @classmethod
    def unpack(cls, data: bytes, file: str = "checkpoint") -> Checkpoint:
        if len(data) < _FIELDS.size:
            raise StoreFormatError(f"checkpoint is {len(data)} bytes, expected {CHECKPOINT_SIZE}", file)
        return cls(*_FIELDS.unpack_from(data, 0))

    def min_timestamp(self) -> int:
        """``StoreCheckpoint.getMinTimestamp``: min(physic, logics) minus 3 s, not below 0."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)
