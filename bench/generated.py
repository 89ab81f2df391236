"""``make bench``'s generated stores: the rebuild's marginal rate, whole processes, against a nearly empty store of
the same shape.

Generates once, under ``--dir`` (outside the repository): 2 GiB of ~700-byte records (512-byte bodies,
one tag, one key + UNIQ_KEY, broker defaults, 1 GiB segments), the same shape nearly empty (one 1 GiB
segment of ~1,600 records), 2 GiB of ~320-byte records (and its nearly empty twin), and a ~14 MB store
of 64 KiB segments (the 4.9.8 sample's shape). In one run it times, each as a new process: a bare Spark
session (start, one trivial job, stop), ``rmqstore rebuild ... --master local[2]`` of every store, the
compiled kernel's cold compile and warm load, and one parse task alone (its peak RSS and its
microseconds per record on one core); plus a raw sequential read of each commitlog. The marginal rate
(n_big - n_small) / (t_big - t_small) takes Spark's start-up and every fixed cost out.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from storelib.broker.config import broker_config_from_properties
from storelib.synthetic.generator import generate_store
from storelib.synthetic.spec import PRESETS

READ_CHUNK = 8 << 20  # the scanner's chunk size too
GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class BenchStore:
    name: str
    preset: str
    segment_size: int
    target_bytes: int | None  # None: ``messages`` records
    messages: int | None = None
    empty_twin: str = ""  # the nearly empty store of the same shape (marginal rate)


STORES = (
    BenchStore("723-empty", "bench-723", GIB, None, 1600),
    BenchStore("723", "bench-723", GIB, 2 * GIB, empty_twin="723-empty"),
    BenchStore("320-empty", "bench-320", GIB, None, 1600),
    BenchStore("320", "bench-320", GIB, 2 * GIB, empty_twin="320-empty"),
    BenchStore("sample", "bench-sample", 64 << 10, 14_000_000),
)


def ensure_store(root: Path, store: BenchStore) -> tuple[Path, Path]:
    """The cached store and its broker.conf, generated when missing or made from other settings (a marker file
    written last says what it was made from)."""
    preset = PRESETS[store.preset]
    broker = {**preset.broker, "mappedFileSizeCommitLog": str(store.segment_size)}
    spec = dataclasses.replace(preset.spec, target_bytes=store.target_bytes, messages=store.messages)
    made_from = {"spec": dataclasses.asdict(spec), "broker": broker}
    path = root / store.name
    conf = root / f"{store.name}.conf"
    marker = path / "GENERATED.json"
    if not marker.is_file() or json.loads(marker.read_text()).get("made_from") != json.loads(json.dumps(made_from)):
        shutil.rmtree(path, ignore_errors=True)
        print(f"generating {path} ({store.preset}, segments of {store.segment_size >> 10} KiB)", flush=True)
        summary = generate_store(path, spec, broker_config_from_properties(broker))
        conf.write_text("".join(f"{k}={v}\n" for k, v in broker.items()))
        marker.write_text(json.dumps({"made_from": made_from, "summary": summary.to_dict()}))
        print(f"  {summary.messages:,} messages, {summary.bytes:,} bytes in {summary.seconds:.0f} s", flush=True)
    return path, conf


def raw_read(path: Path) -> tuple[float, int]:
    """Seconds to read every commitlog segment once, sequentially, in 8 MiB reads."""
    total = 0
    t0 = time.monotonic()
    for seg in sorted((path / "commitlog").iterdir()):
        with open(seg, "rb", buffering=0) as f:
            while chunk := f.read(READ_CHUNK):
                total += len(chunk)
    return time.monotonic() - t0, total


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall seconds of a whole process and its stdout; a failure stops the bench. It starts on a settled machine
    (``settle``), so a process does not pay for the writeback of the files the one before it wrote."""
    settle()
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return seconds, proc.stdout


def settle(quiet: float = 1.0, limit: float = 120.0) -> None:
    """Dirty pages written out (``os.sync``), then until no disk has read, written, discarded or flushed for
    ``quiet`` seconds (/proc/diskstats; at most ``limit``): a deleted store's discards and a killed broker's
    writeback done."""
    os.sync()
    stats = Path("/proc/diskstats")
    if not stats.is_file():
        return
    deadline, before = time.monotonic() + limit, None
    while time.monotonic() < deadline:
        now = [line.split()[3:] for line in stats.read_text().splitlines()]  # reads, writes, discards, flushes
        if now == before:
            return
        before = now
        time.sleep(quiet)


#: plain pyspark with its own defaults (none of jobs/runtime/session.py's: no class-data archive, no C1, no worker
#: daemon)
BARE_SPARK = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[2]").appName("rmqstore-bare").getOrCreate()
spark.range(2).count()
spark.stop()
"""
#: the same through jobs/runtime/session.py (what a rebuild starts with: the archive, C1, the worker daemon)
SESSION_SPARK = """
from jobs.runtime.session import spark_session
spark, _ = spark_session("rmqstore-bare", "local[2]")
spark.range(2).count()
spark.stop()
"""

KERNEL_LOAD = """
import time
t0 = time.monotonic()
from storelib.formats import kernel
t1 = time.monotonic()
kernel.warm_up()
print(t1 - t0, time.monotonic() - t1)
"""

PARSE_TASK = """
import json, sys, tempfile, time
from storelib.broker.config import broker_config_from_properties
from storelib.broker.segments import Segment
from udfs.parse import parse_segment, summary_path
from udfs.daemon import preload
preload()  # what the worker daemon loads before it forks a task's worker: pandas (pyarrow imports it) and the kernel
seg, start, size, conf = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
props = dict(line.split("=", 1) for line in open(conf).read().split())
cfg = broker_config_from_properties(props)
t0 = time.process_time()
with tempfile.TemporaryDirectory() as scratch:
    name = seg.rsplit("/", 1)[1]
    for _ in parse_segment(Segment("file://" + seg, name, start, size), cfg, "dispatch", scratch):
        pass
    row = json.load(open(summary_path(scratch, name)))
