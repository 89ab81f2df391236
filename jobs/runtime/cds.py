"""A class-data sharing archive of the local driver JVM: made once per machine by ``make base`` (``python -m
jobs.runtime.cds``), used by sessions of a local master when present (jobs/runtime/session.py), so the driver maps
Spark's classes, already parsed and verified, instead of loading them from ~250 jars at every start.

The archive is a JDK dynamic archive (``-XX:ArchiveClassesAtExit``) of one ``rmqstore rebuild`` of a small
generated store: the classes a rebuild loads. Where it is kept and when it is used: jobs/runtime/cds_archive.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from jobs.runtime.cds_archive import classpath_jars, driver_archive, prune


def make_archive(archive: Path) -> None:
    """Dump the archive from one rebuild of a small generated store, in a session of this process whose driver JVM
    is then let go and waited for (it writes the archive as it exits); written by rename: a half-made archive is
    never used."""
    from pyspark import SparkContext

    from jobs.pipeline.context import Run
    from jobs.pipeline.rebuild_flow import rebuild
    from jobs.runtime.session import spark_session
    from storelib.broker.config import load_broker_config

    archive.parent.mkdir(parents=True, exist_ok=True)
    cli = str(Path(sys.executable).with_name("rmqstore"))
    with tempfile.TemporaryDirectory(prefix="rmqstore-cds-") as tmp:
        store, conf, dump = Path(tmp) / "store", Path(tmp) / "broker.conf", Path(tmp) / "driver.jsa"
        generate = [cli, "generate", "--out", str(store), "--messages", "2000", "--write-broker-config", str(conf)]
        subprocess.run(generate, check=True)
        option = f"spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit={dump}"
        spark, _ = spark_session("rmqstore-cds", "local[2]", overrides=[option])
        rebuild(Run(spark, load_broker_config(conf)), str(store), str(Path(tmp) / "out"))
        assert SparkContext._gateway is not None  # the session's driver JVM
        jvm = SparkContext._gateway.proc
        spark.stop()
        jvm.stdin.close()  # the driver JVM exits at the end of its standard input
        jvm.wait(timeout=600)
        if not dump.is_file():
            raise SystemExit(f"the driver JVM wrote no archive at {dump} (exit code {jvm.returncode})")
        archive.with_suffix(".jars").write_text(str(classpath_jars()))
        shutil.move(dump, archive.with_suffix(".tmp"))
        archive.with_suffix(".tmp").replace(archive)
    for old in prune(archive):
        print(f"removed a class-data archive no JVM can use again: {old}")


def main() -> int:
    """Make the archive unless it is there (``--check``: only say whether it is, exit 1 when it is not)."""
    archive = driver_archive()
    if archive is None:
        print("Class-data archive of the Spark driver: no java")
    elif archive.is_file():
        print(f"Class-data archive of the Spark driver: present ({archive})")
    elif sys.argv[1:] == ["--check"]:
        return 1
    else:
        make_archive(archive)
        print(f"class-data archive written: {archive} ({archive.stat().st_size >> 20} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
