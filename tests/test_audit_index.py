"""The audit's IndexFile entry comparison (storelib.audit.index_ranges.compare_index_range,
jobs.pipeline.audit_index) against plain sets of (keyHash, commitlog offset): every live entry a rebuilt one,
every rebuilt pair reachable."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storelib.audit.index_headers import differing_bytes
from storelib.audit.index_ranges import (
    EntryScope,
    IndexPart,
    PairPart,
    RangeComparison,
    compare_index_range,
    index_range_bounds,
    range_of,
    sample_threshold,
)
from storelib.broker.config import BrokerConfig
from storelib.formats.indexfile import IndexFileReader, lookup_reachable
from tests.reference import ReferenceIndexService

CFG = BrokerConfig(maxHashSlotNum=7, maxIndexNum=12)
SLOTS_AT = 40
ENTRIES_AT = SLOTS_AT + CFG.maxHashSlotNum * 4


def entries_of(data: bytes, cfg: BrokerConfig = CFG) -> list[tuple[int, int, int]]:
    """(entry number, keyHash, commitlog offset) within indexCount, read with struct (not storelib)."""
    count = min(struct.unpack_from(">i", data, 36)[0], cfg.maxIndexNum)
    at = SLOTS_AT + cfg.maxHashSlotNum * 4
    return [(i, *struct.unpack_from(">iq", data, at + i * 20)) for i in range(1, max(count, 1))]


def expected(live: list[bytes], rebuilt: list[bytes], from_offset: int = 0, cfg: BrokerConfig = CFG) -> dict:
    """The comparison as sets: live entries that are no rebuilt pair (per file: count, first), distinct rebuilt
    pairs the lookup over the live files misses (count, lowest (offset, keyHash))."""
    pairs = {(h, p) for data in rebuilt for _, h, p in entries_of(data, cfg) if p >= from_offset}
    bad = {}
    for k, data in enumerate(live):
        wrong = [(i, h, p) for i, h, p in entries_of(data, cfg) if p >= from_offset and (h, p) not in pairs]
        if wrong:
            bad[str(k)] = [len(wrong), *wrong[0]]
    found = set()
    for data in live:
        reach = lookup_reachable(IndexFileReader(data, cfg))
        found |= {(h, p) for (_, h, p), r in zip(entries_of(data, cfg), reach) if r}
    missing = sorted((p, h) for h, p in pairs - found)
    return {"bad": bad, "keys_total": len(pairs), "missing": [len(missing), *missing[0]] if missing else None}


def compared(live: list[bytes], rebuilt: list[bytes], starts: list[int], from_offset: int = 0) -> dict[str, object]:
    """compare_index_range over every range ``starts`` make, summed as the audit's driver sums them."""
    scope = EntryScope(from_offset, index_range_bounds(starts))
    out: dict[str, object] = {"bad": {}, "keys_total": 0, "missing": None}
    for k in range(len(scope.bounds) + 1):

        def keep(phy: np.ndarray, k: int = k) -> np.ndarray:
            return scope.in_range(phy, k)

        parts = [IndexPart.of(IndexFileReader(d, CFG, str(i)), keep, True) for i, d in enumerate(live)]
        built = [IndexPart.of(IndexFileReader(d, CFG), keep, False) for d in rebuilt]
        r = compare_index_range(parts, built, 1 << 64)
        for name, b in r.bad.items():
            n, *first = b.count, b.entry, b.key_hash, b.phy_offset
            was = out["bad"].get(name, [0, *first])
            out["bad"][name] = [was[0] + n, *min(was[1:], first)]
        out["keys_total"] += r.keys_total
        if r.missing:
            missing = [r.missing.count, r.missing.phy_offset, r.missing.key_hash]
            was = out["missing"] or [0, *missing[1:]]
            out["missing"] = [was[0] + missing[0], *min(was[1:], missing[1:])]
    return out


