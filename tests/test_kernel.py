"""The compiled kernel against plain-Python references that share no code with it, and its cache from a zip."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from storelib.formats import index_walks, kernel
from storelib.formats.javahash import java_hash_utf8_runs
from storelib.formats.scanner import find_properties

ROOT = Path(__file__).resolve().parents[1]
INT_MAX = 2**31 - 1

# --- references, statement by statement ------------------------------------------------------


def reference_properties(raw: bytes) -> dict[bytes, tuple[int, int]]:
    """``string2messageProperties`` over bytes: value (offset, length) per name; later duplicates win."""
    out: dict[bytes, tuple[int, int]] = {}
    at = 0
    for piece in raw.split(b"\x02"):
        name, sep, value = piece.partition(b"\x01")
        if sep and name and value:
            out[name] = (at + len(name) + 1, len(value))
        at += len(piece) + 1
    return out


def reference_java_hash(raw: bytes) -> tuple[int, int]:
    """hashCode and UTF-16 length of ``new String(raw, UTF_8)`` (Python's decoder with "replace" is Java's)."""
    text = raw.decode("utf-8", "replace")
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) % 2**32
    return (h - 2**32 if h > INT_MAX else h), len(units) // 2


def reference_key_runs(
    raw: bytes, uniq: list[tuple[int, int]], keys: list[tuple[int, int]], to_index: list[bool]
) -> list[tuple[int, bytes]]:
    """Per indexed record: UNIQ_KEY, then every non-empty space-separated KEYS token."""
    out = []
    for i, ((us, ul), (ks, kl), indexed) in enumerate(zip(uniq, keys, to_index)):
        if not indexed:
            continue
        if us >= 0:
            out.append((i, raw[us : us + ul]))
        if ks >= 0:
            out.extend((i, token) for token in raw[ks : ks + kl].split(b" ") if token)
    return out


def reference_slot_chains(key_hash: list[int], slots: int) -> tuple[dict[int, int], list[int], int]:
    """``IndexFile.putKey``'s slot bookkeeping, entry by entry (entries numbered from 1)."""
    table: dict[int, int] = {}
    prev = []
    for i, h in enumerate(key_hash):
        prev.append(table.get(h % slots, 0))
        table[h % slots] = i + 1
    return table, prev, len(table)


# --- strategies ------------------------------------------------------------------------------

# bytes that exercise UTF-8 decoding: every lead byte class, continuations, truncated sequences
utf8_pieces = st.sampled_from(
    [b"a", b"#", b"\x80", b"\xbf", b"\xc0", b"\xc2", b"\xdf", b"\xe0", b"\xe0\xa0", b"\xed", b"\xed\xa0\x80",
     b"\xef\xbf", b"\xf0", b"\xf0\x90", b"\xf0\x90\x80", b"\xf4\x8f\xbf\xbf", b"\xf4\x90", b"\xf5", b"\xff",
     "ü".encode(), "订".encode(), "\U0001f4e6".encode()]
)  # fmt: skip
utf8_bytes = st.binary(max_size=40) | st.lists(utf8_pieces, max_size=16).map(b"".join)
property_bytes = st.lists(
    st.sampled_from([b"\x01", b"\x02", b"TAGS", b"KEYS", b"K", b"v", b"a b", b"\xff", "ü".encode()]), max_size=20
).map(b"".join)


