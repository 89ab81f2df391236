"""jobs.pipeline.tasks: small units packed into Spark tasks by bytes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobs.pipeline.context import Run
from jobs.pipeline.tasks import PARSE_TASK_BYTES, TASK_BYTES, packed, parse_task_bytes, run_packed, shares, task_count
from storelib.broker.config import BrokerConfig


def test_the_cores_bound_a_small_store_and_the_bytes_a_big_one() -> None:
    assert task_count(25, 3 << 20, cores=2) == 2  # 25 small queues: one task a core, not one a queue
    assert task_count(1, 3 << 20, cores=2) == 1  # never more tasks than units
    assert task_count(0, 0, cores=2) == 1
    assert task_count(1000, 10 * TASK_BYTES + 1, cores=2) == 11  # past the cores: a task per TASK_BYTES
    assert task_count(5, 10 * TASK_BYTES, cores=2) == 5


@given(st.lists(st.integers(0, 1 << 30), max_size=60), st.integers(1, 12))
def test_every_unit_once_in_order_and_no_task_much_heavier_than_the_mean(weights: list[int], tasks: int) -> None:
    units = list(range(len(weights)))
    lists = packed(units, weights, tasks)
    assert sorted(u for unit_list in lists for u in unit_list) == units
    assert all(unit_list == sorted(unit_list) and unit_list for unit_list in lists)
    assert len(lists) <= tasks
    if weights:
        loads = [sum(weights[u] for u in unit_list) for unit_list in lists]
        assert max(loads) <= sum(weights) / tasks + max(weights)  # greedy onto the lightest list


def test_hand_checked_packing() -> None:
    assert packed(["a", "b", "c", "d"], [5, 1, 4, 2], 2) == [["a", "b"], ["c", "d"]]


def test_a_unit_heavier_than_a_core_s_share_is_split_into_its_shares() -> None:
    assert shares([1073, 10], cores=2) == [2, 1]  # the bench store's two commitlog ranges
    assert shares([100, 100], cores=2) == [1, 1]  # a core's share each: whole
    assert shares([1000, 1, 1], cores=8) == [8, 1, 1]
    assert shares([0, 0], cores=2) == [1, 1] and shares([], cores=2) == []


def test_a_parse_task_spreads_the_store_over_the_slots_within_bounds() -> None:
    low, high = PARSE_TASK_BYTES
    gib = 1 << 30
    assert parse_task_bytes(2 * gib, slots=2) == high  # a segment a slot would be 1 GiB: capped
    assert parse_task_bytes(2 * gib, slots=8) == 256 << 20  # four ranges a segment, one wave
    assert parse_task_bytes(10 << 20, slots=64) == low  # a small store: no task smaller than its fixed cost
    assert parse_task_bytes(gib, slots=0) == high  # no slot known: one


def test_results_come_back_in_the_units_order(spark) -> None:
    """Packing regroups the units (the light last one joins the first task, before the second task's units); the
    (unit, result) pairs keep the units' order, which the audit pairs live and rebuilt IndexFiles by."""
    tasks = spark.sparkContext.defaultParallelism
    units, weights = list(range(2 * tasks + 1)), [2] * 2 * tasks + [1]
    assert packed(units, weights, tasks)[0] == [0, tasks, 2 * tasks]
    done = run_packed(Run(spark, BrokerConfig()), "units", units, weights, lambda u: -u)
    assert done == [(u, -u) for u in units]
