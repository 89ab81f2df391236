"""``make bench`` (``python -m bench --dir DIR``): the rebuild against the real broker's own and a bare Spark process,
then the generated stores (bench/generated.py).

The real 5.5.0 broker (tests/broker, the suite's harness) writes once, under ``DIR/broker``, 1,500,000 x 723-byte
records (a tag, UNIQ_KEY and two keys each, broker default sizes) and a nearly empty store of the same shape
(bench/broker.py). Each repeat times, each as a new process: a bare Spark process (start, one trivial job,
stop), the broker's own rebuild of both stores (store.log) and ``rmqstore rebuild`` of both (whole process); the
last repeat's two rebuilds are compared file by file. Every process reads from the page cache (the broker its
fresh copy, ours the store read once before) and starts on a settled disk: no writeback, discard or read left by
the one before it (``bench.generated.settle``). The table gives the median and the range of each, and the issue's
ratios: our whole process against the broker's rebuild, our nearly empty store against bare Spark, our marginal
rate against the broker's. ``--ten-gb``: only one round of the broker's and our rebuild of ten full 1 GiB segments
(15,000,000 records, written once). Each run writes its result file, the machine and every measurement, into
``--results`` (default bench/results/; bench/results.py).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from bench import broker, results
from bench.generated import (
    BARE_SPARK,
    SESSION_SPARK,
    STORES,
    audit_process,
    generated_rows,
    kernel_times,
    print_table,
    python,
    rebuild_process,
)
from bench.ratios import TEN_GB_TARGET, Measured, table
from bench.results import RESULTS


def broker_comparison(root: Path, master: str, repeat: int) -> Measured:
    """``repeat`` rounds of: bare Spark (plain, then our session), then the broker's and our rebuild of the big and
    the nearly empty store."""
    stores = [broker.ensure_store(root / "broker", b) for b in (broker.BIG, broker.EMPTY)]
    runs, outs = [root / f"broker-run-{i}" for i in (0, 1)], [root / f"ours-{i}" for i in (0, 1)]
    bare: list[float] = []
    session: list[float] = []
    audit: list[float] = []
    theirs: tuple[list[float], list[float]] = ([], [])
    ours: tuple[list[float], list[float]] = ([], [])
    for n in range(repeat):
        bare.append(python(BARE_SPARK)[0])
        session.append(python(SESSION_SPARK)[0])
        for i, store in enumerate(stores):
            theirs[i].append(broker.broker_rebuild(store, runs[i]))
            read_segments(store / "store")  # from the page cache, as the broker reads its fresh copy
            args = (store / "store", store / "broker.conf", outs[i], master, "--broker-version", broker.VERSION)
            ours[i].append(rebuild_process(*args)[0])
        big, version = stores[0], ("--broker-version", broker.VERSION)
        read_segments(big / "store")
        audit.append(audit_process(big / "store", big / "broker.conf", root / "audit-report", master, *version))
        print(
            f"round {n + 1}: bare Spark {bare[-1]:.1f} s (our session {session[-1]:.1f} s), "
            f"broker {theirs[0][-1]:.1f} / {theirs[1][-1]:.1f} s, ours {ours[0][-1]:.1f} / {ours[1][-1]:.1f} s, "
            f"audit {audit[-1]:.1f} s",
            flush=True,
        )
    differing = tuple(broker.differing_files(run / "store", out) for run, out in zip(runs, outs))
    for path in (*runs, *outs, root / "audit-report"):
        shutil.rmtree(path, ignore_errors=True)
    messages = (broker.BIG.messages, broker.EMPTY.messages)
    return Measured(messages, theirs, ours, bare, session, audit, differing)  # type: ignore[arg-type]


def ten_gb_comparison(root: Path, master: str) -> dict[str, object]:
    """One round on the 10 GB store (``broker.TEN_GB``, written once): our rebuild of the store, its
    segments read into the page cache first, then the broker's rebuild of a fresh copy; each rebuild compared file
    by file with the files the broker wrote live (a 5.5.0 broker re-dispatches only its last 10 segments, so its
    rebuild leaves the first segment's units out of the queues' first files). Ours runs first, on the store read
    into the page cache: the store and the broker's copy need not both fit in it."""
    store = broker.ensure_store(root / "broker", broker.TEN_GB)
    run, out = root / "broker-run-10g", root / "ours-10g"
    read_segments(store / "store")
    ours = rebuild_process(store / "store", store / "broker.conf", out, master, "--broker-version", broker.VERSION)[0]
    ours_differ = broker.differing_files(store / "store", out)
    shutil.rmtree(out, ignore_errors=True)
    theirs = broker.broker_rebuild(store, run)
    theirs_differ = broker.differing_files(store / "store", run / "store")
    shutil.rmtree(run, ignore_errors=True)
    print(
        f"10 GB, {broker.TEN_GB.messages:,} x {broker.RECORD_SIZE} B: broker {theirs:.2f} s (store.log), rmqstore "
        f"{ours:.2f} s (process): {theirs / ours:.2f}x the broker's speed (target >= {TEN_GB_TARGET})\n"
        f"  files unlike the broker's live ones: the broker's rebuild {len(theirs_differ)}, ours {len(ours_differ)} "
        f"{ours_differ[:5]}",
        flush=True,
    )
    return {
        "messages": broker.TEN_GB.messages,
        "record_size": broker.RECORD_SIZE,
        "broker_s": theirs,
        "ours_s": ours,
        "speed_vs_broker": theirs / ours,
        "target": TEN_GB_TARGET,
        "differing_from_live": {"broker": theirs_differ, "ours": ours_differ},
    }