def packed(runs: list[bytes], gap: bytes = b"\x02\x01 ") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs laid out in one buffer with separator junk between them: (buffer, starts, lengths)."""
    buf, starts = bytearray(), []
    for run in runs:
        buf += gap
        starts.append(len(buf))
        buf += run
    return np.frombuffer(bytes(buf + gap), np.uint8), np.array(starts, np.int64), np.array(list(map(len, runs)))


# --- the kernel against them -----------------------------------------------------------------


@settings(deadline=None, max_examples=300)
@given(st.lists(utf8_bytes, max_size=10))
def test_hash_utf8_runs_matches_decoding_with_replacement(runs: list[bytes]) -> None:
    a, starts, lengths = packed(runs)
    hashes, units = java_hash_utf8_runs(a, starts, lengths)
    assert list(zip(hashes.tolist(), units.tolist())) == [reference_java_hash(r) for r in runs]


@settings(deadline=None, max_examples=300)
@given(st.lists(property_bytes, max_size=8))
def test_find_properties_matches_reference(records: list[bytes]) -> None:
    a, starts, lengths = packed(records)
    names = ("TAGS", "KEYS", "K", "v", "ü")
    got = find_properties(a, starts, lengths, names)
    for i, raw in enumerate(records):
        ref = reference_properties(raw)
        for name in names:
            start, length = got[name][0][i], got[name][1][i]
            expected = ref.get(name.encode())
            assert (start, length) == ((-1, 0) if expected is None else (starts[i] + expected[0], expected[1]))


@settings(deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans(), property_bytes, st.booleans()), max_size=10))
def test_key_runs_match_reference(records: list[tuple[bool, bool, bytes, bool]]) -> None:
    a, starts, lengths = packed([text for _, _, text, _ in records])
    raw = a.tobytes()
    uniq = [(s, min(n, 3)) if has else (-1, 0) for (has, _, _, _), s, n in zip(records, starts, lengths)]
    keys = [(s, n) if has else (-1, 0) for (_, has, _, _), s, n in zip(records, starts, lengths)]
    to_index = [indexed for *_, indexed in records]
    columns = [np.array(c, np.int64) for c in (*zip(*uniq), *zip(*keys))] if records else [np.zeros(0, np.int64)] * 4
    record, start, length = kernel.key_runs(a, *columns, np.array(to_index, np.bool_))
    got = [(r, raw[s : s + n]) for r, s, n in zip(record.tolist(), start.tolist(), length.tolist())]
    assert got == reference_key_runs(raw, uniq, keys, to_index)


@settings(deadline=None)
@given(st.binary(max_size=100), st.integers(0, 20))
def test_crc32_is_zlibs(data: bytes, skip: int) -> None:
    a = np.frombuffer(bytes(skip) + data, np.uint8)
    assert kernel.crc32(a, skip, len(data)) == zlib.crc32(data)


@settings(deadline=None)
@given(st.lists(st.sampled_from([b"Topic", b"TopicA", b"T", b"", "订".encode(), b"Topic\x00"]), max_size=200))
def test_intern_runs_codes_in_order_of_first_appearance(runs: list[bytes]) -> None:
    a, starts, lengths = packed(runs)
    code, first = kernel.intern_runs(a, starts, lengths)
    order = list(dict.fromkeys(runs))
    assert code.tolist() == [order.index(r) for r in runs]
    assert [runs[i] for i in first.tolist()] == order


def test_intern_runs_many_distinct_values_grow_the_table() -> None:
    runs = [f"topic-{i % 700}".encode() for i in range(3000)]
    a, starts, lengths = packed(runs)
    code, first = kernel.intern_runs(a, starts, lengths)
    assert code.tolist() == [i % 700 for i in range(3000)]
    assert first.tolist() == list(range(700))


@settings(deadline=None)
@given(st.lists(st.integers(0, INT_MAX), max_size=300), st.sampled_from([1, 7, 701]))
def test_slot_chains_match_put_key(key_hash: list[int], slots: int) -> None:
    table, prev, used = kernel.slot_chains(np.array(key_hash, np.int32), slots)
    ref_table, ref_prev, ref_used = reference_slot_chains(key_hash, slots)
    assert prev.tolist() == ref_prev
    assert used == ref_used
    assert {s: v for s, v in enumerate(table.tolist()) if v} == ref_table


def reference_lookup_returns(slots: list[int], prev: list[int], bad_time: list[bool], key_hash: list[int]) -> set[int]:
    """``IndexFile.selectPhyOffset`` of each slot, statement by statement, a revisited entry ending the walk: the
    entries of the slot's own keyHashes it passes."""
    n, out = len(prev), set()
    for s, at in enumerate(slots):
        passed: set[int] = set()
        while 0 < at < n and at not in passed and not bad_time[at]:
            passed.add(at)
            if key_hash[at] >= 0 and key_hash[at] % len(slots) == s:
                out.add(at)
            at = prev[at] if prev[at] != at else 0
    return out


