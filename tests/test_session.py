"""jobs.runtime.session: conf/<profile>.conf read as spark-defaults, and the session built from it."""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from pathlib import Path

import pytest

from jobs.pipeline.context import Run
from jobs.runtime import cds_archive, session
from jobs.runtime.session import LOCAL_JVM_OPTION, local_jvm_options, read_profile, spark_session
from storelib.broker.config import BrokerConfig
from storelib.errors import ConfigError


@pytest.fixture
def conf_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty conf/ directory in place of the project's."""
    monkeypatch.setattr(session, "CONF_DIR", tmp_path)
    return tmp_path


def test_read_profile_takes_key_then_value_and_skips_comments(conf_dir: Path) -> None:
    (conf_dir / "site.conf").write_text(
        "# Spark settings\n"
        "\n"
        "spark.ui.enabled                          false\n"
        "   spark.executor.memory 2g   \n"
        "spark.driver.extraJavaOptions -Dfile.encoding=UTF-8 -Duser.timezone=UTC\n"
        "  # an indented comment\n"
        "spark.sql.shuffle.partitions 8\n"
        "spark.sql.shuffle.partitions 16\n"
    )
    assert read_profile("site") == {
        "spark.ui.enabled": "false",
        "spark.executor.memory": "2g",
        "spark.driver.extraJavaOptions": "-Dfile.encoding=UTF-8 -Duser.timezone=UTC",
        "spark.sql.shuffle.partitions": "16",  # a later line wins
    }


def test_read_profile_accepts_a_tab_between_key_and_value(conf_dir: Path) -> None:
    (conf_dir / "tabs.conf").write_text("spark.executor.cores\t2\n")
    assert read_profile("tabs") == {"spark.executor.cores": "2"}


def test_a_missing_profile_is_a_missing_file(conf_dir: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_profile("nowhere")


@pytest.mark.parametrize("profile", ["local", "cluster"])
def test_the_shipped_profiles_are_spark_settings(profile: str) -> None:
    settings = read_profile(profile)
    assert settings and all(key.startswith("spark.") and value for key, value in settings.items())


def test_the_session_has_the_profile_then_the_overrides(spark) -> None:
    """conftest's session: spark_session("rmqstore-tests", "local[2]", overrides=[partitions=4])."""
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.master") == "local[2]" and conf.get("spark.app.name") == "rmqstore-tests"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"  # local.conf says 8: the override wins
    for key, value in read_profile("local").items():
        if key != "spark.sql.shuffle.partitions":
            assert conf.get(key) == value, key
    again, startup = spark_session("another", master="local[1]")
    assert again is spark and startup == 0.0  # the active session is reused, its settings kept


def test_a_local_driver_jvm_runs_c1_only_unless_the_user_chose_a_tiered_level(spark, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(cds_archive, "CACHE", tmp_path)  # no class-data archive
    assert local_jvm_options({}) == {"spark.driver.extraJavaOptions": LOCAL_JVM_OPTION}
    assert local_jvm_options({"spark.driver.extraJavaOptions": "-Xss4m"}) == {
        "spark.driver.extraJavaOptions": f"-Xss4m {LOCAL_JVM_OPTION}"
    }
    assert local_jvm_options({"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=4"}) == {}
    assert local_jvm_options({"spark.driver.extraJavaOptions": "-XX:ReservedCodeCacheSize=64m"}) == {}
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())  # conftest's local[2] session
    assert all(option in arguments for option in LOCAL_JVM_OPTION.split())


def test_the_class_data_archive_is_added_when_made_unless_the_user_chose_class_sharing(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(cds_archive, "CACHE", tmp_path)
    key = "spark.driver.extraJavaOptions"
    assert local_jvm_options({}) == {key: LOCAL_JVM_OPTION}  # not made yet
    archive = cds_archive.driver_archive()
    archive.write_bytes(b"")
    option = f"-XX:SharedArchiveFile={archive}"
    assert local_jvm_options({}) == {key: f"{LOCAL_JVM_OPTION} {option}"}
    assert local_jvm_options({key: "-XX:TieredStopAtLevel=4"}) == {key: f"-XX:TieredStopAtLevel=4 {option}"}
    for own in ("-Xshare:off", "-XX:SharedArchiveFile=/x.jsa", "-XX:ArchiveClassesAtExit=/x.jsa"):
        assert local_jvm_options({key: own}) == {key: f"{own} {LOCAL_JVM_OPTION}"}
    assert local_jvm_options({key: "-Xshare:off -XX:TieredStopAtLevel=1"}) == {}


def test_the_archive_is_keyed_by_the_java_binary(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(cds_archive, "CACHE", tmp_path)
    ours = cds_archive.driver_archive()
    other = tmp_path / "jdk" / "bin" / "java"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"another java")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert cds_archive.driver_archive() not in (None, ours)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "none"))
    assert cds_archive.driver_archive() is None


