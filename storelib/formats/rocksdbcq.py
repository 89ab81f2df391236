"""RocksDB ConsumeQueue (5.2+, ``storeType=defaultRocksDB``): a RocksDB opened at ``<root>/consumequeue``
(5.5.0 optionally ``<root>/consumequeue_rocksdb``), column families ``default`` (units) and ``offset``.

- Unit key: int32 n, 0x01, topic (n UTF-8 bytes), 0x01, int32 queueId, 0x01, int64 CQ index (19+n bytes).
  Value, 28 bytes: commitlog offset int64, size int32, tagsCode int64, storeTimestamp int64.
- Offset key: int32 n, 0x01, topic, 0x01, ``max``/``min``, 0x01, int32 queueId. Value, 16 bytes: commitlog
  offset int64, CQ index int64. Topic ``CHECKPOINT_TOPIC``: the dispatch checkpoint (8-byte value).
- No pre-blank, no BatchCQ (``RocksDBConsumeQueue`` is the queue of every topic), no ext. A BatchCQ topic's
  unit still sits at CQ index = QUEUEOFFSET, which advances by INNER_NUM: its indexes are not dense.
- Topic configs then live in a RocksDB at ``config/topics/`` (key = topic, value = TopicConfig JSON).

A RocksDB the broker owns is never opened: the directory is copied first and the copy opened read-only
(``rocksdict``, raw mode).
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from storelib.errors import StoreFormatError
from storelib.formats.consumequeue import QueueFiles

#: RocksDB's own file names (not RocketMQ's): their presence in consumequeue/ marks a RocksDB there
ROCKSDB_FILE = re.compile(r"(CURRENT|IDENTITY|LOCK|MANIFEST-\d+|OPTIONS-\d+|\d+\.(sst|log))\Z")
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
#: where a RocksDB ConsumeQueue lives: consumequeue/, or consumequeue_rocksdb/ (5.5.0 with
#: useSeparateStorePathForRocksdbCQ; the broker refuses to start when the other one also holds a CURRENT)
ROCKSDB_CQ_DIRS = ("consumequeue", "consumequeue_rocksdb")
UNIT_VALUE = struct.Struct(">qiqq")  # commitlog offset, size, tagsCode, storeTimestamp
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")


def is_rocksdb(entries: set[str] | frozenset[str]) -> bool:
    """Directory entries that hold a RocksDB (its CURRENT file and a MANIFEST)."""
    return "CURRENT" in entries and any(e.startswith("MANIFEST-") for e in entries)


def parse_unit_key(key: bytes) -> tuple[str, int, int]:
    """(topic, queueId, CQ index) of a unit key."""
    n = _INT.unpack_from(key, 0)[0]
    if len(key) != 19 + n or key[4] != 1 or key[5 + n] != 1 or key[10 + n] != 1:
        raise StoreFormatError(f"not a RocksDB ConsumeQueue unit key: {key[:64]!r}", "consumequeue")
    return key[5 : 5 + n].decode("utf-8", "replace"), _INT.unpack_from(key, 6 + n)[0], _LONG.unpack_from(key, 11 + n)[0]


def unit_key(topic: str, queue_id: int, index: int) -> bytes:
    """The unit key of (topic, queueId, CQ index)."""
    t = topic.encode()
    return _INT.pack(len(t)) + b"\x01" + t + b"\x01" + _INT.pack(queue_id) + b"\x01" + _LONG.pack(index)


class RocksDBCopy:
    """A read-only copy of a RocksDB directory, removed on close (``with RocksDBCopy(path) as db``)."""

    def __init__(self, path: str | Path) -> None:
        from rocksdict import AccessType, Options, Rdict

        self.tmp = tempfile.mkdtemp(prefix="rmqstore-rocksdb-")
        copy = Path(self.tmp) / "db"
        shutil.copytree(path, copy, ignore=shutil.ignore_patterns("LOCK"))
        raw = Options(raw_mode=True)
        families = {cf: Options(raw_mode=True) for cf in Rdict.list_cf(str(copy), raw)}
        self.db = Rdict(str(copy), options=raw, access_type=AccessType.read_only(), column_families=families)

    def items(self, family: str = "default") -> Iterator[tuple[bytes, bytes]]:
        yield from self.db.get_column_family(family).items()

    def close(self) -> None:
        self.db.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> RocksDBCopy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_units(path: str | Path) -> dict[tuple[str, int], np.ndarray]:
    """Every queue's units, by (topic, queueId): int64 rows (CQ index, commitlog offset, size, tagsCode,
    storeTimestamp) in CQ index order (keys sort bytewise: big-endian indexes of one queue are in order)."""
    rows: dict[tuple[str, int], list[tuple[int, ...]]] = {}
    with RocksDBCopy(path) as db:
        for key, value in db.items():
            topic, queue_id, index = parse_unit_key(key)
            rows.setdefault((topic, queue_id), []).append((index, *UNIT_VALUE.unpack(value)))
    return {k: np.array(v, dtype=np.int64).reshape(-1, 5) for k, v in rows.items()}


def as_queue_files(units: np.ndarray, file_size: int) -> list[tuple[str, bytes]]:
    """One queue's RocksDB units (read_units rows) laid out as the ConsumeQueue files a file store would hold
    (unit at CQ index * 20, pre-blank before the first): what the audit compares with the rebuilt files."""
    q = QueueFiles(file_size)
    out = list(q.add(units[:, 0], units[:, 1], units[:, 2].astype(np.int32), units[:, 3]))
    return out + list(q.finish())


def batch_cq_topics(path: str | Path) -> tuple[str, ...]:
    """Topics whose ``queue.type`` is BatchCQ in a RocksDB topic config (``config/topics/``)."""
    out = []
    with RocksDBCopy(path) as db:
        for key, value in db.items():
            try:
                attributes = json.loads(value).get("attributes") or {}
            except (ValueError, AttributeError):
                continue
            if attributes.get("queue.type") == "BatchCQ":
                out.append(key.decode("utf-8", "replace"))
    return tuple(sorted(out))
