"""Where the class-data sharing archive of the local driver JVM is, and the option that maps it (jobs/runtime/cds.py
makes it; jobs/runtime/session.py adds the option).

The archive is cached under ``~/.cache/rmq-store-rebuild/cds`` by a key of what it is valid for: the java binary (its
real path, size and mtime: the JDK release) and the driver's classpath (pyspark's jars/ directory, its path and its
jars' names, sizes and mtimes, which the JVM checks). A JVM whose classpath does not match an archive ignores it, with
a warning; ``-Xshare:auto`` (the default) only ever falls back to loading classes the normal way. Each archive names
its jars directory in a ``.jars`` file beside it: making one removes those no JVM can use again (``prune``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
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
