"""LMQ offsets as racing appends give them (the harness's "lmq-race" variant: LmqRace.java's threads send to their
own queues of one topic, every message naming %LMQ%race-0 and %LMQ%race-1). 5.0.0 … 5.1.x assign a record's
INNER_MULTI_QUEUE_OFFSET under its source queue's lock only, so it may repeat another's, leave one out, or follow a
higher one in the commitlog; the broker's file ConsumeQueue writes each unit at the queue's write position in
commitlog order (``ConsumeQueue.putMessagePositionInfo``; RuleSet.lmq_at_write_position). The rebuild writes the
broker's %LMQ% files byte for byte and the audit finds nothing; with no flag it writes them too, or refuses (nothing
written) naming the writer's row among the choices. The oracle reads the records' offsets with tests.reference.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from jobs.pipeline.audit_flow import audit
from jobs.pipeline.context import Run
from jobs.pipeline.rebuild_flow import rebuild
from storelib.broker.config import load_broker_config
from storelib.errors import AmbiguousRelease
from tests.broker.fixtures import harness_store, release_param
from tests.broker.harness import VARIANTS
from tests.reference import assert_same_index, walk_commitlog

#: the race's case in make test (a recorded store); the other releases' are in the release matrix
ALWAYS = "5.1.1"
RACED = [
    pytest.param(v, marks=pytest.mark.broker, id=v) if v == ALWAYS else release_param(v)
    for v in VARIANTS["lmq-race"][1]
]


def lmq_offsets(store: Path, queue: str) -> list[int]:
    """The INNER_MULTI_QUEUE_OFFSET each record gives ``queue``, in commitlog order."""
    out = []
    for r in walk_commitlog(store / "commitlog"):
        names = r.properties.get("INNER_MULTI_DISPATCH", "").split(",")
        if queue in names and "INNER_MULTI_QUEUE_OFFSET" in r.properties:
            out.append(int(r.properties["INNER_MULTI_QUEUE_OFFSET"].split(",")[names.index(queue)]))
    return out


@pytest.mark.parametrize("version", RACED)
def test_racing_lmq_offsets_are_written_at_the_write_position(spark, tmp_path: Path, version: str) -> None:
    store = harness_store(version, "lmq-race")
    offsets = lmq_offsets(store / "store", "%LMQ%race-0")
    assert offsets != list(range(offsets[0], offsets[0] + len(offsets))), "no race in this store: it proves nothing"
    cfg = dataclasses.replace(load_broker_config(store / "broker.conf"), brokerVersion=version)
    run = rebuild(Run(spark, cfg), str(store / "store"), str(tmp_path / "out")).run
    assert_same_index(store / "store", tmp_path / "out")
    result = audit(run, str(store / "store"), str(tmp_path / "out"), None)
    assert ([f.kind for f in result.findings], result.exit_code) == ([], 0)
    try:  # no flag: the clues of this store (no broker-encoded record) may allow rows that do not write so
        rebuild(Run(spark, load_broker_config(store / "broker.conf")), str(store / "store"), str(tmp_path / "nf"))
    except AmbiguousRelease as e:
        assert not (tmp_path / "nf").exists()
        assert "out of step with their queue" in str(e)
        assert [c for c in e.choices if writes_the_brokers_files(spark, store, c, tmp_path / c)], e.choices
        return
    assert_same_index(store / "store", tmp_path / "nf")


def writes_the_brokers_files(spark, store: Path, version: str, out: Path) -> bool:
    """Whether the rebuild with ``--broker-version version`` writes the broker's own files."""
    cfg = dataclasses.replace(load_broker_config(store / "broker.conf"), brokerVersion=version)
    rebuild(Run(spark, cfg), str(store / "store"), str(out))
    try:
        assert_same_index(store / "store", out)
    except AssertionError:
        return False
    return True


@pytest.mark.broker
def test_a_hole_in_a_queue_written_at_the_write_position_is_still_reported(spark, tmp_path: Path) -> None:
    """The broker's out-of-step LMQ queue is clean (above); a unit zeroed in it is damage the audit names."""
    store = harness_store(ALWAYS, "lmq-race")
    shutil.copytree(store / "store", tmp_path / "store", ignore=shutil.ignore_patterns("lock"))
    first = sorted((tmp_path / "store" / "consumequeue" / "%LMQ%race-0" / "0").iterdir())[0]
    with open(first, "r+b") as f:
        f.seek(50 * 20)
        f.write(bytes(20))
    cfg = dataclasses.replace(load_broker_config(store / "broker.conf"), brokerVersion=ALWAYS)
    run = rebuild(Run(spark, cfg), str(tmp_path / "store"), str(tmp_path / "out")).run
    result = audit(run, str(tmp_path / "store"), str(tmp_path / "out"), None)
    assert [(f.kind, f.file) for f in result.findings] == [
        ("cq-zeroed-entries", "consumequeue/%LMQ%race-0/0/00000000000000000000")
    ]
