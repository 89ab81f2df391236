"""The jobs as a fleet runs them: ``spark-submit jobs/<verb>.py`` on a standalone cluster whose executors do not
share the driver's /tmp (tests/spark_cluster.py), executors killed mid-rebuild, the nightly script, the settings
layers and the console. Every run is its own process (one SparkContext per process); oracles are the broker's
files, the fixture's dump summary and the Delta tables as delta-rs reads them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import spark_cluster
from tests.conftest import BROKER_CONF, EXPIRED, EXPIRED_SUMMARY, FIXTURE_DIR, needs_sample
from tests.reference import assert_same_index
from tests.spark_cluster import JOB_TIMEOUT, ROOT, Cluster, failed, wait_for
from tests.storecopy import copy_store, tree_digest

pytestmark = pytest.mark.cluster
cluster = spark_cluster.cluster  # the session's standalone cluster (a fixture)

BIG_STORE_CONF = "mappedFileSizeCommitLog=33554432\nmaxHashSlotNum=100000\nmaxIndexNum=400000\n"


def assert_published(out: Path) -> None:
    """OUT holds exactly a rebuild's files, no hidden or temporary one, and nothing else was left beside it."""
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint", "consumequeue", "index", "rebuild.json"]
    assert [p for p in out.rglob(".*")] == []
    assert sorted(os.listdir(out.parent)) == ["out"]  # the staging directory was renamed, none is left


def delta_rows(table: Path) -> list[dict]:
    """The table's rows as delta-rs reads it (no Spark, no project code)."""
    from deltalake import DeltaTable

    return DeltaTable(str(table)).to_pyarrow_table().to_pylist()


@pytest.fixture(scope="module")
def rebuilt_expired(cluster: Cluster) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """expired/ rebuilt once on the cluster, into the shared dir, with its message catalog (store id broker-a)."""
    out, catalog = cluster.new_dir("rebuilt") / "out", cluster.new_dir("catalog") / "table"
    args = ["--store", str(EXPIRED), "--out", str(out), "--broker-config", str(BROKER_CONF)]
    done = cluster.submit("rebuild", [*args, "--catalog", str(catalog), "--store-id", "broker-a"])
    return out, catalog, done


@needs_sample
def test_rebuild_on_the_cluster_matches_the_broker(rebuilt_expired):
    out, _, done = rebuilt_expired
    assert done.returncode == 0, failed(done)
    assert EXPIRED_SUMMARY in done.stdout
    assert_same_index(EXPIRED, out)
    assert_published(out)


@needs_sample
def test_rebuild_with_catalog_on_the_cluster(rebuilt_expired):
    _, catalog, done = rebuilt_expired
    assert done.returncode == 0, failed(done)
    rows = delta_rows(catalog)
    summary = json.loads((FIXTURE_DIR / "expected" / "expired" / "dump_summary.json").read_text())
    assert len(rows) == summary["messages"]
    assert {r["store_id"] for r in rows} == {"broker-a"}
    by_topic: dict[str, int] = {}
    for r in rows:
        by_topic[r["topic"]] = by_topic.get(r["topic"], 0) + 1
    assert by_topic == summary["messagesByTopic"]


@needs_sample
def test_audit_with_rebuilt_and_history_since_last_twice_on_the_cluster(cluster: Cluster, rebuilt_expired):
    """The first run (no clean run yet: a full audit) finds the store clean; the second audits only the tail.
    (The audit that rebuilds by itself on the cluster, its work dir one the executors see, is the nightly test's.)"""
    out, _, _ = rebuilt_expired
    table, reports = cluster.new_dir("history") / "table", cluster.new_dir("reports")
    run_ids = []
    for n in (1, 2):
        args = ["--store", str(EXPIRED), "--rebuilt", str(out), "--report", str(reports / str(n))]
        args += ["--broker-config", str(BROKER_CONF), "--history", str(table), "--store-id", "broker-a", "--since-last"]
        done = cluster.submit("audit", args)
        assert done.returncode == 0, failed(done)
        run_ids.append(json.loads((reports / str(n) / "report.json").read_text())["run"]["history"]["run_id"])
    summary = json.loads((reports / "1" / "report.json").read_text())["summary"]
    assert (summary["exit_code"], summary["error"], summary["warning"]) == (0, 0, 0)
    assert summary["commitlog"]["messages"] == 6900
    summaries = sorted((r for r in delta_rows(table) if r["row_type"] == "summary"), key=lambda r: r["started_at"])
    assert [(r["run_id"], r["store"], r["exit_code"], r["base_run_id"]) for r in summaries] == [
        (run_ids[0], "broker-a", 0, None),
        (run_ids[1], "broker-a", 0, run_ids[0]),
    ]
    assert len(summaries[1]["segments_audited"]) < len(summaries[0]["segments_audited"])  # only the tail


