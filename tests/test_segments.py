"""storelib.broker.segments.plan_parse_tasks: parse tasks sized by bytes, consecutive segments in offset order, a bigger
segment cut into byte ranges."""

from __future__ import annotations

import dataclasses
import itertools
import zlib

from hypothesis import given
from hypothesis import strategies as st

from storelib.broker.segments import (
    Damage,
    Piece,
    Segment,
    SegmentSummary,
    crc32_combine,
    plan_parse_tasks,
    settle_damaged_ends,
)
from storelib.formats.scanner import DAMAGE_LENGTH

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def segments_of(sizes: list[int]) -> list[Segment]:
    out, start = [], 0
    for size in sizes:
        out.append(Segment(f"file:///store/commitlog/{start:020d}", f"{start:020d}", start, size))
        start += size
    return out


def starts(tasks: list[list[Piece]]) -> list[list[int]]:
    return [[p.segment.start + p.lo for p in t] for t in tasks]


def test_the_4_9_8_sample_shape_is_one_task_and_1_gib_segments_four_ranges_each() -> None:
    small = segments_of([64 * KIB] * 211)
    assert starts(plan_parse_tasks(small, 256 * MIB)) == [[s.start for s in small]]
    big = segments_of([GIB] * 3)
    assert starts(plan_parse_tasks(big, 256 * MIB)) == [[k * 256 * MIB] for k in range(12)]
    assert starts(plan_parse_tasks(big, 256 * MIB, whole=[s.name for s in big])) == [[0], [GIB], [2 * GIB]]


def test_a_big_segment_is_cut_into_ranges_alone_between_small_ones() -> None:
    # 100 MiB + 100 MiB fit in 256 MiB; the 1 GiB one is four ranges that nothing joins; the last two go together
    segs = segments_of([100 * MIB, 100 * MIB, GIB, 10 * MIB, 10 * MIB])
    assert starts(plan_parse_tasks(segs, 256 * MIB)) == [
        [0, 100 * MIB],
        *([200 * MIB + k * 256 * MIB] for k in range(4)),
        [200 * MIB + GIB, 210 * MIB + GIB],
    ]


@given(st.lists(st.integers(1, 600), max_size=60), st.integers(1, 1000))
def test_ranges_cover_each_big_segment_once_in_order_within_the_target(sizes: list[int], target: int) -> None:
    segs = segments_of(sizes)
    pieces = [p for t in plan_parse_tasks(segs, target) for p in t]
    for seg in segs:
        mine = [p for p in pieces if p.segment == seg]
        assert [(p.number, p.count) for p in mine] == [(k, len(mine)) for k in range(len(mine))]
        assert [p.lo for p in mine[1:]] == [p.hi for p in mine[:-1]] and (mine[0].lo, mine[-1].hi) == (0, seg.size)
        assert len(mine) == 1 or all(p.hi - p.lo <= target for p in mine)
    assert [p.segment for p in pieces] == sorted((p.segment for p in pieces), key=lambda s: s.start)


@given(st.lists(st.integers(1, 600), max_size=60), st.integers(1, 1000))
def test_tasks_keep_offset_order_stay_within_the_target_and_are_as_few_as_greedy_allows(
    sizes: list[int], target: int
) -> None:
    segs = segments_of(sizes)
    tasks = [[p.segment for p in t] for t in plan_parse_tasks(segs, target, whole=[s.name for s in segs])]
    assert [s for t in tasks for s in t] == segs  # every segment once, in offset order
    assert all(len(t) == 1 or sum(s.size for s in t) <= target for t in tasks)
    # the next task's first segment did not fit in the one before: no two neighbours could be one task
    assert all(sum(s.size for s in a) + b[0].size > target for a, b in itertools.pairwise(tasks))


@given(st.binary(max_size=600), st.binary(max_size=600))
def test_crc32_combine_is_zlib_s_crc_of_the_concatenation(a: bytes, b: bytes) -> None:
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_crc32_combine_over_a_range_s_length() -> None:
    """A 256 MB second part (a parse range): a length of one bit, shifted by x^(2^31) alone."""
    a, zeros = b"rocketmq", bytes(256 << 20)
    assert crc32_combine(zlib.crc32(a), zlib.crc32(zeros), len(zeros)) == zlib.crc32(a + zeros)


def _summary(seg: Segment, end_reason: str, end_offset: int, messages: int, damage: tuple = ()) -> SegmentSummary:
    last = end_offset - 100 if messages else -1
    return SegmentSummary(seg.name, end_reason, end_offset, "", messages, 0, 0, 0, 0, last, 0, "", damage)


def test_records_that_stop_before_a_segment_s_end_in_the_middle_of_the_log_are_damage_to_its_end() -> None:
    """Segment 0 stops at zeros, segment 1 at a bad magic after a record its TOTALSIZE walked over (a length
    mismatch: the damage starts there), segment 2 ends with its BLANK, segment 3 (the log's last) at zeros: the
    first two become damaged records to their segment's end, the last is the log's end and stays."""
    segs = segments_of([64 * KIB] * 4)
    walked = Damage(DAMAGE_LENGTH, 65_536 + 60_000, "fields do not add up")
    summaries = {
        segs[0].name: _summary(segs[0], "zero-tail", 50_000, 10),
        segs[1].name: _summary(segs[1], "bad-magic", 65_536 + 60_138, 10, (walked,)),
        segs[2].name: _summary(segs[2], "blank", 131_072 + 65_500, 10),
        segs[3].name: _summary(segs[3], "zero-tail", 196_608 + 1000, 10),
    }
    summaries[segs[1].name] = dataclasses.replace(summaries[segs[1].name], last_message_offset=65_536 + 59_000)
    out = settle_damaged_ends(segs, summaries)
    assert [(s.end_reason, [(d.kind, d.commitlog_offset, d.end_offset) for d in s.damage]) for s in out.values()] == [
        ("blank", [("damaged-records", 50_000, 65_536)]),
        ("blank", [("damaged-records", 65_536 + 60_000, 131_072)]),
        ("blank", []),
        ("zero-tail", []),
    ]
