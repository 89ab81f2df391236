"""RocketMQ 5.x stores end to end on local Spark: ``rebuild`` of the real 5.5.0 broker's sample store gives
its consumequeue/ (LMQ queues included), batchconsumequeue/ and index/ byte for byte, with
``--broker-version 5.5`` and with the rules detected from the store; the audit of that store is clean."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from jobs.pipeline.audit import audit
from jobs.pipeline.context import Run
from jobs.pipeline.rebuild import rebuild
from storelib.config import load_broker_config
from tests.test_v5 import FIXTURE_NAME, find_shared, harness_store


@pytest.fixture(scope="module")
def v5_fixture() -> Path:
    path = find_shared(FIXTURE_NAME)
    if path is None:
        pytest.skip(f"the RocketMQ 5.5.0 sample store ({FIXTURE_NAME}) is not under any parent's shared/fixtures")
    return path


def tree(root: Path, *dirs: str) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for d in dirs for p in sorted((root / d).rglob("*")) if p.is_file()
    }


def assert_same_index(store: Path, out: Path) -> None:
    """queue files equal by path, IndexFiles by order (their names are creation times)."""
    live, built = tree(store, "consumequeue", "batchconsumequeue"), tree(out, "consumequeue", "batchconsumequeue")
    assert sorted(built) == sorted(live)
    assert [p for p in live if built[p] != live[p]] == []
    live_index = [p.read_bytes() for p in sorted((store / "index").iterdir())]
    built_index = [p.read_bytes() for p in sorted((out / "index").iterdir())]
    assert len(built_index) == len(live_index)
    assert [i for i, (a, b) in enumerate(zip(built_index, live_index)) if a != b] == []


@pytest.mark.parametrize("version", ["5.5", ""])
def test_rebuild_of_the_5_5_fixture_is_byte_exact(spark, v5_fixture: Path, tmp_path: Path, version: str) -> None:
    cfg = dataclasses.replace(load_broker_config(v5_fixture / "broker.conf"), brokerVersion=version)
    store, out = v5_fixture / "clean", tmp_path / "out"
    result = rebuild(Run(spark, cfg), str(store), str(out))
    assert_same_index(store, out)
    rules = json.loads((out / "rebuild.json").read_text())["broker_rules"]
    assert rules["name"] == "5.5"
    assert rules["source"] == ("--broker-version" if version else "detected")
    if not version:
        assert {c["clue"] for c in rules["clues"]} >= {"batchconsumequeue/", "__CRC32#", "index tag keys"}
    assert result.report["findings"] == []
    queues = {(q["topic"], q["queue_id"]): q for q in result.report["consume_queues"]}
    assert (queues["TopicBatchCQ", 0]["entries"], queues["TopicBatchCQ", 0]["max_offset"]) == (38, 151)
    assert queues["%LMQ%room-4", 0]["entries"] == 72


@pytest.mark.parametrize(
    ("version", "variant", "rules"),
    [("4.9.7", "default", "4.9"), ("5.3.3", "default", "5.2"), ("5.5.0", "default", "5.5"), ("5.5.0", "crc", "5.5")],
)
def test_harness_store_rebuilt_with_detected_rules_and_audited_clean(
    spark, tmp_path: Path, version: str, variant: str, rules: str
) -> None:
    """A store the real broker wrote: rules detected (no --broker-version), index byte-exact, audit exit 0."""
    store = harness_store(version, variant)
    run, out = Run(spark, load_broker_config(store / "broker.conf")), tmp_path / "out"
    rebuild(run, str(store / "store"), str(out))
    assert_same_index(store / "store", out)
    assert json.loads((out / "rebuild.json").read_text())["broker_rules"]["name"] == rules
    result = audit(run, str(store / "store"), str(out), None)  # run.cfg: the rules the rebuild resolved
    assert [f.kind for f in result.findings] == []
    assert result.exit_code == 0
