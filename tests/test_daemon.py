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
        import gc
        import sys

        paths = [*sys.path, *sys.path_importer_cache]
        spark_archives = [p for p in paths if p.endswith((".zip", ".jar")) and ("spark" in p or "py4j" in p)]
        yield spark_archives, "storelib.kernel" in sys.modules, gc.get_freeze_count() > 0

    assert spark.conf.get("spark.python.daemon.module") == "udfs.daemon"
    assert spark.sparkContext.parallelize([0], 1).mapPartitions(look).collect() == [([], True, True)]


def test_rdd_and_arrow_workers_are_forked_by_one_daemon(spark) -> None:
    def daemon_of_rdd_worker(_: object) -> object:
        import os

        yield os.getppid()

    def daemon_of_arrow_worker(batches: object) -> object:
        import os

        import pyarrow as pa

        for _ in batches:
            yield pa.RecordBatch.from_pydict({"pid": [os.getppid()]})

    rdd = spark.sparkContext.parallelize([0], 1).mapPartitions(daemon_of_rdd_worker).collect()
    arrow = [r.pid for r in spark.range(1, numPartitions=1).mapInArrow(daemon_of_arrow_worker, "pid long").collect()]
    assert rdd == arrow


def test_the_workers_numpy_does_not_ask_for_huge_pages(spark) -> None:
    """conf/local.conf: NUMPY_MADVISE_HUGEPAGE=0 for the executors (the IndexFile task's arrays fault in faster)."""

    def asks(_: object) -> object:
        from numpy._core.multiarray import _get_madvise_hugepage

        yield _get_madvise_hugepage()

    assert spark.sparkContext.parallelize([0], 1).mapPartitions(asks).collect() == [False]


def test_a_worker_s_big_arrays_reuse_the_heap(spark) -> None:
    """udfs.daemon.keep_heap: a 48 MB array freed, the next one takes its pages (no page faulted in again)."""

    def faults(_: object) -> object:
        import resource

        import numpy as np

        np.ones(6_000_000, np.int64).sum()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        np.ones(6_000_000, np.int64).sum()
        yield resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    (faulted,) = spark.sparkContext.parallelize([0], 1).mapPartitions(faults).collect()
    assert faulted < 1_000  # 11,719 pages when mapped anew
