"""storelib.segments.plan_parse_tasks: parse tasks sized by bytes, consecutive segments in offset order."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from storelib.segments import Segment, plan_parse_tasks

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def segments_of(sizes: list[int]) -> list[Segment]:
    out, start = [], 0
    for size in sizes:
        out.append(Segment(f"file:///store/commitlog/{start:020d}", f"{start:020d}", start, size))
        start += size
    return out


def starts(tasks: list[list[Segment]]) -> list[list[int]]:
    return [[s.start for s in t] for t in tasks]


def test_the_4_9_8_sample_shape_is_one_task_and_1_gib_segments_one_task_each() -> None:
    small = segments_of([64 * KIB] * 211)
    assert starts(plan_parse_tasks(small, 256 * MIB)) == [[s.start for s in small]]
    big = segments_of([GIB] * 3)
    assert starts(plan_parse_tasks(big, 256 * MIB)) == [[0], [GIB], [2 * GIB]]


def test_a_big_segment_is_a_task_alone_between_small_ones() -> None:
    # 100 MiB + 100 MiB fit in 256 MiB; the 1 GiB one does not fit with anything; the last two go together
    segs = segments_of([100 * MIB, 100 * MIB, GIB, 10 * MIB, 10 * MIB])
    assert starts(plan_parse_tasks(segs, 256 * MIB)) == [
        [0, 100 * MIB],
        [200 * MIB],
        [200 * MIB + GIB, 210 * MIB + GIB],
    ]


@given(st.lists(st.integers(1, 600), max_size=60), st.integers(1, 1000))
def test_tasks_keep_offset_order_stay_within_the_target_and_are_as_few_as_greedy_allows(
    sizes: list[int], target: int
) -> None:
    segs = segments_of(sizes)
    tasks = plan_parse_tasks(segs, target)
    assert [s for t in tasks for s in t] == segs  # every segment once, in offset order
    assert all(len(t) == 1 or sum(s.size for s in t) <= target for t in tasks)
    # the next task's first segment did not fit in the one before: no two neighbours could be one task
    assert all(sum(s.size for s in a) + b[0].size > target for a, b in itertools.pairwise(tasks))
