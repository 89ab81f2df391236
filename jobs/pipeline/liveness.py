"""Is a broker using this store? The ``lock`` file and the processes that reference the store.

A running broker holds an exclusive lock on ``<store>/lock`` (``FileChannel.tryLock``: a POSIX
record lock on Linux) and keeps ``abort`` until a clean shutdown. Only local stores can be
checked; recover refuses any other.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from storelib.layout import LOCK, is_local


def local_path(store: str) -> Path:
    return Path(store[len("file://") :] if store.startswith("file://") else store).resolve()


def lock_held(store: str) -> bool:
    """True when another process holds a POSIX (``lockf``) or BSD (``flock``) lock on ``lock``.

    Takes a shared lock without waiting and releases it at once; never writes. Always False
    for a store that is not on the local filesystem or has no lock file.
    """
    if not is_local(store):
        return False
    try:
        fd = os.open(local_path(store) / LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        for take, release in (
            (lambda: fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB), lambda: fcntl.lockf(fd, fcntl.LOCK_UN)),
            (lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB), lambda: fcntl.flock(fd, fcntl.LOCK_UN)),
        ):
            try:
                take()
            except OSError:
                return True
            release()
        return False
    finally:
        os.close(fd)


def broker_processes(store: str) -> list[str]:
    """``pid: command`` of Java processes whose working directory or command line references the store."""
    root = str(local_path(store))
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if "java" not in cmdline.split(" ", 1)[0]:
            continue
        if root in cmdline or cwd == root or cwd.startswith(root + "/"):
            out.append(f"{proc.name}: {cmdline[:200]}")
    return out
