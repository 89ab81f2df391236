"""udfs.daemon: local runs' Python workers start without Spark's archives on sys.path, with the kernel loaded."""

from __future__ import annotations

import io
import os
import socket
import sys
from pathlib import Path

import pyspark

from udfs.daemon import QuickAckReader, drop_archives, quick_acks

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
        yield spark_archives, "storelib.formats.kernel" in sys.modules, gc.get_freeze_count() > 0

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


def test_a_quick_ack_reader_reads_what_the_worker_s_reader_holds_then_the_socket() -> None:
    """Bytes the worker's own buffered reader already took come first, then the socket's, in order; the reads leave
    the socket acknowledging at once, where a back-and-forth had made Linux delay its acknowledgements."""
    server = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    with server, sender, conn, os.fdopen(os.dup(conn.fileno()), "rb", 65536) as infile:
        for _ in range(2):  # a task's result, the next task's command: Linux now delays acknowledgements
            conn.sendall(b"r")
            sender.recv(1)
            sender.sendall(b"c")
            assert infile.read(1) == b"c"
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 0
        sender.sendall(b"held" + b"x" * 1000)
        assert infile.read(4) == b"held"  # the rest now sits in infile's buffer
        with io.BufferedReader(QuickAckReader(infile)) as reader:
            sender.sendall(b"y" * 70_000)
            assert reader.read(71_000) == b"x" * 1000 + b"y" * 70_000
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 1


def test_quick_acks_hands_pyspark_s_main_the_reader() -> None:
    seen = []
    left, right = socket.socketpair()  # not TCP: the acknowledgement is left as it is
    with left, right, os.fdopen(os.dup(right.fileno()), "rb") as infile:
        left.sendall(b"command")
        quick_acks(lambda i, o: seen.append((i.read(7), o)))(infile, "out")
    assert seen == [(b"command", "out")]


def test_the_session_s_workers_acknowledge_their_reads_at_once(spark) -> None:
    def main_of_worker(_: object) -> object:
        import pyspark.daemon

        yield pyspark.daemon.worker_main.__qualname__

    assert spark.sparkContext.parallelize([0], 1).mapPartitions(main_of_worker).collect() == [
        "quick_acks.<locals>.main"
    ]
