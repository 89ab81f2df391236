"""The JVM jars a session puts on ``spark.jars`` when its run needs them: Delta 4.0.1 and S3A (hadoop-aws 3.4.1, slim
AWS SDK).

``make jars`` (``python -m jobs.runtime.jars``) fetches them once with Maven (conf/jars/pom.xml; ``mvn -C`` fails on a
jar whose published .sha1 does not match) into ``~/.cache/rmq-store-rebuild/jars`` and checks every jar
against conf/jars/jars.lock (sha1 and sha256). Once cached it only checks the cache: it works offline.
Sessions started by ``jobs.runtime.session`` take from the cache what the run needs (``JarNeeds``: delta-spark and its
extension and catalog for a Delta table Spark writes, S3A for an ``s3a://`` location), unless the user chose jars or
packages: each jar costs the session's start (a local executor fetches every ``spark.jars`` entry at every start).
Under spark-submit the JVM already runs, so pass ``--jars`` (``--submit-args``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "jars"
POM, LOCK = CONF_DIR / "pom.xml", CONF_DIR / "jars.lock"
CACHE = Path(os.environ.get("RMQSTORE_JAR_CACHE", "~/.cache/rmq-store-rebuild/jars")).expanduser()
DELTA_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
#: settings by which a user already chose the session's jars or extensions: then the cache is not added
USER_CHOICES = ("spark.jars", "spark.jars.packages", "spark.sql.extensions")
DELTA_JAR_PREFIX = "delta-"
_LOCK_HEAD = "# sha1 sha256 jar, checked by `make jars`; rewritten by `python -m jobs.runtime.jars --update-lock`"


def read_lock(lock: Path = LOCK) -> dict[str, tuple[str, str]]:
    """jar file name -> (sha1, sha256), from lines ``sha1 sha256 name``."""
    entries = (line.split() for line in lock.read_text().splitlines() if line.strip() and not line.startswith("#"))
    return {name: (sha1, sha256) for sha1, sha256, name in entries}


def digests(path: Path) -> tuple[str, str]:
    """(sha1, sha256) of a file."""
    sha1, sha256 = hashlib.sha1(), hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            sha1.update(chunk)
            sha256.update(chunk)
    return sha1.hexdigest(), sha256.hexdigest()


def mismatches(directory: Path, lock: dict[str, tuple[str, str]]) -> list[str]:
    """What keeps ``directory`` from holding exactly the locked jars: missing, unexpected or altered files."""
    present = {p.name for p in directory.glob("*.jar")} if directory.is_dir() else set()
    problems = [f"missing {n}" for n in sorted(lock.keys() - present)]
    problems += [f"not in the lock: {n}" for n in sorted(present - lock.keys())]
    problems += [f"checksum differs: {n}" for n in sorted(present & lock.keys()) if digests(directory / n) != lock[n]]
    return problems


def fetch(update_lock: bool = False) -> list[Path]:
    """The locked jars in the cache, fetched with Maven when missing or altered; ``update_lock`` rewrites the lock
    from what Maven fetched (after a version change in pom.xml)."""
    lock = {} if update_lock else read_lock()
    if lock and not mismatches(CACHE, lock):
        return cached_jars()
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE.parent, prefix=".jars-") as tmp:
        out = Path(tmp) / "jars"
        mvn = ["mvn", "-B", "-q", "-C", "-Dstyle.color=never", "-f", str(POM), "dependency:copy-dependencies"]
        subprocess.run([*mvn, f"-DoutputDirectory={out}"], check=True, cwd=tmp)
        if update_lock:
            lines = [f"{' '.join(digests(p))} {p.name}" for p in sorted(out.glob("*.jar"))]
            LOCK.write_text("".join(f"{line}\n" for line in [_LOCK_HEAD, *lines]))
            lock = read_lock()
        problems = mismatches(out, lock)
        if problems:
            raise RuntimeError(f"jars fetched by Maven do not match {LOCK}: " + "; ".join(problems))
        shutil.rmtree(CACHE, ignore_errors=True)
        out.rename(CACHE)
    return cached_jars()


def cached_jars() -> list[Path]:
    """The locked jars when all of them are in the cache (names only: ``fetch`` checked their digests), else []."""
    names = sorted(read_lock())
    return [CACHE / n for n in names] if all((CACHE / n).is_file() for n in names) else []


@dataclasses.dataclass(frozen=True)
class JarNeeds:
    """Which cached jars a run's session loads: delta-spark (a Delta table written by Spark: the message catalog)
    and S3A (an ``s3a://`` location)."""

    delta: bool = True
    s3a: bool = True

    @classmethod
    def of(cls, locations: Iterable[object], delta: bool) -> JarNeeds:
        """What a run over ``locations`` (its arguments: a path, a URI, a list of them as ``--stores`` takes; other
        values are ignored) needs."""
        return cls(delta, any(isinstance(v, str) and "s3a://" in v for v in locations))

    def wants(self, jar: Path) -> bool:
        """Delta's jars are named ``delta-*``; every other locked jar is S3A's (hadoop-aws and the AWS SDK)."""
        return self.delta if jar.name.startswith(DELTA_JAR_PREFIX) else self.s3a


ALL_JARS = JarNeeds()


def jar_settings(needs: JarNeeds = ALL_JARS) -> dict[str, str]:
    """``spark.jars`` (the cached jars ``needs`` wants) and, with delta-spark, Delta's session extension and catalog;
    {} when the cache is incomplete or nothing is needed."""
    jars = [j for j in cached_jars() if needs.wants(j)]
    delta = DELTA_SETTINGS if needs.delta else {}
    return {"spark.jars": ",".join(map(str, jars)), **delta} if jars else {}


def jar_defaults(settings: Mapping[str, str], needs: JarNeeds = ALL_JARS) -> dict[str, str]:
    """jar_settings(needs) for a session about to start with ``settings``; {} when the user chose jars, packages or
    extensions, or under spark-submit (its JVM started without them: the jars would not reach the driver)."""
    if "PYSPARK_GATEWAY_PORT" in os.environ or any(k in settings for k in USER_CHOICES):
        return {}
    return jar_settings(needs)


def submit_args() -> list[str]:
    """spark-submit options adding the cached jars and Delta's settings ([] when the cache is incomplete): a
    cluster's run may need any of them."""
    settings = jar_settings()
    if not settings:
        return []
    jars = settings.pop("spark.jars")
    return ["--jars", jars, *(a for k, v in settings.items() for a in ("--conf", f"{k}={v}"))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.runtime.jars", description=__doc__.split("\n")[0])
    p.add_argument("--update-lock", action="store_true", help="fetch per pom.xml and rewrite jars.lock")
    p.add_argument("--submit-args", action="store_true", help="print spark-submit options for the cached jars")
    p.add_argument("--check", action="store_true", help="exit 1 unless the cache holds exactly the locked jars")
    args = p.parse_args(argv)
    if args.check:
        problems = mismatches(CACHE, read_lock())
        print("\n".join(f"jars: {m}" for m in problems) or f"jars: {CACHE} holds the locked jars")
        return 1 if problems else 0
    if args.submit_args:
        print(" ".join(submit_args()))
        return 0
    t0 = time.monotonic()
    try:
        jars = fetch(args.update_lock)
    except (RuntimeError, subprocess.CalledProcessError, FileNotFoundError) as exc:
        print(f"jars: {exc}", file=sys.stderr)
        return 1
    size = sum(j.stat().st_size for j in jars)
    print(f"jars: {len(jars)} jars, {size / 1e6:.1f} MB in {CACHE} ({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
