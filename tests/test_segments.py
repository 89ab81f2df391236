"""storelib.broker.segments.plan_parse_tasks: parse tasks sized by bytes, consecutive segments in offset order, a bigger
segment cut into byte ranges."""

from __future__ import annotations

import itertools
import zlib

from hypothesis import given
from hypothesis import strategies as st

from storelib.broker.segments import Piece, Segment, crc32_combine, plan_parse_tasks

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
