"""Writable copies of fixture stores, and a stand-in for a running broker (audit and recover tests)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

HOLD_LOCK = (
    "import fcntl,sys,time; f=open(sys.argv[1],'r+'); fcntl.lockf(f, fcntl.LOCK_EX); print('locked', flush=True); "
    "time.sleep(600)"
)


def copy_store(src: Path, dst: Path, without: tuple[str, ...] = ()) -> Path:
    """A writable copy of a (read-only) fixture store, without its DAMAGE.md and the ``without`` names."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("DAMAGE.md", *without))
    for p in [dst, *dst.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def hold_lock(store: Path) -> subprocess.Popen:
    """Another process holding the store's lock (lockf, as the broker's FileChannel.tryLock); kill it when done."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(store / "lock")], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def tree_digest(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative path -> digest), leaving out the ``skip`` trees."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not any(p == s or s in p.parents for s in skip):
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run_cli(argv: list[str]) -> int:
    """``rmqstore ARGV`` in this process, without ``jobs.cli.main``'s stopping of the shared Spark session."""
    import importlib

    from jobs.cli import parser

    args = parser().parse_args(argv)
    return importlib.import_module(f"jobs.{args.verb}").run(args)


def rmqstore_main(argv: list[str]) -> int:
    """``rmqstore ARGV`` through ``jobs.cli.main`` (its error lines and exit codes), in this process, without its
    stopping of the shared Spark session (as a verb run by another verb)."""
    from jobs import cli

    cli._depth += 1
    try:
        return cli.main(argv)
    finally:
        cli._depth -= 1
