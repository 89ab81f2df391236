"""The Python worker daemon of rmqstore's local runs (``spark.python.daemon.module``, jobs/runtime/session.py):
pyspark's own, started light and warm.

- Spark puts pyspark.zip, py4j's zip and the spark-core jar on the workers' PYTHONPATH, and pyspark's worker
  calls ``importlib.invalidate_caches()`` at every task, which in Python 3.11 re-reads the directory of every
  archive imported from (5,261 entries in the spark-core jar, 1,220 in pyspark.zip, one read per package).
  When pyspark and py4j import without them (a pip install), the archives are
  left off sys.path, and their importers out of sys.path_importer_cache (``python -m`` made them while it
  looked for this module), before pyspark is first imported.
- pandas (which pyarrow imports in every worker), the executor modules and the compiled kernel (numba, numpy)
  are loaded once here, before the daemon forks a worker per task slot.
- What is loaded then is frozen out of the garbage collector (``gc.freeze``): a reused worker runs
  ``gc.collect()`` after every task, which otherwise walks (and so copies, page by page, from the daemon)
  every object of numba and pandas.
- Big arrays come from the heap and their pages are kept for the next ones (``keep_heap``).
- A worker acknowledges at once what it reads from its socket (``QuickAckReader``).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib.machinery
import io
import os
import socket
import sys
import traceback
from collections.abc import Callable
from typing import Any, BinaryIO

ARCHIVES = (".zip", ".jar")
#: mallopt's parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: blocks up to this size come from the heap; a worker gives back its free heap beyond this
HEAP_BLOCK, HEAP_KEPT = 1 << 30, 1 << 30


def drop_archives(path: list[str]) -> list[str]:
    """``path`` without its archives, when pyspark and py4j are found without them; else ``path`` unchanged."""
    plain = [p for p in path if not p.endswith(ARCHIVES)]
    found = all(importlib.machinery.PathFinder.find_spec(name, plain) for name in ("pyspark", "py4j"))
    return plain if found else path


def preload() -> None:
    """Import what the tasks use and load the kernel (a failure is left for the task to report): pandas, which
    pyarrow imports at a task's first array made from Python values, and the executor modules, which each
    worker's first task would import again."""
    try:
        import pandas  # noqa: F401

        import udfs.audit_tasks
        import udfs.parse
        import udfs.write  # noqa: F401
        from storelib.formats import kernel

        kernel.warm_up()
    except Exception:
        traceback.print_exc()


def keep_heap() -> None:
    """glibc maps each block above 32 MB (a numpy array of 4M int64) anew and unmaps it when freed, so a task's
    every big temporary is faulted in and zeroed page by page (an IndexFile range task of 6M entries: 2.3 GB of
    fresh pages). From the heap, the freed blocks serve the next ones, and a reused worker keeps up to
    ``HEAP_KEPT`` of free heap for its next task. Not glibc (no mallopt): left as it is."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, HEAP_BLOCK)
    mallopt(M_TRIM_THRESHOLD, HEAP_KEPT)


class QuickAckReader(io.RawIOBase):
    """A worker's reads from its socket, each acknowledged at once (TCP_QUICKACK).

    The JVM writes a task's command and then its input, two writes; Nagle's algorithm holds the second until the
    first is acknowledged, and Linux delays that acknowledgement (delayed ACK) when the reader sends nothing back,
    so every task would wait for its input. Reads go through the
    worker's own buffered reader (``read1``), so nothing it already holds is skipped."""

    def __init__(self, infile: BinaryIO) -> None:
        super().__init__()
        self._in = infile
        self._sock = socket.socket(fileno=os.dup(infile.fileno()))

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._in.read1(len(buffer))  # type: ignore[attr-defined]  # a buffered socket file has read1
        buffer[: len(data)] = data
        with contextlib.suppress(OSError):  # not a TCP socket: nothing delays its acknowledgements
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        return len(data)

    def close(self) -> None:
        self._sock.close()
        super().close()


def quick_acks(worker_main: Callable[[BinaryIO, BinaryIO], Any]) -> Callable[[BinaryIO, BinaryIO], Any]:
    """pyspark's ``worker_main(infile, outfile)`` reading through a QuickAckReader; unchanged where the system has
    no TCP_QUICKACK (Linux only)."""
    if not hasattr(socket, "TCP_QUICKACK"):
        return worker_main

    def main(infile: BinaryIO, outfile: BinaryIO) -> Any:
        with io.BufferedReader(QuickAckReader(infile)) as reader:
            return worker_main(reader, outfile)

    return main


def leave_archives_out() -> None:
    """sys.path without the archives (``drop_archives``), and no importer of theirs left cached."""
    kept = drop_archives(sys.path)
    for p in set(sys.path) - set(kept):
        sys.path_importer_cache.pop(p, None)
    sys.path[:] = kept


if __name__ == "__main__":
    leave_archives_out()
    preload()
    keep_heap()
    gc.freeze()
    import pyspark.daemon

    pyspark.daemon.worker_main = quick_acks(pyspark.daemon.worker_main)
    pyspark.daemon.manager()
