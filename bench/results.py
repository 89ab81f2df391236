"""One result file per ``make bench`` run: ``bench/results/<UTC time>.json``, the machine it ran on and every
measurement, so that a figure quoted anywhere names the file it comes from (docs/performance.md)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from statistics import median

from bench.ratios import TARGETS, Measured, marginal_rate, ratios

RESULTS = Path(__file__).resolve().parent / "results"
FORMAT = "rmqstore-bench/1"


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def load_average() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def machine() -> dict[str, object]:
    """CPU model, cores, memory, load averages and the versions of what ran: what a figure was measured on."""
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    return {
        "cpu": next((x.split(":", 1)[1].strip() for x in cpuinfo if x.startswith("model name")), "?"),
        "cores": os.cpu_count(),
        "memory_gib": round(next((int(x.split()[1]) for x in meminfo if x.startswith("MemTotal")), 0) / (1 << 20), 1),
        "load_average": load_average(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "java": _java_version(),
        "packages": {name: _version(name) for name in ("pyspark", "pyarrow", "numpy", "numba")},
        "git": _git(),
    }


def _java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr
    except OSError:
        return "none"
    return out.splitlines()[0] if out else "?"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "none"


def _git() -> dict[str, object]:
    """The commit measured and whether the work tree held changes beside it."""
    root = str(RESULTS.parent.parent)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, check=False).stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "clean": git("status", "--porcelain", "--untracked-files=no") == ""}


def broker_record(m: Measured, version: str, record_size: int) -> dict[str, object]:
    """The broker comparison: every round's seconds, the ratios from their medians, the targets."""
    r = ratios(m)
    return {
        "broker_version": version,
        "record_size": record_size,
        "rounds": dataclasses.asdict(m),
        "marginal_msgs_per_s": {
            "broker": marginal_rate(m.messages, (median(m.broker[0]), median(m.broker[1]))),
            "ours": marginal_rate(m.messages, (median(m.ours[0]), median(m.ours[1]))),
        },
        "ratios": r,
        "targets": TARGETS,
        "byte_equal": [not d for d in m.differing],
    }


def write(directory: Path, record: dict[str, object]) -> Path:
    """``directory/<UTC time>.json``: the run's record, with its format and the command line."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"{stamp}.json"
    path.write_text(json.dumps({"format": FORMAT, "argv": sys.argv[1:], **record}, indent=2) + "\n")
    return path
