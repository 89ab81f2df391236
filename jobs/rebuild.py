"""``rmqstore rebuild``: CommitLog segments -> ConsumeQueue and IndexFile files, byte-exact, with Spark.

The stages are in jobs/pipeline/rebuild_flow.py; this file reads the command line, runs them, prints the
findings and the one-line summary, and returns the exit code (0 done, 1 findings of severity error or
stopped on damage, 2 bad input or settings).
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

import argparse
import sys

from jobs.cli import add_broker_config, add_spark_options, broker_config, print_findings, spark_run
from jobs.pipeline.rebuild_flow import ON_ERROR, RebuildResult, check_output, rebuild
from storelib.errors import EXIT_FINDINGS, EXIT_OK, DamageStop


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, help="store root (holds commitlog/); local path, hdfs:// or s3a://")
    p.add_argument("--out", required=True, help="where the rebuilt consumequeue/, index/, checkpoint go")
    p.add_argument(
        "--on-error",
        choices=ON_ERROR,
        default="stop",
        help="damaged segment: stop (default, nothing written) or leave the segment out and say so",
    )
    p.add_argument("--catalog", metavar="TABLE", help="also write the message catalog Delta table")
    p.add_argument("--store-id", help="store id in the catalog (default: derived from the store path)")
    add_broker_config(p)
    add_spark_options(p)


def run(args: argparse.Namespace) -> int:
    check_output(args.store, args.out, args.work_dir)  # refused before Spark starts
    cfg = broker_config(args)
    run_ = spark_run("rmqstore-rebuild", args, cfg)  # starts in the background: the listing and rules need no Spark
    try:
        result = rebuild(run_, args.store, args.out, args.on_error)
    except DamageStop as exc:
        print_findings(exc.findings)
        print(f"rmqstore rebuild: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.catalog:
        from jobs.tables.catalog import default_store_id, write_catalog

        write_catalog(run_.spark, result.records, args.catalog, args.store_id or default_store_id(args.store))
        result.records.unpersist()
    findings = result.report.findings
    print_findings(list(findings))
    print(summary_line(result, run_.startup))
    return EXIT_FINDINGS if any(f.severity == "error" for f in findings) else EXIT_OK


def summary_line(result: RebuildResult, startup: float) -> str:
    r = result.report
    seg, messages = r.commitlog.segments, r.commitlog.messages
    data = sum(s.end_offset - s.start for s in seg if s.messages)
    secs = max(result.seconds, 1e-9)
    return (
        f"rebuild: {len(seg)} segments, {messages:,} messages, {len(r.consume_queues)} queues, "
        f"{len(r.index_files)} index files in {result.seconds:.1f} s ({data / secs / 1e6:,.1f} MB/s, "
        f"{messages / secs:,.0f} msgs/s; Spark start-up {startup:.1f} s) -> {result.out}"
    )


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("rebuild", None))
