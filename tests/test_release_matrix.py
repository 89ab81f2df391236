"""Every row of the release table against the real brokers of its releases (tests/broker/harness.py VERSIONS):
the store each release's broker wrote is rebuilt byte for byte with its true ``--broker-version`` (a test per
release a row names in ``verified_by``), with no flag (detection: byte-exact, audit clean), and after losing
consumequeue/, batchconsumequeue/ and index/ (byte-exact, or refused only where the releases the clues still allow
write different files for this store, and never without the release that wrote it among the choices).

One Spark application (the session's) for every store. The releases the suite always reads (CORE_VERSIONS) run in
``make test``; the others are marked ``matrix`` (``make test-matrix``).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from jobs.pipeline.audit_flow import audit
from jobs.pipeline.context import Run
from jobs.pipeline.rebuild_flow import rebuild
from storelib.broker.config import load_broker_config
from storelib.broker.versions import RULE_SETS, parse_version, rules_for
from storelib.errors import AmbiguousRelease
from tests.broker.fixtures import harness_store, release_param
from tests.broker.harness import SEEDS, VERSIONS
from tests.reference import assert_same_index

LOST = ("consumequeue", "batchconsumequeue", "index")


def test_every_verifying_release_is_one_the_harness_runs() -> None:
    """A row's ``verified_by`` names only releases the harness writes stores of (and tests below check)."""
    assert {v for r in RULE_SETS for v in r.verified_by} <= set(VERSIONS)
    for r in RULE_SETS:
        assert all(rules_for(v) is r for v in r.verified_by), r.name


ROWS = [release_param(v, r.name) for r in RULE_SETS for v in r.verified_by]


@pytest.mark.parametrize(("version", "row"), ROWS)
def test_a_row_writes_its_brokers_files(spark, tmp_path: Path, version: str, row: str) -> None:
    """The row's rules, given as the broker's own release, write the broker's ConsumeQueues, BatchConsumeQueues
    and IndexFiles byte for byte."""
    store = harness_store(version, "default")
    cfg = dataclasses.replace(load_broker_config(store / "broker.conf"), brokerVersion=version)
    rebuild(Run(spark, cfg), str(store / "store"), str(tmp_path / "out"))
    assert_same_index(store / "store", tmp_path / "out")
    assert json.loads((tmp_path / "out" / "rebuild.json").read_text())["broker_rules"]["name"] == row


STORES = [release_param(v, seed) for v in VERSIONS for seed in SEEDS]


@pytest.mark.parametrize(("version", "seed"), STORES)
def test_a_release_store_is_detected_rebuilt_and_audited_clean(spark, tmp_path: Path, version: str, seed: int) -> None:
    """No flag: the releases detected hold the broker's, the rebuild is byte-exact, the audit finds nothing."""
    store = harness_store(version, "default", seed)
    run, out = Run(spark, load_broker_config(store / "broker.conf")), tmp_path / "out"
    run = rebuild(run, str(store / "store"), str(out)).run  # with the rules it settled
    assert_same_index(store / "store", out)
    rules = json.loads((out / "rebuild.json").read_text())["broker_rules"]
    assert rules["source"] == "detected" and rules["verified_by"], rules
    result = audit(run, str(store / "store"), str(out), None)
    assert ([f.kind for f in result.findings], result.exit_code) == ([], 0)


@pytest.mark.parametrize("version", [release_param(v) for v in VERSIONS])
def test_a_release_store_without_its_queues_and_index(spark, tmp_path: Path, version: str) -> None:
    """consumequeue/, batchconsumequeue/ and index/ lost: the rebuild with no flag writes the broker's files, or
    refuses (nothing written) offering one release per set of rows that write different files, the broker's own
    row among them."""
    store = harness_store(version, "default")
    copy, out = tmp_path / "lost", tmp_path / "out"
    shutil.copytree(store / "store", copy, ignore=shutil.ignore_patterns(*LOST, "lock"))
    try:
        rebuild(Run(spark, load_broker_config(store / "broker.conf")), str(copy), str(out))
    except AmbiguousRelease as e:
        assert not out.exists()
        choices = [rules_for(c) for c in e.choices]
        assert len(set(choices)) == len(choices) > 1
        firsts = sorted(parse_version(c) for c in e.choices)
        own = parse_version(version)
        assert firsts[0] <= own, e.choices  # the writer's row is one a choice stands for
        print(f"{version}: refused, {e.choices}: {e}")
        return
    assert_same_index(store / "store", out)


def test_the_readme_names_the_brokers_that_checked_each_row() -> None:
    """README.md's release table is RULE_SETS' rows and their ``verified_by``, row for row."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| row | checked by the real broker of |") :].split("\n\n")[0].splitlines()[2:]
    assert table == [f"| {r.name} | {', '.join(r.verified_by)} |" for r in RULE_SETS]
