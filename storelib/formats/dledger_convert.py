"""``rmqstore convert``: a DLedger (or mixed) store as a plain CommitLog store, for a broker in file mode.

Each DLedger data file becomes the commitlog segment of the same start offset and size: its message records
without their 48-byte entry headers, packed from the start of the file, each one's PHYSICALOFFSET rewritten to
where it now is (the segment's start plus the sizes of the records before it: a prefix sum), then a BLANK record
over the rest of a full file (the headers freed 48 bytes per record, so it always fits) or zeros after the log's
last record. Segments of an old ``commitlog/`` (below ``dividedCommitlogOffset``) are plain already and copied.
Queue offsets are kept; the ConsumeQueues, BatchConsumeQueues, IndexFiles and checkpoint are rebuilt from the new
segments (``jobs.pipeline.convert_flow``). BODYCRC covers the body only, so it stays right.
"""

from __future__ import annotations

import struct

import numpy as np

from storelib.constants import BLANK_MAGIC_CODE
from storelib.formats.commitlog import OFF_PHYSICALOFFSET
from storelib.formats.scanner import RecordBatch


def plain_records(b: RecordBatch, at: int) -> bytes:
    """The batch's records one after the other, the first at commitlog offset ``at``, PHYSICALOFFSET rewritten."""
    sizes = b.total_size.astype(np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    src = np.repeat(b.record_start - starts, sizes) + np.arange(int(sizes.sum()))
    out = b.buf[src]
    field = (starts + OFF_PHYSICALOFFSET)[:, None] + np.arange(8)
    out[field] = (at + starts).astype(">i8").view(np.uint8).reshape(-1, 8)
    return out.tobytes()


def segment_tail(written: int, file_size: int, full: bool) -> tuple[bytes, int]:
    """What follows a segment's records: the head of a BLANK record over the rest (TOTALSIZE = the bytes left) for
    a full segment, nothing for the log's last one; and how many zero bytes follow that."""
    left = file_size - written
    head = struct.pack(">ii", left, BLANK_MAGIC_CODE) if full else b""
    return head, left - len(head)
