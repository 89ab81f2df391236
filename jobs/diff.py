"""``rmqstore diff``: two stores of one broker compared message by message, with Spark.

The old master's store and the promoted slave's after a failover (which acknowledged messages the slave never
received), or a store and its backup. The stages are in jobs/pipeline/diff_flow.py, the rules of what counts as
one message in storelib/audit/message_diff.py; this file reads the command line, writes report.json, prints the
summary and returns the exit code: 0 the same messages, 1 differences, 2 could not compare. Neither store is
written to.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

import argparse
import datetime as dt
import json
import sys

from jobs.cli import add_broker_config, add_spark_options, broker_config, spark_run
from jobs.pipeline.diff_flow import DiffResult, check_out, diff
from storelib.audit.message_diff import MISSING, QUEUE_OFFSET, diff_report
from storelib.errors import EXIT_FINDINGS, EXIT_OK
from udfs.fs import join, resolve, write_file

REPORT = "report.json"
#: groups (kind, store, topic) the console lists; report.json has them all
CONSOLE_GROUPS = 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", metavar="STORE", help="the first store's root (the old master's); read only")
    p.add_argument("other", metavar="OTHER", help="the other store's root (the promoted slave's, a backup); read only")
    p.add_argument("--report", required=True, metavar="DIR", help="where report.json goes")
    p.add_argument(
        "--out", metavar="DIR", help="the missing messages (each store's) as a Parquet table there: a new directory"
    )
    add_broker_config(p)
    add_spark_options(p)


def run(args: argparse.Namespace) -> int:
    stores = (args.store, args.other)
    check_out(args.out, stores)  # refused before Spark starts
    run_ = spark_run("rmqstore-diff", args, broker_config(args))
    result = diff(run_, stores, args.report, args.out)
    report = diff_report(stores, result.counts, result.groups, result.out)
    fs, root = resolve(args.report)
    fs.create_dir(root, recursive=True)
    write_file(fs, join(root, REPORT), json.dumps(report, indent=2).encode())
    print(summary(stores, result, run_.startup))
    return EXIT_OK if result.counts.same else EXIT_FINDINGS


def summary(stores: tuple[str, str], result: DiffResult, startup: float) -> str:
    """The console summary: the figures of each store, then the groups of differences (kind, store, topic)."""
    c = result.counts
    lines = [
        f"diff: {stores[0]}: {c.records[0]:,} records; {stores[1]}: {c.records[1]:,} records; "
        f"{c.paired[0]:,} of the first's in the other; {result.seconds:.1f} s (Spark start-up {startup:.1f} s)",
        f"  missing from {stores[1]}: {c.kinds[MISSING][0]:,}; missing from {stores[0]}: {c.kinds[MISSING][1]:,}; "
        f"at other queue offsets: {c.kinds[QUEUE_OFFSET][0]:,}",
    ]
    for g in sorted(result.groups, key=lambda g: -g.records)[:CONSOLE_GROUPS]:
        first, last = (_time(t) for t in (g.first_store_timestamp, g.last_store_timestamp))
        lines.append(
            f"  {g.kind:12} in {stores[g.side]}: {g.topic}: {g.records:,} records, commitlog "
            f"{g.first_commitlog_offset}..{g.last_commitlog_offset}, stored {first} .. {last}"
        )
    lines.append("  same messages" if c.same else f"  -> {result.out or 'rerun with --out DIR for the messages'}")
    return "\n".join(lines)


def _time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("diff", None))
