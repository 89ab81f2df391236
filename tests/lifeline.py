"""Processes the suite starts (brokers, name servers, the Spark cluster, the S3 server) die with the test process
that started them, however it ends: a time limit's kill, Ctrl-C or a crash, where no `finally` or atexit runs."""

from __future__ import annotations

import ctypes
import signal

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>: the signal the kernel sends a process when its parent thread exits
_LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent() -> None:
    """For Popen's preexec_fn: the child gets SIGKILL when the thread that started it exits (it keeps it across
    exec). Every starter of a long-lived process in the suite starts it from the test's main thread."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
