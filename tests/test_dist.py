"""``make dist`` on a cluster whose nodes have Spark and Python but none of the project's packages (as YARN and
Kubernetes nodes): the printed spark-submit line, pointed at the standalone cluster, rebuilds and audits a store
with everything the executors import coming from the packed environment (``--archives ...#env``).

The package is built under the driver's /tmp, which the worker cannot see (tests/spark_cluster.py): the archive and
the jars reach the executors through Spark only. Oracles: the generator's broker-written index files, the audit's
report, and the same job failing on that worker without the archive.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reference import assert_same_index
from tests.spark_cluster import JOB_TIMEOUT, ROOT, Cluster, failed, standalone_cluster

pytestmark = pytest.mark.cluster
BARE_PYTHON = sys._base_executable  # the interpreter of the venv, without the venv: none of its packages
PROJECT_IMPORTS = ("numpy", "pyarrow", "pandas", "numba", "rocksdict", "deltalake", "storelib", "pyspark")


@pytest.fixture(scope="module")
def bare_cluster() -> Iterator[Cluster]:
    have = [
        m
        for m in PROJECT_IMPORTS
        if subprocess.run([BARE_PYTHON, "-c", f"import {m}"], cwd="/", capture_output=True).returncode == 0
    ]
    if have:
        pytest.skip(f"{BARE_PYTHON} has {', '.join(have)}: it cannot stand for a node without the project's packages")
    with standalone_cluster(worker_python=BARE_PYTHON) as c:
        yield c


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """``python -m jobs.runtime.dist`` (what ``make dist`` runs) into the driver's /tmp, for the nodes' Python."""
    out = tmp_path_factory.mktemp("dist")
    cmd = [sys.executable, "-m", "jobs.runtime.dist", "--dir", str(out), "--python", BARE_PYTHON]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=JOB_TIMEOUT * 2)
    assert done.returncode == 0, failed(done)
    return out


@pytest.fixture(scope="module")
def store(bare_cluster: Cluster) -> Path:
    """A small generated store (its index files written as the broker would: the rebuild's oracle)."""
    store = bare_cluster.new_dir("dist") / "store"
    cmd = [sys.executable, "-m", "jobs.cli", "generate", "--out", str(store), "--messages", "3000", "--seed", "5"]
    cmd += ["--write-broker-config", str(store.parent / "broker.conf"), "--deleted-head-segments", "0"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert done.returncode == 0, failed(done)
    return store


def printed_submit(dist: Path, cluster: Cluster, verb: str, args: list[str], archive: bool = True) -> list[str]:
    """The YARN line of dist/submit.txt, on the standalone cluster instead, running ``jobs/<verb>.py ARGS``."""
    block = (dist / "submit.txt").read_text().split("# YARN", 1)[1].split("\n", 1)[1].split("\n#", 1)[0]
    argv = shlex.split(block.replace("\\\n", " "))
    options = argv[: argv.index("jobs/audit.py")]
    options[options.index("--master") + 1] = cluster.master_url
    if not archive:
        at = options.index("--archives")
        del options[at : at + 4]  # --archives A#env --conf spark.pyspark.python=./env/bin/python
    return [*options, str(ROOT / "jobs" / f"{verb}.py"), *args]


def submit(cluster: Cluster, argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=cluster.env, cwd=cluster.shared, capture_output=True, text=True, timeout=900)


def test_the_printed_line_rebuilds_and_audits_with_the_archive_only(bare_cluster: Cluster, dist: Path, store: Path):
    conf = ["--broker-config", str(store.parent / "broker.conf"), "--broker-version", "4.9.8"]
    out, report = bare_cluster.new_dir("dist-out") / "out", bare_cluster.new_dir("dist-report")
    rebuilt = submit(
        bare_cluster, printed_submit(dist, bare_cluster, "rebuild", ["--store", str(store), "--out", str(out), *conf])
    )
    assert rebuilt.returncode == 0, failed(rebuilt)
    assert_same_index(store, out)
    args = ["--store", str(store), "--rebuilt", str(out), "--report", str(report), *conf]
    audited = submit(bare_cluster, printed_submit(dist, bare_cluster, "audit", args))
    assert audited.returncode == 0, failed(audited)
    assert json.loads((report / "report.json").read_text())["summary"]["exit_code"] == 0
    unpacked = list((bare_cluster.shared / "worker").glob("app-*/*/env/bin/python"))
    assert len(unpacked) >= 2  # each application's executor unpacked the archive as ./env


def test_without_the_archive_the_bare_worker_cannot_run_the_job(bare_cluster: Cluster, dist: Path, store: Path):
    """The worker really lacks the packages: the same line without --archives fails on the executors' imports."""
    out = bare_cluster.new_dir("dist-bare") / "out"
    argv = printed_submit(dist, bare_cluster, "rebuild", ["--store", str(store), "--out", str(out)], archive=False)
    argv += ["--broker-config", str(store.parent / "broker.conf"), "--broker-version", "4.9.8"]
    done = submit(bare_cluster, argv)
    assert done.returncode != 0
    assert "ModuleNotFoundError" in done.stdout + done.stderr