def index_files(messages: list[tuple[int, list[str]]]) -> list[bytes]:
    """The IndexFiles a broker writes for ``messages`` (commitlog offset, keys), by the tests' reference."""
    service = ReferenceIndexService(CFG)
    for offset, keys in messages:
        service.build_index(offset, 1_767_225_600_000 + offset, "T", 0, None, " ".join(keys))
    return service.files_bytes()


def put(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


MESSAGES = [(100 * i, [f"k{i % 9}", f"u{i}"] + ([f"u{i}"] if i % 5 == 0 else [])) for i in range(1, 30)]
REBUILT = index_files(MESSAGES)
STARTS = [struct.unpack_from(">q", d, 16)[0] for d in REBUILT] + [0, 1000, 2000]


def _redirected_entry() -> list[bytes]:  # an entry pointing at no record: a bad entry, and its pair missing
    return [put(REBUILT[0], ENTRIES_AT + 3 * 20 + 4, ">q", 12_345), *REBUILT[1:]]


def _zeroed_slot() -> list[bytes]:  # a hash slot zeroed: its chain's pairs are not found, no entry is bad
    slot = next(s for s in range(CFG.maxHashSlotNum) if struct.unpack_from(">i", REBUILT[1], SLOTS_AT + s * 4)[0])
    return [REBUILT[0], put(REBUILT[1], SLOTS_AT + slot * 4, ">i", 0), *REBUILT[2:]]


def _lost_file() -> list[bytes]:  # the newest file lost: its pairs are not found
    return REBUILT[:-1]


def _files_swapped() -> list[bytes]:  # every entry is still somewhere: nothing bad, nothing missing
    return [REBUILT[1], REBUILT[0], *REBUILT[2:]]


def _foreign_key_hash() -> list[bytes]:  # an entry's keyHash changed: bad, and the pair it held not found
    return [REBUILT[0], put(REBUILT[1], ENTRIES_AT + 2 * 20, ">i", 999_999), *REBUILT[2:]]


@pytest.mark.parametrize(
    "damage", [_redirected_entry, _zeroed_slot, _lost_file, _files_swapped, _foreign_key_hash], ids=lambda f: f.__name__
)
def test_each_kind_of_divergence_is_what_the_sets_say(damage) -> None:
    live = damage()
    want = expected(live, REBUILT)
    assert compared(live, REBUILT, STARTS) == want
    if damage in (_redirected_entry, _foreign_key_hash):
        assert want["bad"] and want["missing"]
    elif damage in (_zeroed_slot, _lost_file):
        assert not want["bad"] and want["missing"]
    else:
        assert not want["bad"] and not want["missing"]


def test_a_healthy_index_has_nothing_bad_and_counts_distinct_pairs() -> None:
    got = compared(REBUILT, REBUILT, STARTS)
    assert got == {"bad": {}, "keys_total": sum(len(set(keys)) for _, keys in MESSAGES), "missing": None}
    assert got["keys_total"] < sum(len(entries_of(d)) for d in REBUILT)  # u0, u5, ... put twice: one pair


def damaged_files(messages: list, damage: list) -> tuple[list[bytes], list[bytes]]:
    """The rebuilt IndexFiles of ``messages`` (gap, keys) and the live ones: the same with ``damage`` (file, entry,
    field, value) written over a keyHash, an offset, a prevIndex or a slot."""
    offsets = np.cumsum([gap for gap, _ in messages]).tolist()
    rebuilt = index_files([(o * 10, keys) for o, (_, keys) in zip(offsets, messages)])
    live = list(rebuilt)
    for file, entry, field, value in damage:
        if live:
            k = file % len(live)
            at = [ENTRIES_AT + entry * 20, ENTRIES_AT + entry * 20 + 4, ENTRIES_AT + entry * 20 + 16, SLOTS_AT][
                field % 4
            ]
            at = SLOTS_AT + entry % CFG.maxHashSlotNum * 4 if field == 4 else at
            live[k] = put(live[k], at, ">q" if field == 1 else ">i", value)
    return rebuilt, live


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 40), st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=3)), max_size=40),
    st.lists(st.tuples(st.integers(0, 10), st.integers(0, 11), st.integers(0, 4), st.integers(-5, 5_000)), max_size=4),
    st.lists(st.integers(0, 5_000), max_size=4),
    st.integers(0, 2_000),
)
def test_ranges_give_the_sets_answer_whatever_the_damage(messages, damage, starts, from_offset) -> None:
    """Random messages, random bytes of random live files overwritten (keyHash, offset, prevIndex or a slot),
    random range bounds and scope: the per-range comparison, summed, is the whole-set answer."""
    rebuilt, live = damaged_files(messages, damage)
    bounds = [struct.unpack_from(">q", d, 16)[0] for d in rebuilt] + starts
    assert compared(live, rebuilt, bounds, from_offset) == expected(live, rebuilt, from_offset)