@needs_sample
def test_recover_dry_run_on_the_cluster(cluster: Cluster):
    store = copy_store(EXPIRED, cluster.new_dir("recover") / "store")
    before = tree_digest(store)
    done = cluster.submit("recover", ["--store", str(store), "--broker-config", str(BROKER_CONF)])
    assert done.returncode == 0, failed(done)
    assert "recover: nothing to change" in done.stdout or "recover: dry run" in done.stdout
    assert tree_digest(store) == before


# --- faults: an executor JVM or a Python worker killed in the middle of a rebuild ----------------------------


@pytest.fixture(scope="module")
def big_store(cluster: Cluster) -> Path:
    """~190 MiB in 32 MiB segments (5 parse tasks on 2 cores), its broker-written CQ and index files the oracle."""
    base = cluster.new_dir("big")
    (base / "broker.conf").write_text(BIG_STORE_CONF)
    cmd = [sys.executable, "-m", "jobs.cli", "generate", "--out", str(base / "store"), "--size", "192MiB"]
    cmd += ["--seed", "7", "--broker-config", str(base / "broker.conf")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert done.returncode == 0, failed(done)
    return base


def executor_jvms(cluster: Cluster) -> list[int]:
    return cluster.worker_processes("CoarseGrainedExecutorBackend")


@pytest.mark.parametrize("victim", [executor_jvms, Cluster.sql_python_workers], ids=["executor-jvm", "python-worker"])
def test_a_process_killed_mid_rebuild_costs_a_retry_not_the_result(cluster: Cluster, big_store: Path, victim):
    out, log = cluster.new_dir("fault") / "out", cluster.new_dir("log") / "submit.log"
    args = ["--store", str(big_store / "store"), "--out", str(out), "--broker-config", str(big_store / "broker.conf")]
    job = cluster.start_submit("rebuild", args, log)
    try:
        # a Python worker forked on the executor: segments are being parsed
        wait_for(lambda: cluster.sql_python_workers() or job.poll() is not None, JOB_TIMEOUT, "a parse task")
        pids = victim(cluster)
        assert job.poll() is None and pids, f"the job ended before the kill:\n{log.read_text()[-3000:]}"
        assert not out.exists()
        os.kill(pids[0], signal.SIGKILL)
        job.wait(timeout=JOB_TIMEOUT)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    text = log.read_text()
    assert job.returncode == 0, text[-6000:]
    assert "Lost task" in text  # the killed process's tasks ran again
    assert_same_index(big_store / "store", out)
    assert_published(out)


# --- the nightly script as cron runs it ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def default_store(cluster: Cluster) -> Path:
    """A small generated store and its broker.conf (the nightly script's BROKER_CONFIG)."""
    store = cluster.new_dir("nightly") / "store"
    cmd = [sys.executable, "-m", "jobs.cli", "generate", "--out", str(store), "--messages", "3000", "--seed", "3"]
    cmd += ["--write-broker-config", str(store.parent / "broker.conf")]
    cmd += ["--deleted-head-segments", "0"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert done.returncode == 0, failed(done)
    return store


def test_nightly_script_audits_a_fleet_on_the_cluster(cluster: Cluster, default_store: Path):
    """Two stores (the same bytes under two ids) in one application: a row and a report each, exit 0; each audit
    rebuilds its store itself on the cluster, in a work dir the executors see (not the driver's /tmp)."""
    base = cluster.new_dir("nightly-run")
    env = {
        **cluster.env,
        "SPARK_MASTER": cluster.master_url,
        "HISTORY": str(base / "history"),
        "REPORTS": str(base / "reports"),
        "DELTA_PACKAGE": "",
        "EXECUTORS": "1",
        "ALERT_CMD": "echo ALERT:",
        "BROKER_CONFIG": str(default_store.parent / "broker.conf"),
    }
    script = [str(ROOT / "conf" / "nightly-audit.sh"), f"broker-a={default_store},broker-b={default_store}"]
    done = subprocess.run(script, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert done.returncode == 0, failed(done)
    assert "rmqstore nightly audit: every store clean" in done.stdout
    assert "audit: 2 stores: 2 clean, 0 divergent, 0 could not be audited; exit code 0" in done.stdout
    summaries = [r for r in delta_rows(base / "history") if r["row_type"] == "summary"]
    got = sorted((r["store"], r["exit_code"], r["errors"], r["warnings"]) for r in summaries)
    assert got == [("broker-a", 0, 0, 0), ("broker-b", 0, 0, 0)]
    (run,) = (base / "reports").iterdir()
    for store_id in ("broker-a", "broker-b"):
        assert json.loads((run / store_id / "report.json").read_text())["summary"]["exit_code"] == 0