def test_the_archive_is_keyed_by_the_classpath_jars_sizes_and_mtimes(monkeypatch, tmp_path) -> None:
    """A virtualenv made again at the same path has the same jar names but new mtimes: the JVM would refuse the
    old archive (with a warning at every start), so it is another key."""
    import pyspark

    jars = tmp_path / "pyspark" / "jars"
    jars.mkdir(parents=True)
    (jars / "spark-core.jar").write_bytes(b"classes")
    monkeypatch.setattr(pyspark, "__file__", str(tmp_path / "pyspark" / "__init__.py"))
    monkeypatch.setattr(cds_archive, "CACHE", tmp_path / "cache")
    first = cds_archive.driver_archive()
    assert cds_archive.driver_archive() == first
    os.utime(jars / "spark-core.jar", ns=(0, 10**18))
    assert cds_archive.driver_archive() not in (None, first)


def test_a_new_archive_removes_those_of_its_jars_and_of_jars_that_are_gone(tmp_path) -> None:
    """An archive of the same jars directory (the virtualenv made again there) or of one that no longer exists (a
    removed checkout) can never be used again; one of another checkout's jars, or without its .jars file, stays."""
    ours, theirs = tmp_path / "venv" / "jars", tmp_path / "other" / "jars"
    ours.mkdir(parents=True)
    theirs.mkdir(parents=True)
    of = {"new": ours, "same": ours, "other": theirs, "gone": tmp_path / "gone" / "jars", "unnamed": None}
    for name, jars in of.items():
        (tmp_path / f"driver-{name}.jsa").write_bytes(b"archive")
        if jars:
            (tmp_path / f"driver-{name}.jars").write_text(str(jars))
    assert cds_archive.prune(tmp_path / "driver-new.jsa") == [
        tmp_path / "driver-gone.jsa",
        tmp_path / "driver-same.jsa",
    ]
    left = sorted(p.name for p in tmp_path.glob("driver-*"))
    assert left == ["driver-new.jars", "driver-new.jsa", "driver-other.jars", "driver-other.jsa", "driver-unnamed.jsa"]


def test_a_run_waits_for_its_session_at_first_use_and_makes_it_active_on_that_thread(spark) -> None:
    """jobs.cli.spark_run: the session starts on a thread of its own; ``Run.spark`` waits for it, keeps its start-up
    seconds and the wait, and makes it the active session of the thread that takes it (the JVM's is per thread)."""
    from pyspark.sql import SparkSession

    starting: concurrent.futures.Future = concurrent.futures.Future()
    run = Run(starting, BrokerConfig())
    calling = threading.Event()
    seen = {}

    def first_use() -> None:
        seen["before"] = SparkSession.getActiveSession()
        calling.set()
        t0 = time.monotonic()
        seen["spark"] = run.spark
        seen["span"] = time.monotonic() - t0
        seen["after"] = SparkSession.getActiveSession()

    worker = threading.Thread(target=first_use)
    worker.start()
    assert calling.wait(10)
    time.sleep(0.3)
    starting.set_result((spark, 1.5))
    worker.join(10)
    span = seen.pop("span")
    assert seen == {"before": None, "spark": spark, "after": spark}
    # the wait is timed inside the call: never more than the call took, never nothing (a loaded machine may
    # start the call late, so no lower bound from the 0.3 s sleep)
    assert run.startup == 1.5 and 0 < run.waited <= span and run.spark is spark


def test_a_bad_conf_is_refused_before_any_session_starts() -> None:
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        session.session_start("bad", overrides=["spark.sql.shuffle.partitions"])
