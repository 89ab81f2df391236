"""``rmqstore demo`` (what ``make run`` runs) as a newcomer sees it: one real process, its console and its files.

The oracles are the reports the demo's audits wrote and a copy broken again with storelib.synthetic.incidents (the same
damage, so the undo the demo prints must give back exactly that copy's bytes).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from storelib.broker.config import load_broker_config
from storelib.synthetic import incidents
from tests.spark_cluster import ROOT
from tests.storecopy import tree_digest

pytestmark = pytest.mark.cluster
MAX_LINES = 36  # make run: at most ~40 lines, a few of them the setup steps'


def rmqstore(*argv: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "jobs.cli", *argv]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    root = tmp_path_factory.mktemp("demo")
    return root, rmqstore("demo", "--dir", str(root), "--master", "local[2]")


def report(path: Path) -> dict:
    return json.loads((path / "report.json").read_text())


def test_the_demo_audits_a_broken_copy_recovers_it_and_audits_it_clean(demo):
    root, done = demo
    assert done.returncode == 0, done.stdout + done.stderr
    before, after = report(root / "rescue" / "audit-before"), report(root / "rescue" / "audit-after")
    assert before["summary"]["exit_code"] == 1
    assert {"cq-missing-queue", "cq-zeroed-entries", "commitlog-torn-tail"} <= set(before["summary"]["kinds"])
    assert (after["summary"]["exit_code"], after["summary"]["findings"]) == (0, 0)
    assert report(root / "audit-report")["summary"]["exit_code"] == 0  # the healthy store
    apply_ = before["verdict"]["recover"]["commands"][-1]  # the report's own command was run as printed
    assert "--truncate-torn-tail" in apply_  # its plan zeroes the torn tail
    assert f"== the verdict's command: {apply_}" in done.stdout
    assert "VERDICT: " in done.stdout and "recover: re-audit: 0 repairable findings left" in done.stdout


def test_the_demo_is_short_names_its_outputs_and_gives_every_verb_the_release(demo):
    root, done = demo
    lines = done.stdout.splitlines()
    assert len(lines) <= MAX_LINES, done.stdout
    assert done.stderr == "", done.stderr
    for path in ("rescue/audit-before/report.html", "rescue/audit-after/report.html", "audit-report/report.html"):
        assert (root / path).is_file() and str(root / path) in done.stdout
    logs = sorted((root / "logs").glob("*.log"))
    assert len(logs) == 6  # generate, audit-broken, recover, audit-recovered, rebuild, audit
    for log in logs:
        assert "--broker-version 4.9.8" in log.read_text().splitlines()[0], log


def test_the_printed_undo_gives_back_the_broken_store(demo, tmp_path):
    root, done = demo
    (undo,) = [line.split(": ", 1)[1] for line in done.stdout.splitlines() if "undo the rescue: " in line]
    argv = undo.split()
    assert argv[:2] == ["rmqstore", "recover"]
    undone = rmqstore(*argv[1:])
    assert undone.returncode == 0, undone.stderr
    broken = shutil.copytree(root / "store", tmp_path / "store")
    incidents.lose_consume_queue(broken, "Audit-Log")
    incidents.zero_consume_queue_file(broken, "Billing_v1", 0)
    incidents.tear_commitlog_tail(broken, load_broker_config(str(root / "broker.conf")))
    assert tree_digest(root / "rescue" / "store") == tree_digest(broken)
