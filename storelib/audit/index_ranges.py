"""The IndexFile audit by entry: live entries against the rebuilt ones, by commitlog range, and whether the
broker's key lookup (``IndexService.queryOffset``) reaches them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from storelib.audit.index_headers import index_entries
from storelib.formats.indexfile import IndexFileReader, lookup_reachable

# An entry is the pair (keyHash, commitlog offset): a live entry matches a rebuilt one only at the same
# commitlog offset, so the comparison splits by commitlog range and each range is compared alone, whatever
# file holds its entries. Within a range the pairs are coded as int64 (the offset's rank among the rebuilt
# offsets, then the keyHash's 32 bits) and compared as sorted arrays.

#: splitmix64's constants: a pair's sampling hash, the same in every task whatever the partitioning
_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_LOW32 = 0xFFFFFFFF
#: 2**32 / the golden ratio: a pair's part (PairPart)
_GOLDEN32 = 0x9E3779B1


def index_range_bounds(starts: Iterable[int]) -> np.ndarray:
    """Where the commitlog ranges of the entry comparison begin (range 0 has no start, the last no end): the
    rebuilt files' beginPhyOffsets and the segments' starts, the lowest left out."""
    return np.unique(np.asarray(list(starts), dtype=np.int64))[1:]


def range_of(phy_offset: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The range (``index_range_bounds``) each commitlog offset falls in."""
    return np.searchsorted(bounds, phy_offset, side="right")


@dataclasses.dataclass(frozen=True)
class EntryScope:
    """The entries the IndexFile comparison checks: commitlog offsets from ``from_offset``, split into the
    ranges ``bounds`` starts (storelib.audit.index_range_bounds)."""

    from_offset: int
    bounds: np.ndarray

    def keep(self, phy: np.ndarray) -> np.ndarray:
        return phy >= self.from_offset

    def in_range(self, phy: np.ndarray, k: int) -> np.ndarray:
        """The offsets in scope and in range ``k`` (two comparisons: no index array as long as ``phy``)."""
        inside = self.keep(phy)
        if k > 0:
            inside &= phy >= self.bounds[k - 1]
        if k < len(self.bounds):
            inside &= phy < self.bounds[k]
        return inside

    def range_bytes(self, k: int, max_offset: int) -> int:
        """The commitlog bytes of range ``k`` in scope, the last range ending at ``max_offset`` (at least 1)."""
        begin = max(self.from_offset, int(self.bounds[k - 1]) if k > 0 else 0)
        end = int(self.bounds[k]) if k < len(self.bounds) else max_offset
        return max(1, end - begin)

    def ranges(self, phy: np.ndarray) -> list[int]:
        """The ranges the offsets in scope fall in."""
        return np.flatnonzero(np.bincount(range_of(phy[self.keep(phy)], self.bounds))).tolist()


def sample_threshold(index_sample: int, entries: int) -> int:
    """Pairs whose sampling hash is below this are sampled: at most ``index_sample`` of ``entries`` expected."""
    return 1 << 64 if entries <= index_sample else (index_sample << 64) // entries


@dataclasses.dataclass(frozen=True)
class PairPart:
    """Part ``number`` of ``parts`` of a commitlog range's entries, chosen by their (keyHash, commitlog offset) pair.

    Whether a live entry is a rebuilt one and whether a rebuilt pair is reachable in a live file are decided pair by
    pair (reachability is judged over the whole file, entry by entry), so a range's comparison is exactly the sum of
    its parts' (counts added, the lowest entry and pair kept): a big range is compared by several tasks at once.

    The part is a Fibonacci hash of the pair scaled to ``parts``: not of keyHash alone, as a key on every message
    (the bench store's: one keyHash of 1.5M pairs) would keep its pairs in one part; nor keyHash mod ``parts``, as
    String.hashCode keeps a key's last characters in its low bits.
    """

    number: int = 0
    parts: int = 1

    def within(self, key_hash: np.ndarray, phy: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """``mask`` of the entries (``key_hash`` int32, ``phy`` int64), narrowed to this part's pairs."""
        if self.parts == 1:
            return mask
        mixed = phy.astype(np.uint32)  # the offset's low 32 bits
        mixed += key_hash.view(np.uint32)
        mixed *= np.uint32(_GOLDEN32)  # wraps: the low 32 bits of the product
        mixed >>= 16
        mixed *= self.parts
        mixed >>= 16  # (the top 16 bits * parts) >> 16: in 0 .. parts - 1, near-equal shares
        return mask & (mixed == self.number)


#: a range compared whole, in one part
WHOLE_RANGE = PairPart()


@dataclasses.dataclass
class IndexPart:
    """One file's entries within a commitlog range: entry numbers, keyHash, commitlog offset, and for a live
    file whether the broker's lookup reaches each (storelib.formats.indexfile.lookup_reachable)."""

    name: str
    entry: np.ndarray
    key_hash: np.ndarray
    phy_offset: np.ndarray
    reachable: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        reader: IndexFileReader,
        keep: Callable[[np.ndarray], np.ndarray],
        reach: bool,
        part: PairPart = WHOLE_RANGE,
    ) -> IndexPart:
        """The entries within indexCount whose commitlog offsets ``keep`` selects, of ``part``."""
        key_hash, phy = index_entries(reader)
        mask = part.within(key_hash, phy, keep(phy))
        reachable = lookup_reachable(reader)[mask] if reach else None
        return cls(reader.file, np.flatnonzero(mask) + 1, key_hash[mask], phy[mask], reachable)


