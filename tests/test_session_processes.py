"""The session's settings layers and the console as separate processes see them: ``spark-submit`` of a probe and
``rmqstore rebuild`` on local[1] (no cluster needed), each its own process and SparkContext."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BROKER_CONF, EXPIRED, EXPIRED_SUMMARY, needs_sample
from tests.spark_cluster import JOB_TIMEOUT, ROOT, failed

pytestmark = pytest.mark.cluster

PROBE = """
import argparse, json, sys
sys.path.insert(0, {root!r})
from jobs.cli import add_spark_options
from jobs.runtime.session import spark_session
p = argparse.ArgumentParser()
add_spark_options(p)
args = p.parse_args()
spark, _ = spark_session("probe", args.master, args.profile, args.conf)
keys = ["spark.sql.execution.arrow.maxRecordsPerBatch", "spark.default.parallelism", "spark.sql.shuffle.partitions",
        "spark.python.daemon.module"]
print(json.dumps({{k: spark.conf.get(k, None) for k in keys}}))
spark.stop()
"""


def probe_settings(tmp_path: Path, submit_conf: list[str], our_conf: list[str]) -> dict[str, str]:
    """The settings a job's session ends up with under ``spark-submit --conf ... probe.py --conf ...``."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE.format(root=str(ROOT)))
    spark_submit = Path(sys.executable).parent / "spark-submit"
    cmd = [str(spark_submit), "--master", "local[1]", *(a for kv in submit_conf for a in ("--conf", kv)), str(probe)]
    cmd += [a for kv in our_conf for a in ("--conf", kv)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert done.returncode == 0, failed(done)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_settings_precedence_under_spark_submit(tmp_path):
    """One process, each layer seen on a key of its own: the profile (conf/local.conf) fills what nobody sets,
    spark-submit's --conf wins over the profile, ours (--conf after the script) over spark-submit's."""
    submit_conf = ["spark.default.parallelism=3", "spark.sql.shuffle.partitions=3"]
    got = probe_settings(tmp_path, submit_conf, ["spark.sql.shuffle.partitions=5"])
    # spark-submit's workers keep pyspark's daemon (they may get udfs only from --py-files)
    assert got == {
        "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",  # the profile's
        "spark.default.parallelism": "3",  # spark-submit's over the profile's 8
        "spark.sql.shuffle.partitions": "5",  # ours over spark-submit's 3 and the profile's 8
        "spark.python.daemon.module": None,
    }


def rmqstore_rebuild(out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "jobs.cli", "rebuild", "--store", str(EXPIRED), "--out", str(out)]
    cmd += ["--broker-config", str(BROKER_CONF), "--master", "local[1]", *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=JOB_TIMEOUT)


@needs_sample
def test_console_is_quiet_and_verbose_brings_spark_back(tmp_path):
    quiet = rmqstore_rebuild(tmp_path / "quiet")
    assert quiet.returncode == 0, failed(quiet)
    assert EXPIRED_SUMMARY in quiet.stdout
    lines = quiet.stderr.splitlines()
    assert [line for line in lines if line.startswith("broker rules ")] != []  # the rules used, said once
    noise = [line for line in lines if not line.startswith(("  parse: ", "broker rules "))]
    assert noise == []
    verbose = rmqstore_rebuild(tmp_path / "verbose", "--verbose")
    assert verbose.returncode == 0, failed(verbose)
    for text in ("WARNING: Using incubator modules", "WARN NativeCodeLoader", "Using Spark's default log4j profile"):
        assert text in verbose.stderr


def test_layers_fill_only_the_keys_nobody_set(tmp_path, monkeypatch):
    from jobs.runtime.session import DEFAULTS, layered_settings, parse_overrides, read_properties, submitted_settings

    (tmp_path / "spark-defaults.conf").write_text("# site\nspark.sql.shuffle.partitions 6\nspark.executor.cores=3\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    submitted = submitted_settings()  # not under spark-submit: SPARK_CONF_DIR's spark-defaults.conf
    assert submitted == {"spark.sql.shuffle.partitions": "6", "spark.executor.cores": "3"}
    ours = parse_overrides(["spark.executor.cores=1", "spark.app.name=a=b"])
    got = layered_settings("local", submitted, ours)
    local = read_properties(ROOT / "conf" / "local.conf")
    assert got["spark.sql.shuffle.partitions"] == "6" != local["spark.sql.shuffle.partitions"]
    assert got["spark.executor.cores"] == "1" and got["spark.app.name"] == "a=b"
    assert got["spark.default.parallelism"] == local["spark.default.parallelism"]
    assert got["spark.master"] == DEFAULTS["spark.master"]


def test_a_conf_without_equals_is_a_settings_error():
    from jobs.runtime.session import parse_overrides
    from storelib.errors import ConfigError

    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_overrides(["spark.sql.shuffle.partitions"])
