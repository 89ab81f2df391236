"""udfs.daemon: local runs' Python workers start without Spark's archives on sys.path, with the kernel loaded."""

from __future__ import annotations

import sys
from pathlib import Path

import pyspark

from udfs.daemon import drop_archives

PYSPARK_ZIP = str(Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip")


def test_archives_are_dropped_when_pyspark_and_py4j_import_without_them() -> None:
    path = [PYSPARK_ZIP, "/x/py4j-0.10.9.9-src.zip", "/x/spark-core_2.13-4.0.1.jar", *sys.path]
    assert drop_archives(path) == [p for p in sys.path if not p.endswith((".zip", ".jar"))]


def test_archives_stay_when_pyspark_comes_only_from_them(tmp_path: Path) -> None:
    path = [PYSPARK_ZIP, str(tmp_path)]  # no site-packages: pyspark.zip is where pyspark comes from
    assert drop_archives(path) == path


def test_the_session_s_workers_run_the_daemon_without_archives(spark) -> None:
    def look(_: object) -> object:
        import sys

        yield [p for p in sys.path if p.endswith((".zip", ".jar"))], "storelib.kernel" in sys.modules

    assert spark.conf.get("spark.python.daemon.module") == "udfs.daemon"
    assert spark.sparkContext.parallelize([0], 1).mapPartitions(look).collect() == [([], True)]
