"""IndexFile: a hash index of message keys.

Layout: 40-byte header (beginTimestamp i64, endTimestamp i64, beginPhyOffset i64,
endPhyOffset i64, hashSlotCount i32, indexCount i32), ``maxHashSlotNum`` 4-byte hash
slots, then ``maxIndexNum`` 20-byte entries (keyHash i32, phyOffset i64, timeDiff i32,
prevIndex i32).

``IndexFile.putKey``, per key in commitlog order: "indexCount starts at 1: entry slot 0
is never used; a file is full when indexCount reaches maxIndexNum"; prevIndex = the slot's
current value; "timeDiff ... is computed before the header is updated"; "A new file starts
from the previous file's endPhyOffset and endTimestamp as its begin and end values".
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from storelib.errors import StoreFormatError
from storelib.formats import index_walks, kernel
from storelib.formats.javahash import index_key_hash, java_hash

if TYPE_CHECKING:
    import mmap


class IndexSizes(Protocol):
    """The broker settings that size an IndexFile (storelib.broker.config.BrokerConfig has them)."""

    @property
    def maxHashSlotNum(self) -> int: ...

    @property
    def maxIndexNum(self) -> int: ...


class IndexSettings(IndexSizes, Protocol):
    """The broker settings an IndexFile is written by (storelib.broker.config.BrokerConfig has them)."""

    @property
    def messageIndexEnable(self) -> bool: ...

    @property
    def hash_slot_every_put(self) -> bool: ...


@dataclasses.dataclass(frozen=True)
class IndexLayout:
    """Where an IndexFile's parts lie: the header at 0, ``slots`` (maxHashSlotNum) hash slots after it, then
    ``entries`` (maxIndexNum) entries."""

    HEADER_SIZE: ClassVar[int] = 40
    SLOT_SIZE: ClassVar[int] = 4
    ENTRY_SIZE: ClassVar[int] = 20

    slots: int
    entries: int

    @classmethod
    def of(cls, cfg: IndexSizes) -> IndexLayout:
        return cls(cfg.maxHashSlotNum, cfg.maxIndexNum)

    @property
    def entries_at(self) -> int:
        """The file offset of entry 0: after the header and the slot table."""
        return self.HEADER_SIZE + self.slots * self.SLOT_SIZE

    @property
    def slot_table(self) -> tuple[int, int]:
        """(file offset, length) of the hash slots."""
        return self.HEADER_SIZE, self.slots * self.SLOT_SIZE

    def entry_at(self, n: int) -> int:
        """The file offset of entry ``n``."""
        return self.entries_at + n * self.ENTRY_SIZE

    @property
    def size(self) -> int:
        """The whole file: every file of a store has this size, zero-filled after its last entry."""
        return self.entry_at(self.entries)

    def head_size(self, used: int) -> int:
        """The bytes before the zeros of a file of ``used`` entries: the header alone when none, else the header,
        the slot table, entry 0 (never used) and entries 1..used."""
        return self.HEADER_SIZE if used == 0 else self.entry_at(used + 1)

    def part_at(self, at: int) -> str:
        """What file offset ``at`` falls in: ``header``, ``hash slot k`` or ``entry n``."""
        if at < self.HEADER_SIZE:
            return "header"
        if at < self.entries_at:
            return f"hash slot {(at - self.HEADER_SIZE) // self.SLOT_SIZE}"
        return f"entry {(at - self.entries_at) // self.ENTRY_SIZE}"

    @staticmethod
    def entries_bytes(n: int) -> int:
        """The bytes ``n`` entries take."""
        return n * IndexLayout.ENTRY_SIZE


_HEADER = struct.Struct(">qqqqii")
assert _HEADER.size == IndexLayout.HEADER_SIZE
ENTRY_DTYPE = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])
assert ENTRY_DTYPE.itemsize == IndexLayout.ENTRY_SIZE


@dataclasses.dataclass(frozen=True)
class IndexHeader:
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1

    def pack(self) -> bytes:
        return _HEADER.pack(
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    @classmethod
    def unpack(cls, data: bytes | memoryview) -> IndexHeader:
        return cls(*_HEADER.unpack_from(data, 0))


def index_file_size(slots: int, max_index_num: int) -> int:
    return IndexLayout(slots, max_index_num).size


def entries_per_file(max_index_num: int) -> int:
    """A full file holds maxIndexNum - 1 entries (entry 0 is never used)."""
    return max_index_num - 1


def build_index_file(
    key_hash: np.ndarray,
    phy_offset: np.ndarray,
    store_timestamp: np.ndarray,
    inherited: tuple[int, int],
    cfg: IndexSettings,
) -> tuple[IndexHeader, bytes]:
    """One whole IndexFile (see ``build_index_file_head``), zero-filled to its full size."""
    header, head = build_index_file_head(key_hash, phy_offset, store_timestamp, inherited, cfg)
    return header, bytes(head) + bytes(index_file_size(cfg.maxHashSlotNum, cfg.maxIndexNum) - len(head))


def index_file_head_size(entries: int, cfg: IndexSettings) -> int:
    """The bytes of an IndexFile before its zeros: the header alone when it has no entry, else the header, the slot
    table, entry 0 (never used) and entries 1..n."""
    return IndexLayout.of(cfg).head_size(entries)


def build_index_file_head(
    key_hash: np.ndarray,
    phy_offset: np.ndarray,
    store_timestamp: np.ndarray,
    inherited: tuple[int, int],
    cfg: IndexSettings,
) -> tuple[IndexHeader, bytearray]:
    """The start of one IndexFile (``put_index_file_head`` into a new buffer of ``index_file_head_size``)."""
    head = bytearray(index_file_head_size(len(key_hash), cfg))
    return put_index_file_head(head, key_hash, phy_offset, store_timestamp, inherited, cfg), head


def put_index_file_head(
    out: bytearray | memoryview | mmap.mmap,
    key_hash: np.ndarray,
    phy_offset: np.ndarray,
    store_timestamp: np.ndarray,
    inherited: tuple[int, int],
    cfg: IndexSettings,
) -> IndexHeader:
    """One IndexFile's header, slots and used entries from its entries in put order, one compiled pass, into
    ``out``: the file's first ``index_file_head_size`` bytes (or more), zeros.

    ``inherited`` is (endPhyOffset, endTimestamp) of the previous file, (0, 0) for the first.
    At most maxIndexNum - 1 entries. The rest of the file, up to ``index_file_size``, is zeros.
    """
    n = len(key_hash)
    slots_n, max_n = cfg.maxHashSlotNum, cfg.maxIndexNum
    if n > entries_per_file(max_n):
        raise ValueError(f"{n} entries do not fit in one IndexFile of maxIndexNum {max_n}")
    inherited_phy, inherited_ts = inherited
    if n == 0:
        header = IndexHeader(inherited_ts, inherited_ts, inherited_phy, inherited_phy, 0, 1)
        out[: IndexLayout.HEADER_SIZE] = header.pack()
        return header
    key_hash, phy_offset, store_timestamp = (_ints(a) for a in (key_hash, phy_offset, store_timestamp))
    used = kernel.index_head(
        key_hash,
        phy_offset,
        store_timestamp,
        inherited_ts,
        np.frombuffer(out, dtype=np.uint8),
        IndexLayout.HEADER_SIZE,
        slots_n,
        IndexLayout(slots_n, max_n).entries_at,
    )
    header = IndexHeader(
        begin_timestamp=int(store_timestamp[0]),
        end_timestamp=int(store_timestamp[-1]),
        begin_phy_offset=int(phy_offset[0]),
        end_phy_offset=int(phy_offset[-1]),
        hash_slot_count=int(used) if not cfg.hash_slot_every_put else n,
        index_count=n + 1,
    )
    out[: IndexLayout.HEADER_SIZE] = header.pack()
    return header


def _ints(values: object) -> np.ndarray:
    """An integer array as it is (a structured array's field included: no copy), a list as int64."""
    a = np.asarray(values)
    return a if a.dtype.kind in "iu" and a.dtype.isnative else a.astype(np.int64)


class IndexFileReader:
    """An IndexFile read back, with the broker's key lookup."""

    def __init__(self, data: bytes | memoryview, cfg: IndexSettings, file: str = "") -> None:
        layout = IndexLayout.of(cfg)
        expected = layout.size
        if len(data) != expected:
            raise StoreFormatError(
                f"IndexFile is {len(data)} bytes, expected {expected} "
                f"(maxHashSlotNum {cfg.maxHashSlotNum}, maxIndexNum {cfg.maxIndexNum})",
                file,
            )
        self.file = file
        self.header = IndexHeader.unpack(data)
        self.slots_n = cfg.maxHashSlotNum
        self.slots = np.frombuffer(data, dtype=">i4", count=self.slots_n, offset=IndexLayout.HEADER_SIZE)
        self.entries = np.frombuffer(data, dtype=ENTRY_DTYPE, count=cfg.maxIndexNum, offset=layout.entries_at)
        #: hash slot -> why a lookup stopped walking its chain (a cycle): found by select_phy_offsets
        self.broken_chains: dict[int, str] = {}

    def is_time_matched(self, begin: int, end: int) -> bool:
        h = self.header
        return (
            (begin < h.begin_timestamp and end > h.end_timestamp)
            or (h.begin_timestamp <= begin <= h.end_timestamp)
            or (h.begin_timestamp <= end <= h.end_timestamp)
        )

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """``IndexFile.selectPhyOffset``: follow the slot's chain, newest first, for ``key`` (``topic#k``)."""
        key_hash = key_hash_of(key)
        out: list[int] = []
        if max_num <= 0:
            return out
        for _, e, time_read in self._chain(key_hash, begin):  # stops before the entry after the max_num-th match
            if int(e["key_hash"]) == key_hash and begin <= time_read <= end:
                out.append(int(e["phy_offset"]))
                if len(out) >= max_num:
                    break
        return out

    def message_key_hashes(self, key: str, phy_offset: int) -> frozenset[int] | None:
        """The key hashes of every entry of the message at ``phy_offset`` whose ``key`` entry the chain finds (None
        when it finds none): ``IndexService.buildIndex`` appends one message's entries one after another, so they
        are the run of entries with its offset around that one, however long another key's chain is."""
        key_hash = key_hash_of(key)
        chain = self._chain(key_hash, 0)
        at = next((n for n, e, _ in chain if e["key_hash"] == key_hash and e["phy_offset"] == phy_offset), None)
        return None if at is None else self._run_hashes(at, phy_offset)

    def leading_key_hashes(self, phy_offset: int) -> frozenset[int]:
        """The key hashes of the file's first entries while they are the message's at ``phy_offset``: the keys of a
        message that did not all fit in the file before (``IndexService.putKey`` puts the rest into a new file)."""
        if self.header.index_count <= 1 or self.entries[1]["phy_offset"] != phy_offset:
            return frozenset()
        return self._run_hashes(1, phy_offset)

    def _run_hashes(self, at: int, phy_offset: int) -> frozenset[int]:
        """The key hashes of the run of entries around entry ``at`` that hold ``phy_offset`` (one message's)."""
        first, last = at, at
        while first > 1 and self.entries[first - 1]["phy_offset"] == phy_offset:
            first -= 1
        while last < self.header.index_count - 1 and self.entries[last + 1]["phy_offset"] == phy_offset:
            last += 1
        return frozenset(int(h) for h in self.entries["key_hash"][first : last + 1])

    def _chain(self, key_hash: int, begin: int) -> Iterator[tuple[int, np.void, int]]:
        """The entries of ``key_hash``'s slot chain, newest first, to one stored before ``begin``: (entry number,
        entry, its store time). A chain of a sound file visits each entry once; the walk stops at a revisited entry
        or after indexCount steps (the broker's own loop would not end) and records the slot in ``broken_chains``."""
        count = self.header.index_count
        slot = key_hash % self.slots_n
        nxt = int(self.slots[slot])
        if nxt <= 0 or nxt > count or count <= 1:
            return
        seen: set[int] = set()
        while True:
            if nxt in seen or len(seen) >= count:
                self.broken_chains[slot] = f"the chain of hash slot {slot} comes back to entry {nxt}: a cycle"
                return
            seen.add(nxt)
            e = self.entries[nxt]
            time_diff = int(e["time_diff"])
            if time_diff < 0:
                return
            time_read = self.header.begin_timestamp + time_diff * 1000
            yield nxt, e, time_read
            prev = int(e["prev_index"])
            if prev <= 0 or prev > count or prev == nxt or time_read < begin:
                return
            nxt = prev


def key_hash_of(key: str) -> int:
    """An IndexFile entry's keyHash of ``key`` (``topic#k``)."""
    return int(index_key_hash(np.array([java_hash(key)]))[0])


def query_offsets(files: list[IndexFileReader], key: str, max_num: int, begin: int, end: int) -> list[int]:
    """``IndexService.queryOffset``: newest file first, stop at ``max_num`` or before ``begin``."""
    out: list[int] = []
    for f in reversed(files):
        if f.is_time_matched(begin, end):
            out.extend(f.select_phy_offsets(key, max_num - len(out), begin, end))
        if f.header.begin_timestamp < begin or len(out) >= max_num:
            break
    return out


def needs_empty_tail_file(total_entries: int, max_index_num: int, any_message_after_last_entry: bool) -> bool:
    """The broker opens a new (empty) file at the start of the next message once the last is full.

    ``IndexService.buildIndex`` calls ``retryGetAndCreateIndexFile`` for every dispatched
    message, keys or not, so a full last file followed by any message gives an empty file
    (indexCount 1, begin/end values inherited). A store with messages but no keys has one.
    """
    if total_entries == 0:
        return any_message_after_last_entry
    return total_entries % entries_per_file(max_index_num) == 0 and any_message_after_last_entry


class IndexFileSeries:
    """Streaming IndexService: feed entries in commitlog order, get each file as it fills up.

    For one process writing a whole store (the generator); the Spark rebuild computes the
    same file boundaries from entry counts and builds the files in parallel.
    """

    def __init__(self, cfg: IndexSettings) -> None:
        self.cfg = cfg
        self.per_file = entries_per_file(cfg.maxIndexNum)
        self._parts: list[np.ndarray] = []  # (n, 3) int64: key hash, phy offset, store timestamp
        self._pending = 0
        self._inherited = (0, 0)
        self._last_entry_offset = -1
        self._last_message_offset = -1
        self.headers: list[IndexHeader] = []
        self.entries = 0

    def add(
        self, key_hash: np.ndarray, phy_offset: np.ndarray, store_timestamp: np.ndarray, last_message_offset: int
    ) -> list[tuple[IndexHeader, bytes]]:
        """Add entries (in put order); ``last_message_offset``: the newest message record seen so far."""
        self._last_message_offset = max(self._last_message_offset, last_message_offset)
        out = []
        if len(key_hash):
            self._last_entry_offset = int(phy_offset[-1])
            self.entries += len(key_hash)
            self._parts.append(np.stack([np.asarray(key_hash, np.int64), phy_offset, store_timestamp], axis=1))
            self._pending += len(key_hash)
        while self._pending >= self.per_file and self._more_after(self.per_file):
            out.append(self._build(self.per_file))
        return out

    def _more_after(self, n: int) -> bool:
        """A full file is final once a later entry or message exists (or at finish)."""
        return self._pending > n or self._last_message_offset > self._last_entry_offset

    def _build(self, n: int) -> tuple[IndexHeader, bytes]:
        allp = np.concatenate(self._parts) if self._parts else np.zeros((0, 3), np.int64)
        take, rest = allp[:n], allp[n:]
        self._parts = [rest] if len(rest) else []
        self._pending = len(rest)
        header, data = build_index_file(take[:, 0], take[:, 1], take[:, 2], self._inherited, self.cfg)
        self._inherited = (header.end_phy_offset, header.end_timestamp)
        self.headers.append(header)
        return header, data

    def finish(self) -> list[tuple[IndexHeader, bytes]]:
        """The remaining files, including the broker's empty tail file when one is due."""
        out: list[tuple[IndexHeader, bytes]] = []
        if not self.cfg.messageIndexEnable or self._last_message_offset < 0:
            return out
        while self._pending > 0:
            out.append(self._build(min(self._pending, self.per_file)))
        if needs_empty_tail_file(
            self.entries, self.cfg.maxIndexNum, self._last_message_offset > self._last_entry_offset
        ):
            out.append(self._build(0))
        return out


@dataclasses.dataclass(frozen=True)
class IndexPlan:
    """Where one IndexFile's entries are: ``slices`` (segment, first, stop) of the segments' entries in put
    order, and ``inherited`` (segment, position) of the previous file's last entry (None: the first file)."""

    slices: tuple[tuple[str, int, int], ...]
    inherited: tuple[str, int] | None


def index_file_plans(counts: list[tuple[str, int]], per_file: int) -> list[IndexPlan]:
    """Entry g (0-based, commitlog order over the whole store) goes to file g // per_file; ``counts`` (segment,
    entries) in offset order say which segment holds it, at which position."""
    located, total = [], 0  # (first entry, entries, segment) of each segment with entries
    for segment, n in counts:
        if n:
            located.append((total, n, segment))
            total += n
    plans = []
    for k in range(-(-total // per_file)):
        lo, hi = k * per_file, min((k + 1) * per_file, total)
        slices = tuple(
            (seg, max(lo, base) - base, min(hi, base + n) - base)
            for base, n, seg in located
            if base < hi and base + n > lo
        )
        inherited = None
        if k:
            base, _, seg = next(x for x in reversed(located) if x[0] <= lo - 1)
            inherited = (seg, lo - 1 - base)
        plans.append(IndexPlan(slices, inherited))
    return plans


def lookup_reachable(reader: IndexFileReader) -> np.ndarray:
    """Which entries (1 .. indexCount - 1) the broker's lookup of their own key returns.

    ``IndexFile.selectPhyOffset`` walks only the chain of slot keyHash % slots: it starts at the slot's entry
    when 0 < slot <= indexCount, stops before an entry whose timeDiff < 0 and after one whose prevIndex is
    <= 0, > indexCount or itself, and collects the entries of its keyHash. A lookup over the whole time range
    therefore finds a (keyHash, commitlog offset) exactly when an entry holding it is on that slot's walk; an
    entry another slot's walk reaches (a damaged prevIndex merged two chains) is not found. A walk that comes
    back to an entry it passed (a cycle) is taken to stop there: the broker would loop forever on it.

    A sound file's walks pass each entry once (index_walks.slot_walks). Where walks meet (damage), the answer is
    index_walks.walk_reaches': linear time, ~40 bytes of memory an entry, its inputs included (800 MB for a full
    20M-entry file).
    """
    count = reader.header.index_count
    n = max(1, min(count, len(reader.entries)))  # entries 1 .. n-1 are in the file and within indexCount
    if count <= 1:
        return np.zeros(max(0, n - 1), dtype=bool)
    slots = np.ascontiguousarray(reader.slots, dtype=np.int32)
    prev = np.ascontiguousarray(reader.entries["prev_index"][:n], dtype=np.int32)
    bad_time = np.ascontiguousarray(reader.entries["time_diff"][:n] < 0)
    key_hash = np.ascontiguousarray(reader.entries["key_hash"][:n], dtype=np.int32)
    reach, met = index_walks.slot_walks(slots, prev, bad_time, key_hash, n)  # a sound file's walks never meet
    if met:
        reach = index_walks.walk_reaches(slots, prev, bad_time, key_hash, n)
    return reach[1:]
