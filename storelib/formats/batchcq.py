"""BatchConsumeQueue files (5.0+): 46-byte units in ``batchconsumequeue/<topic>/<queueId>/``.

Unit: commitlog offset i64, TOTALSIZE i32, tagsCode i64, storeTimestamp i64, msgBaseOffset i64, batchSize i16,
compactedOffset i32 (always -1), reserved i32 (0). ``BatchConsumeQueue.putBatchMessagePositionInfo`` appends
each unit at the queue's byte end (no positioning by queue offset, no pre-blank), so unit k of the queue is at
logical byte k*46, in the file named by its start byte offset (``mapperFileSizeBatchConsumeQueue`` bytes,
default 300,000 units). msgBaseOffset = INNER_BASE and batchSize = INNER_NUM when both properties exist, else
QUEUEOFFSET and 1; units are dense: base[k+1] = base[k] + batchSize[k]. ``BatchConsumeQueue.recover`` keeps
units while offset >= 0, size > 0, msgBaseOffset >= 0 and batchSize > 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from storelib.formats.consumequeue import QueueFinding, QueueFormat
from storelib.layout import BATCH_CONSUMEQUEUE, offset_file_name

BCQ_STORE_UNIT_SIZE = 46
PROPERTY_INNER_NUM = "INNER_NUM"
PROPERTY_INNER_BASE = "INNER_BASE"
BCQ_UNIT_DTYPE = np.dtype(
    [
        ("offset", ">i8"),
        ("size", ">i4"),
        ("tags_code", ">i8"),
        ("store_timestamp", ">i8"),
        ("msg_base_offset", ">i8"),
        ("batch_size", ">i2"),
        ("compacted_offset", ">i4"),
        ("reserved", ">i4"),
    ]
)
assert BCQ_UNIT_DTYPE.itemsize == BCQ_STORE_UNIT_SIZE


def encode_units(
    offsets: np.ndarray,
    sizes: np.ndarray,
    tags_codes: np.ndarray,
    store_timestamps: np.ndarray,
    msg_base_offsets: np.ndarray,
    batch_sizes: np.ndarray,
) -> bytes:
    """Units as the broker writes them (compactedOffset -1, reserved 0)."""
    units = np.zeros(len(offsets), dtype=BCQ_UNIT_DTYPE)
    units["offset"], units["size"], units["tags_code"] = offsets, sizes, tags_codes
    units["store_timestamp"], units["msg_base_offset"], units["batch_size"] = (
        store_timestamps,
        msg_base_offsets,
        batch_sizes,
    )
    units["compacted_offset"] = -1
    return units.tobytes()


def decode_units(data: bytes | memoryview) -> np.ndarray:
    """Whole units of ``data`` (a partial unit is ignored)."""
    return np.frombuffer(data, dtype=BCQ_UNIT_DTYPE, count=len(data) // BCQ_STORE_UNIT_SIZE)


#: ``BatchConsumeQueue``: units appended in msgBaseOffset order, no pre-blank
BATCH_CONSUME_QUEUE = QueueFormat(
    "BatchConsumeQueue",
    BATCH_CONSUMEQUEUE,
    BCQ_UNIT_DTYPE,
    decode_units,
    "mapperFileSizeBatchConsumeQueue",
    ("offset", "msg_base_offset"),
    ("size", "batch_size"),
    "msg_base_offset",
    False,
)


@dataclasses.dataclass
class BatchQueueFiles:
    """One BatchConsumeQueue's files from its units in queue order, one full file at a time."""

    file_size: int
    findings: list[QueueFinding] = dataclasses.field(default_factory=list)
    entries: int = 0  # units
    min_offset: int | None = None  # msgBaseOffset of the first unit
    next_offset: int | None = None  # msgBaseOffset + batchSize of the last unit
    files: int = 0
    _buf: bytearray = dataclasses.field(default_factory=bytearray)

    def add_run(self, units: bytes) -> Iterator[tuple[str, bytes]]:
        """Append encoded units (ascending msgBaseOffset); yield every file they complete."""
        u = decode_units(units)
        if len(u) == 0:
            return
        base, num = u["msg_base_offset"].astype(np.int64), u["batch_size"].astype(np.int64)
        expected = np.concatenate(([base[0] if self.next_offset is None else self.next_offset], (base + num)[:-1]))
        for i in np.flatnonzero(base != expected):
            kind = "queue-offset-gap" if base[i] > expected[i] else "duplicate-queue-offset"
            self.findings.append(
                QueueFinding(kind, int(expected[i]), int(abs(base[i] - expected[i])), int(u["offset"][i]))
            )
        if self.min_offset is None:
            self.min_offset = int(base[0])
        self.next_offset = int(base[-1] + num[-1])
        self.entries += len(u)
        self._buf += units
        while len(self._buf) >= self.file_size:
            yield self._emit(self.file_size)

    def _emit(self, size: int) -> tuple[str, bytes]:
        data = bytes(self._buf[:size]).ljust(self.file_size, b"\0")
        del self._buf[:size]
        self.files += 1
        return offset_file_name((self.files - 1) * self.file_size), data

    def finish(self) -> Iterator[tuple[str, bytes]]:
        """Yield the last, partly filled file."""
        if self._buf:
            yield self._emit(len(self._buf))