print(json.dumps({"cpu_s": time.process_time() - t0, "messages": row["messages"], "peak": row["worker_peak_rss"]}))
"""


def python(code: str, *args: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    return timed([sys.executable, "-c", code, *args], env)


def kernel_times() -> dict[str, float]:
    """Import and compile/load seconds of the kernel: cold (empty numba cache), then warm (a new process)."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        _, cold = python(KERNEL_LOAD, env=env)
        _, warm = python(KERNEL_LOAD, env=env)
    (cold_import, cold_compile), (warm_import, warm_load) = (map(float, out.split()) for out in (cold, warm))
    return {"cold_compile_s": cold_import + cold_compile, "warm_load_s": warm_import + warm_load}


def parse_task(path: Path, conf: Path) -> dict[str, float]:
    """One parse task alone (no Spark) on the store's first segment: CPU µs per record and peak RSS."""
    seg = sorted((path / "commitlog").iterdir())[0]
    size = int(dict(line.split("=", 1) for line in conf.read_text().split())["mappedFileSizeCommitLog"])
    _, out = python(PARSE_TASK, str(seg), str(int(seg.name)), str(size), str(conf))
    r = json.loads(out)
    return {"us_per_record": 1e6 * r["cpu_s"] / max(r["messages"], 1), "peak_rss_mb": r["peak"] / 1e6}


def rebuild_process(store: Path, conf: Path, out: Path, master: str, *extra: str) -> tuple[float, dict]:
    """Whole-process seconds of ``rmqstore rebuild`` into ``out`` and its rebuild.json."""
    shutil.rmtree(out, ignore_errors=True)
    cli = str(Path(sys.executable).with_name("rmqstore"))
    cmd = [cli, "rebuild", "--store", str(store), "--out", str(out), "--broker-config", str(conf), "--master", master]
    seconds, _ = timed([*cmd, *extra])
    return seconds, json.loads((out / "rebuild.json").read_text())


def audit_process(store: Path, conf: Path, report: Path, master: str, *extra: str) -> float:
    """Whole-process seconds of ``rmqstore audit`` of ``store`` (its own rebuild included); the store must be found
    clean (exit 0), else the bench stops."""
    shutil.rmtree(report, ignore_errors=True)
    cli = str(Path(sys.executable).with_name("rmqstore"))
    cmd = [cli, "audit", "--store", str(store), "--report", str(report), "--broker-config", str(conf)]
    return timed([*cmd, "--master", master, *extra])[0]


def generated_rows(root: Path, chosen: list[str], master: str, repeat: int) -> dict[str, dict]:
    """Every chosen generated store: generated when missing, rebuilt ``repeat`` times (the fastest kept), read raw,
    one parse task alone."""
    rows = {}
    for store in (s for s in STORES if s.name in chosen):
        path, conf = ensure_store(root, store)
        read_s, data = raw_read(path)
        out = root / f"out-{store.name}"
        seconds, report = min(rebuild_process(path, conf, out, master) for _ in range(repeat))
        shutil.rmtree(out, ignore_errors=True)
        row = {
            "store": store.name,
            "segment_kib": store.segment_size >> 10,
            "messages": report["commitlog"]["messages"],
            "commitlog_mb": round(data / 1e6, 1),
            "raw_read_mb_s": round(data / read_s / 1e6),
            "process_s": round(seconds, 2),
            **{k: round(v, 2) for k, v in parse_task(path, conf).items()},
        }
        rows[store.name] = row
        print(json.dumps(row), flush=True)
    return rows


def print_table(rows: dict[str, dict], bare: float) -> None:
    print(
        f"\n{'store':>10} {'messages':>11} {'MB':>7} {'raw read':>10} {'process':>8} {'x bare':>6} {'- bare':>7} "
        f"{'marginal msgs/s':>16} {'task us/rec':>11} {'task peak':>9}"
    )
    for store in STORES:
        r = rows.get(store.name)
        if r is None:
            continue
        marginal = ""
        # a task's fixed costs (opening files, the scratch file) swamp a few thousand records
        per_record = f"{r['us_per_record']:.2f}" if r["messages"] >= 100_000 else "-"
        if store.empty_twin in rows:
            small = rows[store.empty_twin]
            dt = r["process_s"] - small["process_s"]
            marginal = f"{(r['messages'] - small['messages']) / dt:,.0f}" if dt > 0 else "n/a"
        print(
            f"{r['store']:>10} {r['messages']:>11,} {r['commitlog_mb']:>7} {r['raw_read_mb_s']:>5} MB/s "
            f"{r['process_s']:>7.1f}s {r['process_s'] / bare:>5.2f}x {r['process_s'] - bare:>6.1f}s {marginal:>16} "
            f"{per_record:>11} "
            f"{r['peak_rss_mb']:>6.0f} MB"
        )