def split_and_summed(live: list[bytes], rebuilt: list[bytes], keep, threshold: int, parts: int) -> RangeComparison:
    """One range compared in ``parts`` parts of its pairs, the results summed as the audit's driver sums them
    (jobs.pipeline.audit_index: counts added, per live file the lowest bad entry, the lowest missed pair)."""
    results = []
    for g in range(parts):
        part = PairPart(g, parts)
        live_parts = [IndexPart.of(IndexFileReader(d, CFG, str(i)), keep, True, part) for i, d in enumerate(live)]
        built = [IndexPart.of(IndexFileReader(d, CFG), keep, False, part) for d in rebuilt]
        results.append(compare_index_range(live_parts, built, threshold))
    bad: dict = {}
    for r in results:
        for name, b in r.bad.items():
            bad[name] = bad[name] + b if name in bad else b

    def total(missing: list) -> object:
        return sum(missing[1:], missing[0]) if missing else None

    return RangeComparison(
        sum(r.entries_checked for r in results),
        bad,
        sum(r.keys_total for r in results),
        sum(r.keys_sampled for r in results),
        total([r.missing for r in results if r.missing]),
        total([r.missing_sampled for r in results if r.missing_sampled]),
    )


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 40), st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=3)), max_size=40),
    st.lists(st.tuples(st.integers(0, 10), st.integers(0, 11), st.integers(0, 4), st.integers(-5, 5_000)), max_size=4),
    st.integers(2, 5),
    st.integers(1, 60),
    st.integers(0, 2_000),
)
def test_a_range_in_parts_of_its_pairs_sums_to_the_whole_range(messages, damage, parts, sample, from_offset) -> None:
    """Random messages, random damage (as above), a random sample and scope: a range compared in 2-5 parts, summed,
    is the range compared whole: entries checked, pairs and sampled pairs, bad entries per file (count and first
    entry) and missed pairs (count and lowest, all and sampled)."""
    rebuilt, live = damaged_files(messages, damage)
    scope = EntryScope(from_offset, index_range_bounds([0]))

    def keep(phy: np.ndarray) -> np.ndarray:
        return scope.in_range(phy, 0)

    threshold = sample_threshold(sample, sum(len(entries_of(d)) for d in rebuilt))
    assert split_and_summed(live, rebuilt, keep, threshold, parts) == split_and_summed(
        live, rebuilt, keep, threshold, 1
    )


def test_the_parts_hold_every_pair_once_and_near_equal_shares_of_one_key_s_pairs() -> None:
    """Every pair in exactly one part; a key on every message (one keyHash) still spread over the parts."""
    key_hash = np.full(30_000, 123_456, np.int32)
    key_hash[::3] = np.arange(10_000, dtype=np.int32)
    phy = np.arange(30_000, dtype=np.int64) // 3 * 723
    everywhere = np.ones(len(phy), dtype=bool)
    held = [PairPart(g, 4).within(key_hash, phy, everywhere) for g in range(4)]
    assert (sum(h.astype(int) for h in held) == 1).all()
    assert all(abs(int(h.sum()) - len(phy) / 4) < len(phy) / 40 for h in held)
    one_key = key_hash == 123_456
    assert all(abs(int((h & one_key).sum()) - one_key.sum() / 4) < one_key.sum() / 40 for h in held)


