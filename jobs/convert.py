"""``rmqstore convert``: a DLedger (or mixed) store -> a new plain CommitLog store, with Spark.

The stages are in jobs/pipeline/convert_flow.py; this file reads the command line, runs them, prints the findings
and one line, and returns the exit code (0 done, 1 the source is damaged: nothing written, 2 bad input).
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

import argparse
import sys

from jobs.cli import add_broker_config, add_spark_options, broker_config, print_findings, spark_run
from jobs.pipeline.convert_flow import check_convert_output, convert
from storelib.errors import EXIT_OK, DamageStop


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, help="the DLedger store root (holds dledger-<selfId>/); never written")
    p.add_argument("--out", required=True, help="the new store (must not exist): commitlog/, queues, index, config/")
    add_broker_config(p)
    add_spark_options(p)


def run(args: argparse.Namespace) -> int:
    check_convert_output(args.store, args.out)  # refused before Spark starts
    run_ = spark_run("rmqstore-convert", args, broker_config(args))
    try:
        done = convert(run_, args.store, args.out)
    except DamageStop as exc:
        print_findings(exc.findings)
        print(f"rmqstore convert: {exc}", file=sys.stderr)
        return exc.exit_code
    print_findings(done.findings)
    print(f"convert: {done.segments} segments, {done.messages:,} messages -> {done.out} (a plain CommitLog store)")
    return EXIT_OK


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("convert", None))
