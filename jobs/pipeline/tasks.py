"""Small units of work (queues, IndexFiles, commitlog ranges) as Spark tasks: spread by bytes, not one task each.

A task costs a round trip to an executor's Python worker whatever it does (on a standalone cluster under load,
about half a second); a store of 25 small queues audited one task per queue spent more time starting tasks
than reading queues. Units are packed into as many tasks as the cores, or more when the bytes are more than
``TASK_BYTES`` a task; a task goes through its units one at a time, so its memory is one unit's.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any, TypeVar

from jobs.pipeline.progress import Progress

if TYPE_CHECKING:
    from pyspark import SparkContext

Unit = TypeVar("Unit")
Result = TypeVar("Result")

#: the bytes a task of packed units takes
TASK_BYTES = 256 << 20
#: the bounds of a parse task's bytes (jobs.pipeline.parse): a smaller task pays its fixed cost more often,
#: a bigger one keeps more ConsumeQueue units until it ends (udfs.parse.PieceUnits: a third of its bytes at most)
PARSE_TASK_BYTES = (128 << 20, 512 << 20)


def task_count(units: int, total_bytes: int, cores: int, task_bytes: int = TASK_BYTES) -> int:
    """Tasks for ``units`` units of ``total_bytes``: the cores, more when the bytes ask for it, at most one a unit."""
    return max(1, min(units, max(cores, math.ceil(total_bytes / task_bytes))))


def parse_task_bytes(total_bytes: int, slots: int) -> int:
    """A parse task's bytes: the store's spread over the task slots, within PARSE_TASK_BYTES. Two slots and 2 GiB of
    segments: 512 MiB, one wave of tasks a segment (256 MiB tasks would make two waves)."""
    low, high = PARSE_TASK_BYTES
    return min(high, max(low, -(-total_bytes // max(1, slots))))


def shares(weights: Sequence[int], cores: int) -> list[int]:
    """In how many pieces each unit is best split so that the work spreads over ``cores``: a unit heavier than a
    core's share of the total in as many pieces as its shares (rounded up), the others whole."""
    total = sum(weights)
    return [max(1, -(-w * cores // total)) if total else 1 for w in weights]


def task_slots(sc: SparkContext) -> int:
    """The tasks the executors run at once (the default resource profile's slots), else ``defaultParallelism``:
    that is a count of partitions (8 in conf/local.conf on any machine), not of cores."""
    from py4j.protocol import Py4JError

    try:
        jsc = sc._jsc.sc()
        slots = int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Py4JError:  # a Spark without the call: the partitions' count still spreads the work
        slots = 0
    return slots or sc.defaultParallelism


def submit_inheriting(pool: Executor, sc: SparkContext, work: Callable[..., Result], *args: Any) -> Future[Result]:
    """``work(*args)`` on a thread of ``pool``, its jobs with this thread's Spark local properties (job group and
    description). pyspark's ``inheritable_thread_target`` does as much, but stages are named by their first caller
    outside pyspark, and its wrapper would name every stage of ``work`` after the pool's thread."""
    properties = sc._jsc.sc().getLocalProperties().clone()

    def inheriting() -> Result:
        sc._jsc.sc().setLocalProperties(properties)
        return work(*args)

    return pool.submit(inheriting)


def packed(units: Sequence[Unit], weights: Sequence[int], tasks: int) -> list[list[Unit]]:
    """``units`` in ``tasks`` lists of near-equal weight: heaviest first, each onto the lightest list so far;
    each list keeps the units' order."""
    loads = [0] * tasks
    members: list[list[int]] = [[] for _ in range(tasks)]
    for i in sorted(range(len(units)), key=lambda i: -weights[i]):
        lightest = loads.index(min(loads))
        loads[lightest] += weights[i]
        members[lightest].append(i)
    return [[units[i] for i in sorted(m)] for m in members if m]


def run_packed(
    run: Any, label: str, units: Sequence[Unit], weights: Sequence[int], work: Callable[[Unit], Result]
) -> list[tuple[Unit, Result]]:
    """``work`` on every unit, the units packed into tasks (``task_count``, ``packed``), with a progress line
    under ``label``; (unit, result) pairs in the units' order (packing regroups them; callers pair results by
    position, e.g. the live and rebuilt IndexFiles)."""
    if not units:
        return []
    sc = run.spark.sparkContext
    numbered = list(enumerate(units))
    batches = packed(numbered, weights, task_count(len(units), sum(weights), sc.defaultParallelism))
    with Progress(run, len(batches), sum(weights), label), _call_site(sc, f"{label} at {__file__}"):
        done = sc.parallelize(batches, len(batches)).flatMap(lambda b: [(i, u, work(u)) for i, u in b]).collect()
    return [(u, result) for _, u, result in sorted(done, key=lambda d: d[0])]


@contextlib.contextmanager
def _call_site(sc: SparkContext, site: str) -> Iterator[None]:
    """The job's call site (its stages' name) ``site``, then none. pyspark names a job after its caller only when no
    other driver thread is inside an action (its depth counter is per process), else the job keeps its thread's last
    name or none: with the audit's IndexFile stage on a thread of its own, a packed job was named after another."""
    sc._jsc.setCallSite(site)
    try:
        yield
    finally:
        sc._jsc.setCallSite(None)