def test_the_sample_is_a_fraction_of_the_pairs_whatever_the_ranges() -> None:
    """Above ``index_sample`` each pair is in or out by its own hash: the same pairs in one range or in many."""
    scope_one, scope_many = EntryScope(0, index_range_bounds([0])), EntryScope(0, index_range_bounds(STARTS))
    threshold = sample_threshold(10, sum(len(entries_of(d)) for d in REBUILT))
    assert 0 < threshold < 1 << 64 and sample_threshold(10, 10) == 1 << 64

    def sampled(scope: EntryScope) -> int:
        total = 0
        for k in range(len(scope.bounds) + 1):

            def keep(phy: np.ndarray, k: int = k) -> np.ndarray:
                return range_of(phy, scope.bounds) == k

            built = [IndexPart.of(IndexFileReader(d, CFG), keep, False) for d in REBUILT]
            total += compare_index_range([], built, threshold).keys_sampled
        return total

    assert 0 < sampled(scope_one) == sampled(scope_many) < 30


# --- in Spark ----------------------------------------------------------------------------------


def test_the_index_stage_is_one_job_per_step_and_its_findings_are_the_sets(spark, tmp_path: Path) -> None:
    """A generated store whose live IndexFiles are damaged four ways: the findings are what plain sets of pairs
    give, and the stage runs two Spark jobs (file positions, then commitlog ranges, packed into tasks), no joins."""
    from jobs.pipeline.audit_flow import audit
    from jobs.pipeline.context import Run
    from jobs.pipeline.rebuild_flow import rebuild
    from storelib.synthetic.generator import generate_store
    from storelib.synthetic.spec import GeneratorSpec

    cfg = BrokerConfig(mappedFileSizeCommitLog=1 << 16, maxHashSlotNum=97, maxIndexNum=400)
    store = tmp_path / "store"
    generate_store(store, GeneratorSpec(messages=1500, topics=2, queues_per_topic=2), cfg)
    rebuilt = tmp_path / "rebuilt"
    rebuild(Run(spark, cfg), str(store), str(rebuilt))
    files = sorted((store / "index").iterdir())
    assert len(files) >= 4
    data = [f.read_bytes() for f in files]
    entries_at = 40 + cfg.maxHashSlotNum * 4
    files[0].write_bytes(put(data[0], entries_at + 7 * 20 + 4, ">q", 3))  # entry 7 points at no record
    files[1].write_bytes(put(data[1], 40 + 5 * 4, ">i", 0))  # hash slot 5 emptied
    files[2].write_bytes(data[3])  # two files swapped
    files[3].write_bytes(data[2])
    files[-1].unlink()  # the newest lost
    live = [f.read_bytes() for f in files[:-1]]
    built = [f.read_bytes() for f in sorted((rebuilt / "index").iterdir())]

    spark.sparkContext.setJobGroup("index-stage", "index-stage")
    result = audit(Run(spark, cfg), str(store), str(rebuilt), None)

    bad = {f.file: f for f in result.findings if f.kind == "index-bad-entries"}
    (missing,) = [f for f in result.findings if f.kind == "index-keys-not-found"]
    sets = expected(live, built, cfg=cfg)
    assert {file: (f.count, f.commitlog_offset, f.file_offset) for file, f in bad.items()} == {
        f"index/{files[int(k)].name}": (n, phy, entries_at + entry * 20)
        for k, (n, entry, _, phy) in sets["bad"].items()
    }
    assert (missing.count, missing.commitlog_offset, missing.expected) == (
        sets["missing"][0],
        sets["missing"][1],
        f"keyHash {sets['missing'][2]} finds commitlog offset {sets['missing'][1]}",
    )
    assert result.report.summary.index.keys_total == sets["keys_total"]
    # the packed tasks' jobs (jobs.pipeline.tasks): the queues', then the IndexFile stage's two, one stage each
    assert [len(stages) for stages in _packed_jobs(spark, "index-stage")] == [1, 1, 1]