def read_segments(store: Path) -> None:
    """Every commitlog segment read once (into the page cache)."""
    for segment in sorted((store / "commitlog").iterdir()):
        with open(segment, "rb") as f:
            while f.read(64 << 20):
                pass


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True, help="cache directory for the stores")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--repeat", type=int, default=3, help="runs per process: median (generated: fastest), range")
    p.add_argument("--stores", default=",".join(s.name for s in STORES), help="generated stores ('' for none)")
    p.add_argument("--no-broker", action="store_true", help="leave out the comparison with the real broker")
    p.add_argument("--ten-gb", action="store_true", help="only the 10 GB comparison (the store written once)")
    p.add_argument("--results", type=Path, default=RESULTS, help="where the run's result file goes (%(default)s)")
    args = p.parse_args()
    root = Path(args.dir).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    record: dict[str, object] = {"started_at": results.now(), "machine": results.machine()}
    print(f"machine: {record['machine']}", flush=True)
    if args.ten_gb:
        record["ten_gb"] = ten_gb_comparison(root, args.master)
    else:
        record.update(measure(root, args))
    record.update(finished_at=results.now(), load_average_at_end=results.load_average())
    print(f"result file: {results.write(args.results, record)}")
    return 0


def measure(root: Path, args: argparse.Namespace) -> dict[str, object]:
    """The broker comparison (unless --no-broker), then the chosen generated stores: their part of the record."""
    record: dict[str, object] = {}
    if not args.no_broker:
        measured = broker_comparison(root, args.master, args.repeat)
        print(f"\n{table(measured, broker.VERSION, broker.RECORD_SIZE)}\n", flush=True)
        record["broker"] = results.broker_record(measured, broker.VERSION, broker.RECORD_SIZE)
    chosen = [s for s in args.stores.split(",") if s]
    if chosen:
        kernel = kernel_times()
        print(f"kernel: cold compile {kernel['cold_compile_s']:.1f} s, warm load {kernel['warm_load_s']:.2f} s")
        bare = min(python(BARE_SPARK)[0] for _ in range(args.repeat))
        rows = generated_rows(root, chosen, args.master, args.repeat)
        print_table(rows, bare)
        record.update(kernel=kernel, bare_spark_s=bare, generated=rows)
    return record


if __name__ == "__main__":
    raise SystemExit(main())
