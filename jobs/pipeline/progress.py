"""Progress on the console while a long Spark stage runs (from Spark's status tracker)."""

from __future__ import annotations

import sys
import threading
import time
import uuid
from typing import Any


class Progress:
    """Prints ``label: done/total tasks, MB, seconds`` every few seconds while the stage with ``total`` tasks runs."""

    def __init__(self, run: Any, total_tasks: int, total_bytes: int, label: str = "parse", every: float = 2.0) -> None:
        self.enabled = run.progress
        self.spark = run.spark
        self.total, self.bytes, self.label, self.every = total_tasks, total_bytes, label, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Progress:
        if self.enabled:
            self.group = f"rmqstore-{uuid.uuid4().hex[:8]}"
            self.spark.sparkContext.setJobGroup(self.group, f"rmqstore {self.label}")
            self.t0 = time.monotonic()
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()

    def _run(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        last, ticks = -1, 0
        while not self._stop.wait(self.every):
            done = 0
            for job in tracker.getJobIdsForGroup(self.group):
                info = tracker.getJobInfo(job)
                for stage in info.stageIds if info else []:
                    s = tracker.getStageInfo(stage)
                    if s and s.numTasks == self.total:
                        done = max(done, s.numCompletedTasks)
            ticks = 0 if done != last else ticks + 1
            last = done
            if ticks % 5:  # unchanged: say so every 5th tick only
                continue
            mb = f", {self.bytes * done / max(1, self.total) / 1e6:,.0f} MB" if self.bytes else ""
            line = f"  {self.label}: {done}/{self.total} tasks{mb}, {time.monotonic() - self.t0:.0f} s\n"
            sys.stderr.write(line)  # one write: the lines of stages running at once never interleave
            sys.stderr.flush()
