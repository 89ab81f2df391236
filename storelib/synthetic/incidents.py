"""The damage real incidents leave in a stopped store, done on purpose to a copy (the demo's broken store).

- a topic's whole ``consumequeue/<topic>/`` lost (a cleanup script, a restore that left it out);
- a ConsumeQueue file that reads as zeros (a file system repaired after a power loss, a bad block);
- a torn commitlog tail: the broker died in the middle of a memory-mapped append, so the last record has its
  TOTALSIZE, magic code and two more fields, then the zeros of the preallocated segment.

Each function changes the store in place and says what it did in one line.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from storelib.broker.config import BrokerConfig
from storelib.constants import MESSAGE_MAGIC_CODE
from storelib.formats.scanner import SegmentScanner
from storelib.layout import commitlog_file, parse_offset_name

TORN_TOTAL_SIZE = 300  # what the torn record's TOTALSIZE claims; only 16 of its bytes reach the disk
TORN_HEAD = struct.pack(">iiii", TORN_TOTAL_SIZE, MESSAGE_MAGIC_CODE, 0x12345678, 1)  # size, magic, BODYCRC, queueId


def lose_consume_queue(store: Path, topic: str) -> str:
    """Delete ``consumequeue/<topic>/`` with every queue of the topic."""
    shutil.rmtree(store / "consumequeue" / topic)
    return f"lost consumequeue/{topic}/ (every queue of the topic)"


def zero_consume_queue_file(store: Path, topic: str, queue_id: int) -> str:
    """Overwrite the queue's first ConsumeQueue file with zeros of the same length."""
    path = min((store / "consumequeue" / topic / str(queue_id)).iterdir())
    path.write_bytes(bytes(path.stat().st_size))
    return f"zeroed {path.relative_to(store)}"


def tear_commitlog_tail(store: Path, cfg: BrokerConfig) -> str:
    """Write the first 16 bytes of one more record right after the last record of the last segment."""
    segments = sorted(p for p in (store / "commitlog").iterdir() if parse_offset_name(p.name) is not None)
    last = segments[-1]
    start = int(last.name)
    with last.open("rb") as f:
        scanner = SegmentScanner(f, commitlog_file(last.name), start, cfg.mappedFileSizeCommitLog, check_crc=False)
        for _ in scanner:
            pass
    assert scanner.end is not None  # set when the scan is done
    end = scanner.end.offset
    if end - start + len(TORN_HEAD) > cfg.mappedFileSizeCommitLog:
        raise ValueError(f"{commitlog_file(last.name)} is full: no room for a torn record after offset {end}")
    with last.open("r+b") as f:
        f.seek(end - start)
        f.write(TORN_HEAD)
    return f"tore the commitlog tail: a record cut after 16 bytes at offset {end:,} (commitlog/{last.name})"
