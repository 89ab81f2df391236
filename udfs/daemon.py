"""The Python worker daemon of rmqstore's local runs (``spark.python.daemon.module``, jobs/runtime/session.py):
pyspark's own, started light and warm.

- Spark puts pyspark.zip, py4j's zip and the spark-core jar on the workers' PYTHONPATH, and pyspark's worker
  calls ``importlib.invalidate_caches()`` at every task, which in Python 3.11 re-reads the directory of every
  archive imported from (5,261 entries in the spark-core jar, 1,220 in pyspark.zip, one read per package):
  about 0.3 s of CPU per task. When pyspark and py4j import without them (a pip install), the archives are
  left off sys.path, and their importers out of sys.path_importer_cache (``python -m`` made them while it
  looked for this module), before pyspark is first imported.
- pandas (which pyspark's Arrow serializers import in every worker) and the compiled kernel (numba, numpy)
  are loaded once here, before the daemon forks a worker per task slot.
- What is loaded then is frozen out of the garbage collector (``gc.freeze``): a reused worker runs
  ``gc.collect()`` after every task, which otherwise walked (and so copied, page by page, from the daemon)
  every object of numba and pandas: ~0.45 s per task.
"""

from __future__ import annotations

import gc
import importlib.machinery
import sys
import traceback

ARCHIVES = (".zip", ".jar")


def drop_archives(path: list[str]) -> list[str]:
    """``path`` without its archives, when pyspark and py4j are found without them; else ``path`` unchanged."""
    plain = [p for p in path if not p.endswith(ARCHIVES)]
    found = all(importlib.machinery.PathFinder.find_spec(name, plain) for name in ("pyspark", "py4j"))
    return plain if found else path


def preload() -> None:
    """Import what the tasks use and load the kernel (a failure is left for the task to report)."""
    try:
        import pandas  # noqa: F401  (pyspark's Arrow serializers import it in every worker)

        from storelib import kernel

        kernel.warm_up()
    except Exception:
        traceback.print_exc()


def leave_archives_out() -> None:
    """sys.path without the archives (``drop_archives``), and no importer of theirs left cached."""
    kept = drop_archives(sys.path)
    for p in set(sys.path) - set(kept):
        sys.path_importer_cache.pop(p, None)
    sys.path[:] = kept


if __name__ == "__main__":
    leave_archives_out()
    preload()
    gc.freeze()
    from pyspark.daemon import manager

    manager()
