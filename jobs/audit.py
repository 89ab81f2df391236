"""``rmqstore audit``: compare a live store with the index rebuilt from its commitlog, in Spark.

The stages are in jobs/pipeline/audit_flow.py; this file reads the command line, runs them, appends the run to
the audit history (``--history``), prints the console summary and returns the exit code: 0 clean (info
findings only), 1 divergences found, 2 could not audit. Nothing is ever written into the live store.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

import argparse
import dataclasses
import datetime as dt
import glob
import re
import sys
from typing import Any

from jobs.cli import add_broker_config, add_spark_options, broker_config, jar_needs, spark_run
from jobs.pipeline.audit_flow import audit
from jobs.pipeline.audit_types import DEFAULT_INDEX_SAMPLE
from jobs.report.console import console_summary
from jobs.tables.catalog import default_store_id
from jobs.tables.history import append_history, last_clean_run
from storelib import errors
from storelib.audit.scope import CleanRun
from storelib.errors import EXIT_CANNOT, CannotAudit, RmqStoreError
from storelib.reports.report import HistoryEntry, HistoryRecord

# --- command line ---------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--store", help="the live store root (read only); local path, hdfs:// or s3a://")
    which.add_argument(
        "--stores",
        metavar="LIST|GLOB",
        help="many stores in one Spark application: comma-separated roots, quoted globs ('/data/*/store') or "
        "ID=ROOT entries (broker-a=s3a://backups/broker-a/store); each gets its report in --report/<store id> and "
        "its own history row; the exit code is the worst",
    )
    p.add_argument(
        "--rebuilt", metavar="OUT", help="a rebuild of this store (rmqstore rebuild --out); default: rebuild now"
    )
    p.add_argument("--report", required=True, metavar="DIR", help="where report.json and report.html go")
    p.add_argument(
        "--index-sample",
        type=int,
        default=DEFAULT_INDEX_SAMPLE,
        metavar="N",
        help=f"look up at most N distinct keys through the live IndexFiles (default {DEFAULT_INDEX_SAMPLE})",
    )
    p.add_argument(
        "--history", metavar="TABLE", help="append the findings and a summary row to this Delta table (audit history)"
    )
    p.add_argument("--store-id", help="the store's id in the history table (default: derived from the store path)")
    p.add_argument(
        "--since-last",
        action="store_true",
        help="audit only what changed since the store's last clean run in --history (a full audit when none)",
    )
    add_broker_config(p)
    add_spark_options(p)


def run(args: argparse.Namespace) -> int:
    problem = _argument_problem(args)
    if problem:
        print(f"rmqstore audit: {problem}", file=sys.stderr)
        return EXIT_CANNOT
    return audit_fleet(args) if args.stores else audit_store(args)


def _argument_problem(args: argparse.Namespace) -> str | None:
    if (args.since_last or args.store_id) and not args.history:
        return "--since-last and --store-id need --history TABLE"
    if args.index_sample < 1:
        return f"--index-sample must be at least 1, got {args.index_sample}"
    if args.stores and (args.rebuilt or args.store_id):
        return "--rebuilt and --store-id name one store: with --stores each store is rebuilt and named by its path"
    return None


_NAMED = re.compile(r"([A-Za-z0-9._-]+)=(.+)")


def expand_stores(spec: str) -> dict[str, str]:
    """``--stores``: comma-separated entries, each ``ID=ROOT`` (a store id as the single-store ``--store-id``
    names it) or a root, a local glob or a URI, whose id is derived from its path; store id -> root, in order,
    each store once."""
    stores: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        named = _NAMED.fullmatch(item)
        if named:
            stores.setdefault(named[1], named[2])
            continue
        matches = sorted(glob.glob(item)) if glob.has_magic(item) and "://" not in item else [item]
        for root in matches:
            if root not in stores.values():
                stores.setdefault(default_store_id(root), root)
    return stores


def audit_fleet(args: argparse.Namespace) -> int:
    """Audit every store of ``--stores`` in this Spark application, one after the other: a store that cannot be
    audited gets exit code 2 (and its history row) and the others go on; the worst exit code."""
    stores = expand_stores(args.stores)
    if not stores:
        print(f"rmqstore audit: --stores {args.stores!r} names no store", file=sys.stderr)
        return EXIT_CANNOT
    codes: dict[str, int] = {}
    for store_id, store in stores.items():
        print(f"== audit {len(codes) + 1}/{len(stores)}: {store} (store id {store_id})", flush=True)
        one = argparse.Namespace(**{**vars(args), "store": store, "store_id": store_id})
        one.report = f"{args.report.rstrip('/')}/{store_id}"
        started = dt.datetime.now(dt.UTC)
        try:
            codes[store_id] = audit_store(one)
        except (RmqStoreError, OSError) as exc:  # this store's settings or files: the next store still runs
            print(f"rmqstore audit: {store}: cannot audit: {exc}", file=sys.stderr)
            codes[store_id] = errors.exit_code(exc)
            if args.history:  # its row says so (exit code 2), as a run that could not audit
                from jobs.runtime.session import spark_session

                spark = spark_session("rmqstore-audit", args.master, args.profile, args.conf, jar_needs(args))[0]
                failed = HistoryRecord(started, dt.datetime.now(dt.UTC), EXIT_CANNOT)
                codes[store_id] = _exit_code(_record(spark, args.history, store_id, failed), codes[store_id])
    counts = [sum(1 for c in codes.values() if c == code) for code in (0, 1, 2)]
    worst = max(codes.values())
    print(
        f"audit: {len(stores)} stores: {counts[0]} clean, {counts[1]} divergent, {counts[2]} could not be audited; "
        f"exit code {worst} -> {args.report}"
    )
    return worst


def audit_store(args: argparse.Namespace) -> int:
    """One store's audit, history row and console summary; its exit code."""
    run_ = spark_run("rmqstore-audit", args, broker_config(args))  # the store is listed while the session starts
    store_id = args.store_id or default_store_id(args.store)
    started, result = dt.datetime.now(dt.UTC), None
    history: list[HistoryEntry] = []  # the run's rows in --history (appended before its report is written)

    def record(row: HistoryRecord) -> HistoryEntry:
        history.append(_record(run_.spark, args.history, store_id, row))
        return history[-1]

    try:
        since = _last_clean_run(run_.spark, args.history, store_id) if args.since_last else None
        full = args.since_last and since is None
        note = f"no clean run of store {store_id} in {args.history} yet: full audit" if full else ""
        result = audit(
            run_,
            args.store,
            args.rebuilt,
            args.report,
            args.index_sample,
            since,
            args.broker_config,
            scope_note=note,
            record=record if args.history else None,
        )
    except (RmqStoreError, ValueError) as exc:
        print(f"rmqstore audit: cannot audit: {exc}", file=sys.stderr)
    except Exception as exc:  # a Spark task failed (e.g. a segment vanished): exit 2 drives the alert, not a trace
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"rmqstore audit: cannot audit: {type(exc).__name__}: {first}", file=sys.stderr)
    if args.history and not history:  # it could not audit: its row says so (exit code 2)
        record(HistoryRecord(started, dt.datetime.now(dt.UTC), EXIT_CANNOT))
    exit_code = _exit_code(history[-1] if history else None, result.exit_code if result else EXIT_CANNOT)
    if result is not None:
        print(console_summary(result.report, args.report))
    return exit_code


def _exit_code(history: HistoryEntry | None, audited: int) -> int:
    """The audit's exit code, EXIT_CANNOT when its history rows could not be written."""
    return EXIT_CANNOT if history is not None and history.error is not None else audited


def _last_clean_run(spark: Any, table: str, store_id: str) -> CleanRun | None:
    try:
        return last_clean_run(spark, table, store_id)
    except Exception as exc:  # an unreadable table: auditing only the tail would rest on nothing
        raise CannotAudit(f"cannot read the history table {table}: {exc}") from None


def _record(spark: Any, table: str, store_id: str, row: HistoryRecord) -> HistoryEntry:
    """Append the run to the history table: where it went, or why it could not."""
    run: dict[str, Any] = {  # the summary row, JSON-like; append_history adds its run_id
        "store": store_id,
        **{k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(row).items() if k != "findings"},
    }
    try:
        version = append_history(spark, table, run, [f.to_dict() for f in row.findings])
        print(f"history: run {run['run_id']} appended to {table} (version {version})")
        return HistoryEntry(table, run["run_id"], version=version)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"rmqstore audit: could not write the history table {table}: {first}", file=sys.stderr)
        return HistoryEntry(table, run.get("run_id"), error=first)


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("audit", None))
