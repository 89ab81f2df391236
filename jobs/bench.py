"""``make bench``: rebuild speed on big generated stores, as a ratio to raw sequential reading.

Generates (once, cached under ``--dir``, outside the repository) a store of ~1 KiB messages
and one of ~128-byte messages, 4 topics x 8 queues, 1 GiB segments, plus a copy of the
1 KiB workload with 256 MiB segments to show that a Python worker's peak memory does not
grow with the segment size. Then, in one run: reads each commitlog sequentially (the
baseline), rebuilds it with Spark on ``local[2]``, and prints messages/s, MB/s and the
ratio rebuild/raw-read. Spark's start-up is timed separately.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

import argparse
import dataclasses
import json
import shutil
import time
from pathlib import Path

from storelib.config import BrokerConfig, broker_config_from_properties
from storelib.generate import PRESETS, generate_store

READ_CHUNK = 8 << 20  # the scanner's chunk size too


@dataclasses.dataclass(frozen=True)
class BenchStore:
    name: str
    preset: str
    segment_size: int


STORES = (
    BenchStore("1k", "bench-1k", 1 << 30),
    BenchStore("128", "bench-128", 1 << 30),
    BenchStore("1k-256m", "bench-1k", 256 << 20),
)


def ensure_store(root: Path, store: BenchStore, size: int) -> tuple[Path, BrokerConfig]:
    """The cached store, generated on first use (a marker file says it is complete)."""
    preset = PRESETS[store.preset]
    cfg = broker_config_from_properties({**preset.broker, "mappedFileSizeCommitLog": str(store.segment_size)})
    path = root / f"{store.name}-{size >> 20}m"
    marker = path / "GENERATED.json"
    if not marker.is_file():
        shutil.rmtree(path, ignore_errors=True)
        spec = dataclasses.replace(preset.spec, target_bytes=size, topics=4, queues_per_topic=8)
        print(f"generating {path} ({size >> 20} MiB, {store.preset}, segments of {store.segment_size >> 20} MiB)")
        summary = generate_store(path, spec, cfg)
        marker.write_text(json.dumps(summary.to_dict()))
        print(f"  {summary.messages:,} messages in {summary.seconds:.0f} s")
    return path, cfg


def raw_read(path: Path) -> tuple[float, int]:
    """Seconds to read every commitlog segment once, sequentially, in 8 MiB reads."""
    total = 0
    t0 = time.monotonic()
    for seg in sorted((path / "commitlog").iterdir()):
        with open(seg, "rb", buffering=0) as f:
            while chunk := f.read(READ_CHUNK):
                total += len(chunk)
    return time.monotonic() - t0, total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True, help="cache directory for the generated stores")
    p.add_argument("--size", type=int, default=2048, help="MiB of commitlog per store (default 2048)")
    p.add_argument("--master", default="local[2]")
    args = p.parse_args()

    from jobs.pipeline.context import Run
    from jobs.pipeline.rebuild import rebuild
    from jobs.session import spark_session

    root = Path(args.dir).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    stores = [
        (s, *ensure_store(root, s, (args.size if s.segment_size == 1 << 30 else args.size // 2) << 20)) for s in STORES
    ]
    spark, startup = spark_session("rmqstore-bench", args.master)
    warm = root / "warmup"
    if not (warm / "commitlog").is_dir():
        generate_store(warm, dataclasses.replace(PRESETS["demo"].spec, messages=2000), BrokerConfig())
    t0 = time.monotonic()
    rebuild(Run(spark, BrokerConfig()), str(warm), str(root / "out-warmup"))
    shutil.rmtree(root / "out-warmup", ignore_errors=True)
    print(
        f"Spark session start-up: {startup:.1f} s, warm-up rebuild (Python workers start): "
        f"{time.monotonic() - t0:.1f} s (neither counted below)"
    )
    rows = []
    for store, path, cfg in stores:
        read_s, data = raw_read(path)
        out = root / f"out-{store.name}"
        shutil.rmtree(out, ignore_errors=True)
        result = rebuild(Run(spark, cfg), str(path), str(out))
        messages = result.report["commitlog"]["messages"]
        row = {
            "store": path.name,
            "segment_mib": store.segment_size >> 20,
            "messages": messages,
            "commitlog_mb": round(data / 1e6),
            "raw_read_mb_s": round(data / read_s / 1e6),
            "rebuild_s": round(result.seconds, 2),
            "rebuild_mb_s": round(data / result.seconds / 1e6),
            "rebuild_msgs_s": round(messages / result.seconds),
            "ratio_rebuild_to_raw_read": round(read_s / result.seconds, 3),
            "python_worker_peak_rss_mb": round(result.worker_peak_rss / 1e6),
        }
        rows.append(row)
        print(json.dumps(row))
        shutil.rmtree(out, ignore_errors=True)
    spark.stop()
    print(
        f"\n{'store':>14} {'seg':>6} {'messages':>12} {'raw read':>10} {'rebuild':>10} {'msgs/s':>11} "
        f"{'ratio':>6} {'worker peak':>11}"
    )
    for r in rows:
        print(
            f"{r['store']:>14} {r['segment_mib']:>4}Mi {r['messages']:>12,} {r['raw_read_mb_s']:>6} MB/s "
            f"{r['rebuild_mb_s']:>5} MB/s {r['rebuild_msgs_s']:>11,} {r['ratio_rebuild_to_raw_read']:>6} "
            f"{r['python_worker_peak_rss_mb']:>8} MB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
