"""A process the harness starts dies with the test process that started it, even when that one is killed -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STARTER = """
import sys, time
from pathlib import Path
from tests.broker.harness import start
proc = start(["sleep", "120"], Path(sys.argv[1]) / "sleep.log", Path(sys.argv[1]))
print(proc.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, waiting for its reaper


def test_a_started_process_dies_when_its_starter_is_killed(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path)], cwd=root, stdout=subprocess.PIPE)
    child = int(starter.stdout.readline())
    assert _alive(child)
    os.kill(starter.pid, signal.SIGKILL)  # no finally, no atexit
    starter.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)
