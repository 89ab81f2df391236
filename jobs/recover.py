"""``rmqstore recover``: put the verified, rebuilt index back into a stopped store, with a backup and an undo.

The safety rules and the steps are in jobs/pipeline/recover_flow.py; this file reads the command line and
returns the exit code: 0 done (or nothing to do), 1 refused or repairable findings left, 2 bad input.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

import argparse
import sys
from pathlib import Path

from jobs.cli import add_broker_config, add_spark_options, broker_config, spark_run
from jobs.pipeline.audit_flow import audit
from jobs.pipeline.backup import default_backup_dir
from jobs.pipeline.context import Run
from jobs.pipeline.listing import check_outside_store
from jobs.pipeline.rebuild_flow import rebuild
from jobs.pipeline.recover_flow import check_backup_dir, check_stopped, recover, undo
from jobs.pipeline.salvage_flow import salvage
from storelib.errors import EXIT_CANNOT, EXIT_OK, Refused


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, help="the stopped broker's store root (local path)")
    p.add_argument("--rebuilt", metavar="OUT", help="a rebuild of this store (default: rebuild now, into a temp dir)")
    p.add_argument("--apply", action="store_true", help="make the changes (default: print the plan only)")
    p.add_argument(
        "--truncate-torn-tail",
        action="store_true",
        help="zero a torn record at the end of the commitlog (its bytes are backed up first)",
    )
    p.add_argument(
        "--salvage",
        action="store_true",
        help="rewrite each damaged commitlog range as records the broker accepts and no consumer takes for the "
        "lost message (tombstones at their queue offsets, fillers elsewhere); the old bytes go to the backup",
    )
    p.add_argument("--undo", metavar="BACKUP", help="restore the store from a backup directory made by --apply")
    p.add_argument("--backup-dir", metavar="DIR", help="new backup directory (default: next to the store)")
    p.add_argument("--report", metavar="DIR", help="write the audit reports (before/ and after/) here")
    add_broker_config(p)
    add_spark_options(p)


def run(args: argparse.Namespace) -> int:
    try:
        if args.undo:
            undo(args.store, Path(args.undo).resolve())
            print(f"recover: restored {args.store} from {args.undo}")
            return EXIT_OK
        check_stopped(args.store)
        backup = Path(args.backup_dir) if args.backup_dir else None
        if backup is not None:
            check_backup_dir(args.store, backup)  # before any work
        if args.report is not None:
            check_outside_store(args.store, args.report, "--report")
        run_ = spark_run("rmqstore-recover", args, broker_config(args))
        if args.salvage:
            return _salvage(run_, args, backup)
        if args.rebuilt is not None:
            return recover(run_, args.store, args.rebuilt, args.apply, args.truncate_torn_tail, backup, args.report)
        with run_.work_dir(args.report or args.store) as work:
            settled = rebuild(run_, args.store, f"{work}/rebuilt", on_error="skip-segment").run
            return recover(
                settled, args.store, f"{work}/rebuilt", args.apply, args.truncate_torn_tail, backup, args.report
            )
    except Refused as exc:
        print(f"rmqstore recover: refused: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a full disk or a vanished file outside apply (which undoes its own changes)
        print(f"rmqstore recover: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT


def _salvage(run_: Run, args: argparse.Namespace, backup: Path | None) -> int:
    """--salvage: rebuild and audit the store, then salvage its damaged ranges (jobs.pipeline.salvage_flow)."""
    if backup is None and args.apply:
        backup = default_backup_dir(args.store)
    with run_.work_dir(args.report or args.store) as work:
        settled = rebuild(run_, args.store, f"{work}/rebuilt", on_error="skip-segment").run
        report = args.report and f"{args.report}/before"
        before = audit(settled, args.store, f"{work}/rebuilt", report)
        return salvage(before.run, args.store, before, backup if args.apply else None, args.report)


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("recover", None))
