"""A class-data sharing archive of the local driver JVM: made once per machine by ``make base``, used by sessions
of a local master when present (jobs/runtime/session.py), so the driver maps Spark's classes, already parsed and
verified, instead of loading them from ~250 jars at every start.

The archive is a JDK dynamic archive (``-XX:ArchiveClassesAtExit``) of one ``rmqstore rebuild`` of a small
generated store: the classes a rebuild loads. It is cached under ``~/.cache/rmq-store-rebuild/cds`` by a key of
what it is valid for: the java binary (its real path, size and mtime: the JDK release) and the driver's classpath
(pyspark's jars/ directory, its path and its jars' names, sizes and mtimes, which the JVM checks). A JVM whose
classpath does not match an archive ignores it, with a warning; ``-Xshare:auto`` (the default) only ever falls back
to loading classes the normal way. Each archive names its jars directory in a ``.jars`` file beside it: making one
removes those no JVM can use again (``prune``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CACHE = Path(os.environ.get("RMQSTORE_CDS_CACHE", "~/.cache/rmq-store-rebuild/cds")).expanduser()
#: JVM options by which a user already chose how the driver shares classes: then no archive is added
USER_CDS_OPTIONS = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare", "DumpLoadedClassList")


def java_binary() -> Path | None:
    """The java spark-submit starts: $JAVA_HOME/bin/java, else java on PATH."""
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"]) / "bin" / "java"
    found = shutil.which("java")
    return Path(found) if found else None


def driver_archive() -> Path | None:
    """Where the archive for this java and this pyspark's jars is (or would be); None without java."""
    java = java_binary()
    if java is None or not java.exists():
        return None
    jars = classpath_jars()
    stat = java.resolve().stat()
    key = [str(java.resolve()), str(stat.st_size), str(stat.st_mtime_ns), str(jars), *_jar_stamps(jars)]
    return CACHE / f"driver-{hashlib.sha256(chr(0).join(key).encode()).hexdigest()[:16]}.jsa"


def classpath_jars() -> Path:
    """The driver's classpath: pyspark's jars/ directory."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def prune(keep: Path) -> list[Path]:
    """Remove the archives other than ``keep`` that no JVM can use again, and say which: those of ``keep``'s jars
    directory (a virtualenv made again at the same path: its jars' mtimes changed) and those of a jars directory
    that is gone (a removed checkout). An archive whose ``.jars`` file is missing is left alone."""
    jars = keep.with_suffix(".jars").read_text()
    removed = []
    for other in sorted(keep.parent.glob("driver-*.jsa")):
        named = other.with_suffix(".jars")
        if other == keep or not named.is_file():
            continue
        of = named.read_text()
        if of == jars or not Path(of).is_dir():
            other.unlink(missing_ok=True)
            named.unlink(missing_ok=True)
            removed.append(other)
    return removed


def _jar_stamps(jars: Path) -> list[str]:
    """Each jar's name, size and mtime: the JVM refuses an archive whose classpath jars changed in either (a
    virtualenv made again at the same path), printing a warning at every start."""
    stamps = []
    for name in sorted(os.listdir(jars)):
        stat = (jars / name).stat()
        stamps.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
    return stamps


def archive_option(java_options: str) -> str:
    """``-XX:SharedArchiveFile=<archive>`` when the archive exists and the user's JVM options choose nothing about
    class sharing, else ''."""
    if any(option in java_options for option in USER_CDS_OPTIONS):
        return ""
    archive = driver_archive()
    return f"-XX:SharedArchiveFile={archive}" if archive is not None and archive.is_file() else ""


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
