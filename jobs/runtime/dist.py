"""``make dist`` (``python -m jobs.runtime.dist``): one package that runs the jobs on a cluster whose nodes have only
Spark.

dist/ gets the project's wheel; ``rmqstore-env.tar.gz``, a venv-pack archive of a virtualenv holding the wheel and
every package the executors (and a driver in cluster mode) import: numba, pyarrow, numpy, pandas, rocksdict,
deltalake; not pyspark, which the cluster's Spark puts on its Python workers' path; ``jars/``, the pinned Delta and
S3A jars (conf/jars/jars.lock); and ``submit.txt``, the spark-submit lines for YARN and Kubernetes, also printed.

venv-pack, not conda-pack: the project's environment is a plain virtualenv of ``python3`` (nothing here needs conda),
and venv-pack packs one. It does not carry the interpreter: ``env/bin/python`` links to the Python that built it
(``--python``), so the nodes need that Python, same version, same path (build with the one the nodes' image has).

The environment of pinned dependencies is made once per Python and pin list, under ``~/.cache/rmq-store-rebuild/dist``
(``RMQSTORE_DIST_CACHE``); a build installs its wheel into it and packs it (gzip level 1, the quickest to pack: its
archive, 257 MB, is little bigger than level 4's 236 MB).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from jobs.runtime.jars import DELTA_SETTINGS, fetch

ROOT = Path(__file__).resolve().parents[2]
SPARK_PROVIDED = ("pyspark",)  # the cluster's Spark brings it; delta-spark (Python) only needs it at import time
ARCHIVE = "rmqstore-env.tar.gz"
ENV_CACHE = Path(os.environ.get("RMQSTORE_DIST_CACHE", "~/.cache/rmq-store-rebuild/dist")).expanduser()
EXAMPLE = "--store hdfs:///backups/broker-a --report hdfs:///audits/broker-a --broker-config broker.conf"


def requirements() -> tuple[list[str], list[str]]:
    """pyproject.toml's dependencies: (installed with theirs, installed alone because they need a SPARK_PROVIDED)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d: re.split(r"[\s=<>!~\[;]", d, maxsplit=1)[0] for d in deps}
    alone = [d for d in deps if names[d] == "delta-spark"]
    return [d for d in deps if names[d] not in SPARK_PROVIDED and d not in alone], alone


def run(*cmd: str | Path) -> None:
    """One build command; its output goes to the console (``make dist`` keeps it in build/logs/dist.log)."""
    print("$ " + " ".join(map(str, cmd)), flush=True)
    subprocess.run([str(c) for c in cmd], check=True)


def build(dist: Path, python: str) -> Path:
    """The wheel, the packed environment and the jars in ``dist``; the archive's path."""
    dist.mkdir(parents=True, exist_ok=True)
    for old in dist.glob("*.whl"):
        old.unlink()
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", dist, ROOT)
    (wheel,) = dist.glob("*.whl")
    with_deps, alone = requirements()
    env = dependencies_env(python, with_deps)
    run(env / "bin" / "python", "-m", "pip", "install", "--no-deps", "--force-reinstall", wheel, *alone)
    archive = dist / ARCHIVE
    run(Path(sys.executable).parent / "venv-pack", "-p", env, "-o", archive, "--force", "--compress-level", "1")
    shutil.rmtree(dist / "jars", ignore_errors=True)
    (dist / "jars").mkdir()
    for jar in fetch():
        shutil.copy2(jar, dist / "jars" / jar.name)
    return archive


def dependencies_env(python: str, with_deps: list[str]) -> Path:
    """A virtualenv of ``python`` with the pinned dependencies, made once per Python and pin list under ENV_CACHE
    (installing them is most of a build); each build installs the new wheel into it, over the last one."""
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True)
    key = "\0".join([shutil.which(python) or python, version.stdout, *with_deps])
    env = ENV_CACHE / f"env-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    if (env / ".complete").is_file():
        return env
    shutil.rmtree(env, ignore_errors=True)
    run(python, "-m", "venv", env)
    run(env / "bin" / "python", "-m", "pip", "install", *with_deps)
    (env / ".complete").touch()
    return env


def submit_lines(dist: Path) -> list[str]:
    """spark-submit for YARN (client mode: the driver runs here, in this Python, which spark.pyspark.driver.python
    must name, or it would be spark.pyspark.python's ./env/bin/python) and Kubernetes (cluster mode: the driver runs
    in a pod and gets the archive too), each with the archive as ./env, its Python, and the jars."""
    jars = ",".join(str(p) for p in sorted((dist / "jars").glob("*.jar")))
    common = [f"--archives {dist / ARCHIVE}#env", "--conf spark.pyspark.python=./env/bin/python"]
    common += [f"--jars {jars}", *(f"--conf {k}={v}" for k, v in DELTA_SETTINGS.items())]
    driver = f"--conf spark.pyspark.driver.python={Path(sys.prefix) / 'bin' / 'python'}"  # else ./env/bin/python
    yarn = ["spark-submit --master yarn --deploy-mode client", *common, driver, f"jobs/audit.py {EXAMPLE}"]
    k8s = [
        "spark-submit --master k8s://https://K8S_API:443 --deploy-mode cluster",
        "--conf spark.kubernetes.container.image=SPARK_4_IMAGE_WITH_THE_SAME_PYTHON",
        "--conf spark.kubernetes.file.upload.path=s3a://BUCKET/spark-uploads",
        *common,
        "--conf spark.pyspark.driver.python=./env/bin/python",
        f"jobs/audit.py {EXAMPLE}",
    ]
    return [
        "# YARN (client mode: the driver runs here, with this checkout's Python)",
        " \\\n    ".join(yarn),
        "# Kubernetes (cluster mode; the driver runs in a pod from the same archive)",
        " \\\n    ".join(k8s),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.runtime.dist", description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="dist", help="where the package goes (default: dist)")
    p.add_argument("--python", default="python3", help="the Python the nodes run, 3.11+ (default: python3)")
    p.add_argument("--print-only", action="store_true", help="print the spark-submit lines of an existing dist")
    args = p.parse_args(argv)
    dist = Path(args.dir).resolve()
    if not args.print_only:
        build(dist, args.python)
    lines = submit_lines(dist)
    (dist / "submit.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