@dataclasses.dataclass(frozen=True)
class BadEntries:
    """A live IndexFile's entries in a range that are no rebuilt entry: how many, and the first one's entry number,
    keyHash and commitlog offset."""

    count: int
    entry: int
    key_hash: int
    phy_offset: int

    def __add__(self, other: BadEntries) -> BadEntries:
        """Two ranges' bad entries of one file: the counts added, the lowest entry first."""
        first = min(self, other, key=lambda b: (b.entry, b.key_hash, b.phy_offset))
        return dataclasses.replace(first, count=self.count + other.count)


@dataclasses.dataclass(frozen=True)
class MissingPairs:
    """Rebuilt (keyHash, commitlog offset) pairs the broker's lookup over the live files misses: how many, and the
    lowest (commitlog offset, keyHash) among them."""

    count: int
    phy_offset: int
    key_hash: int

    def __add__(self, other: MissingPairs) -> MissingPairs:
        """Two ranges' missed pairs: the counts added, the lowest (commitlog offset, keyHash) of both."""
        lowest = min(self, other, key=lambda m: (m.phy_offset, m.key_hash))
        return dataclasses.replace(lowest, count=self.count + other.count)


@dataclasses.dataclass(frozen=True)
class RangeComparison:
    """One commitlog range's IndexFile entries compared (what an index range task returns): live entries checked,
    the bad ones per live file, the distinct rebuilt pairs and how many the sample takes, and those missed (all,
    and among the sampled)."""

    entries_checked: int
    bad: Mapping[str, BadEntries]
    keys_total: int
    keys_sampled: int
    missing: MissingPairs | None
    missing_sampled: MissingPairs | None


def compare_index_range(live: list[IndexPart], rebuilt: list[IndexPart], threshold: int) -> RangeComparison:
    """One commitlog range: every live entry must be a rebuilt entry; every distinct rebuilt pair must be reachable
    in a live file (``threshold`` samples the pairs, storelib.audit.sample_threshold)."""
    phys = _distinct(np.concatenate([p.phy_offset for p in rebuilt] or [np.zeros(0, np.int64)]))
    wanted = _distinct(np.concatenate([_pair_codes(phys, p) for p in rebuilt] or [np.zeros(0, np.int64)]))
    bad, found = {}, [np.zeros(0, np.int64)]
    for part in live:
        codes = _pair_codes(phys, part)
        unknown = np.flatnonzero(~_members(codes, wanted))
        if len(unknown):
            i = int(unknown[0])
            bad[part.name] = BadEntries(
                len(unknown), int(part.entry[i]), int(part.key_hash[i]), int(part.phy_offset[i])
            )
        found.append(codes[part.reachable] if part.reachable is not None else codes[:0])
    missing = ~_members(wanted, _distinct(np.concatenate(found)))
    sampled = _sampled(phys, wanted, threshold)
    return RangeComparison(
        entries_checked=sum(len(p.entry) for p in live),
        bad=bad,
        keys_total=len(wanted),
        keys_sampled=int(sampled.sum()),
        missing=_first_pair(phys, wanted[missing]),
        missing_sampled=_first_pair(phys, wanted[missing & sampled]),
    )


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (a sort: numpy's hashing ``unique`` is slower on millions of int64)."""
    s = np.sort(values)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s


def _pair_codes(phys: np.ndarray, part: IndexPart) -> np.ndarray:
    """(keyHash, commitlog offset) as int64: the offset's rank in ``phys``, then keyHash; -1 for an offset not
    in ``phys`` (no rebuilt entry there)."""
    rank = np.searchsorted(phys, part.phy_offset)
    known = rank < len(phys)
    known[known] = phys[rank[known]] == part.phy_offset[known]
    codes = (rank.astype(np.int64) << 32) | (part.key_hash.astype(np.int64) & _LOW32)
    codes[~known] = -1
    return codes


def _members(codes: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Which ``codes`` are in ``sorted_set`` (sorted, distinct)."""
    if not len(sorted_set):
        return np.zeros(len(codes), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, codes), len(sorted_set) - 1)
    return sorted_set[at] == codes


def _unpack(phys: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(commitlog offset, keyHash) of pair codes."""
    return phys[codes >> 32], (codes & _LOW32).astype(np.uint32).view(np.int32)


def _sampled(phys: np.ndarray, codes: np.ndarray, threshold: int) -> np.ndarray:
    """The pairs sampled: splitmix64 of (offset, keyHash) below ``threshold``."""
    if threshold >= 1 << 64:
        return np.ones(len(codes), dtype=bool)
    phy, key_hash = _unpack(phys, codes)
    z = phy.astype(np.uint64) * np.uint64(_GOLDEN) + key_hash.astype(np.int64).astype(np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    return (z ^ (z >> np.uint64(31))) < np.uint64(threshold)


def _first_pair(phys: np.ndarray, codes: np.ndarray) -> MissingPairs | None:
    """How many ``codes``, and the lowest (offset, keyHash) among them; None when empty."""
    if not len(codes):
        return None
    phy, key_hash = _unpack(phys, codes)
    lowest = phy == phy.min()
    return MissingPairs(len(codes), int(phy.min()), int(key_hash[lowest].min()))