def damaged_index(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    """Slots and entries of a small IndexFile whose prevIndex values point anywhere (merged chains, cycles)."""
    n = draw(st.integers(1, 40))
    entry = st.integers(-2, n + 1)
    slots = draw(st.lists(entry, min_size=1, max_size=6))
    prev = draw(st.lists(entry, min_size=n, max_size=n))
    bad_time = draw(st.lists(st.sampled_from([False, False, False, True]), min_size=n, max_size=n))  # 1 in 4
    key_hash = draw(st.lists(st.integers(-3, 30), min_size=n, max_size=n))
    return tuple(np.array(v, t) for v, t in zip((slots, prev, bad_time, key_hash), (np.int64,) * 2 + (bool, np.int64)))


@settings(deadline=None, max_examples=400)
@given(st.composite(damaged_index)())
def test_lookup_walks_return_each_entry_only_from_its_own_slot(index: tuple[np.ndarray, ...]) -> None:
    """walk_reaches always, slot_walks when no two walks meet, are the statement-by-statement lookups."""
    slots, prev, bad_time, key_hash = index
    want = reference_lookup_returns(*(a.tolist() for a in index))
    assert set(np.flatnonzero(index_walks.walk_reaches(slots, prev, bad_time, key_hash, len(prev))).tolist()) == want
    reach, met = index_walks.slot_walks(slots, prev, bad_time, key_hash, len(prev))
    assert met or set(np.flatnonzero(reach).tolist()) == want


def test_an_entry_on_another_slots_chain_is_not_returned() -> None:
    """Entry 1 holds a keyHash of slot 1 but lies on slot 0's chain (2 -> 1): slot 1's lookup (3) misses it."""
    slots, prev = np.array([2, 3]), np.array([0, 0, 1, 0])
    bad_time, key_hash = np.zeros(4, bool), np.array([0, 1, 0, 1])
    reach, met = index_walks.slot_walks(slots, prev, bad_time, key_hash, 4)
    assert not met and reach.tolist() == [False, False, True, True]


def test_merged_walks_are_answered_over_the_whole_walk() -> None:
    """Slot 1's walk (3) goes on into slot 0's chain (2 -> 1) and returns entry 1, a keyHash of slot 1, which slot
    0's walk passed first: slot_walks says the walks met; walk_reaches finds entry 1."""
    slots, prev = np.array([2, 3]), np.array([0, 0, 1, 1])
    bad_time, key_hash = np.zeros(4, bool), np.array([0, 1, 0, 1])
    assert index_walks.slot_walks(slots, prev, bad_time, key_hash, 4)[1]
    assert index_walks.walk_reaches(slots, prev, bad_time, key_hash, 4).tolist() == [False, True, True, True]


# --- caching where executors can write -------------------------------------------------------

CHILD = """
import numpy as np
import storelib.formats.index_walks as w
import storelib.formats.kernel as k
import storelib.formats.numba_cache as c
table, prev, used = k.slot_chains(np.array([5, 13, 5], np.int32), 7)
reach = w.walk_reaches(table.astype(np.int64), np.zeros(3, np.int64), np.zeros(3, np.bool_), np.zeros(3, np.int64), 3)
print(prev.tolist(), used, sum(k.slot_chains.stats.cache_hits.values()), c.CACHE, len(reach))
"""


def test_kernel_imported_from_a_zip_caches_in_a_writable_directory(tmp_path: Path) -> None:
    """``spark-submit --py-files``: storelib in a zip; numba's cache goes under $HOME, loaded by the next process."""
    archive = tmp_path / "deps.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for path in (ROOT / "storelib").rglob("*.py"):
            z.write(path, path.relative_to(ROOT).as_posix())
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(HOME=str(home), PYTHONPATH=str(archive))
    cmd = [sys.executable, "-c", CHILD]
    runs = [subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    cache = home / ".cache" / "rmq-store-rebuild" / "numba"
    assert [r.stdout.split() for r in runs] == [
        ["[0,", "0,", "1]", "2", "0", str(cache), "3"],
        ["[0,", "0,", "1]", "2", "1", str(cache), "3"],
    ]
    assert any(cache.rglob("*.nbi"))