def _packed_jobs(spark, group: str) -> list[list[str]]:
    """The stage names of each job of ``group`` started by jobs.pipeline.tasks (stages are named by call site)."""
    tracker = spark.sparkContext.statusTracker()
    out = []
    for job in sorted(tracker.getJobIdsForGroup(group)):
        info = tracker.getJobInfo(job)
        names = [tracker.getStageInfo(s).name for s in info.stageIds] if info else []
        if any("tasks.py" in n for n in names):
            out.append(names)
    return out


@given(st.binary(max_size=64), st.lists(st.tuples(st.integers(0, 63), st.integers(1, 255)), max_size=6))
def testdiffering_bytes_a_chunk_at_a_time_are_the_whole_comparison(data: bytes, changes) -> None:
    other = bytearray(data)
    for at, xor in changes:
        if at < len(other):
            other[at] ^= xor
    diff = np.flatnonzero(np.frombuffer(data, np.uint8) != np.frombuffer(bytes(other), np.uint8))
    whole = (int(diff[0]) if len(diff) else len(data), len(diff))
    assert differing_bytes(data, bytes(other), len(data), chunk=5) == whole


@given(st.lists(st.integers(-5, 50), max_size=6), st.lists(st.integers(-10, 60), max_size=30), st.integers(-5, 20))
def test_a_range_holds_the_offsets_its_number_says(starts, offsets, from_offset) -> None:
    """What a range task keeps (``in_range``) is what the position task counted for it (``ranges``)."""
    scope = EntryScope(from_offset, index_range_bounds(starts or [0]))
    phy = np.array(offsets, dtype=np.int64)
    kept = [scope.in_range(phy, k) for k in range(len(scope.bounds) + 1)]
    assert sum(m.astype(int) for m in kept).tolist() == (phy >= from_offset).astype(int).tolist()  # each once
    assert [k for k, m in enumerate(kept) if m.any()] == scope.ranges(phy)
    assert all((m == ((range_of(phy, scope.bounds) == k) & (phy >= from_offset))).all() for k, m in enumerate(kept))


def test_a_position_task_hands_its_header_ranges_and_findings_and_the_report_the_header_only(tmp_path) -> None:
    """audit_index_file on the same file live and rebuilt, then with the live one unreadable (a directory)."""
    from udfs.audit_tasks import audit_index_file

    for root in ("live", "rebuilt"):
        (tmp_path / root / "index").mkdir(parents=True)
        (tmp_path / root / "index" / "f0").write_bytes(REBUILT[0])
    scope = EntryScope(0, index_range_bounds(STARTS))
    at = audit_index_file((0, "f0", "f0"), str(tmp_path / "live"), str(tmp_path / "rebuilt"), CFG, scope)
    phy = np.array([o for _, _, o in entries_of(REBUILT[0])])
    assert (at.findings, list(at.ranges)) == ((), sorted(set(range_of(phy, scope.bounds).tolist())))
    assert at.rebuilt_entries == len(phy) and at.header == IndexFileReader(REBUILT[0], CFG).header
    assert at.to_json() == {"position": 0, "live": "f0", "rebuilt": "f0", "header": at.header.__dict__}

    (tmp_path / "live" / "index" / "f1").mkdir()
    gone = audit_index_file((1, "f1", None), str(tmp_path / "live"), str(tmp_path / "rebuilt"), CFG, scope)
    assert [f.kind for f in gone.findings] == ["unreadable-file"] and gone.header is None
    assert gone.to_json() == {"position": 1, "live": "f1", "rebuilt": None, "header": None, "unreadable": True}


def test_a_range_s_bytes_are_its_commitlog_span_in_scope() -> None:
    """Range 0 starts at the scope, the last ends at the commitlog's max offset (the packed tasks' weights)."""
    scope = EntryScope(50, index_range_bounds([0, 100, 200]))
    assert [scope.range_bytes(k, 1000) for k in range(3)] == [50, 100, 800]
    assert EntryScope(300, index_range_bounds([0, 100, 200])).range_bytes(1, 1000) == 1  # all below the scope
