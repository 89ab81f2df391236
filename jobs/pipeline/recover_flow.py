"""Recover on the driver: put the verified, rebuilt index back into a stopped store, with a backup and an undo.

Safety rules:
- refuses while a broker runs: ``lock`` is locked, or ``abort`` exists and a Java process
  references the store (no flag overrides this);
- a dry run (the plan) unless ``--apply``; only the files the audit found wrong are changed;
- ``--apply`` first copies every file it will change into a new backup directory outside
  the store, with manifest.json, and fsyncs them; then each new file is written under a
  temporary name in ``<store>/.rmqstore-recover-tmp`` (same filesystem, a directory the
  broker never lists), fsynced and renamed over the old one (``os.replace``), and the
  directory is fsynced: a crash leaves the old or the new file, plus the backup;
- the checkpoint is updated so the broker's recovery neither re-checks the log from an old
  segment (and truncates it at a damaged record) nor deletes restored IndexFiles;
- commitlog data is never deleted; a torn tail is zeroed only with ``--truncate-torn-tail``,
  after its bytes are backed up;
- ``--undo BACKUP`` puts every backed-up file back and removes the files recover created.

The transaction is jobs.pipeline.transaction, its backup jobs.pipeline.backup, its durable writes
jobs.pipeline.durable.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from jobs.pipeline.audit_flow import AuditResult, audit
from jobs.pipeline.backup import (
    Manifest,
    check_backup_dir,
    default_backup_dir,
    read_manifest,
    restore,
    write_manifest,
)
from jobs.pipeline.context import Run
from jobs.pipeline.liveness import broker_processes, local_path, lock_held
from jobs.pipeline.transaction import apply
from storelib.errors import EXIT_CANNOT, EXIT_OK, Refused
from storelib.findings import blocks_recover, is_divergence
from storelib.layout import ABORT, is_local, segment_dirs
from storelib.reports.plan import Plan, recover_plan
from storelib.reports.verdict import closing_line, plan_lines
from udfs.fs import join

# --- refusing -------------------------------------------------------------------------------


def check_stopped(store: str) -> None:
    """Raise Refused when a broker may be using the store (or it cannot be told)."""
    if not is_local(store):
        raise Refused(f"{store} is not a local path: recover works on a stopped broker's local store only")
    root = local_path(store)
    names = [e.name for e in root.iterdir() if e.is_dir()] if root.is_dir() else []
    if not any((root / d).is_dir() for d in segment_dirs(names)):
        raise Refused(f"{root} has no commitlog directory, nor a DLedger one: not a store root")
    if lock_held(store):
        raise Refused(f"{root / 'lock'} is locked by another process: the broker is running; stop it first")
    if (root / ABORT).exists():
        alive = broker_processes(store)
        if alive:
            raise Refused(
                f"{root / 'abort'} exists and a Java process references the store, so the broker looks alive: "
                + "; ".join(alive)
            )


# --- the plan -------------------------------------------------------------------------------


def plan(result: AuditResult, truncate_torn_tail: bool) -> Plan:
    """The audit's plan (report.json's ``plan``), with the torn tail's truncate when asked; refused when the
    audit cannot vouch for the rebuilt index."""
    blocking = [f for f in result.findings if blocks_recover(f)]
    if blocking:
        raise Refused(
            "the audit cannot vouch for the rebuilt index: "
            + "; ".join(f"{f.kind} {f.file}: {f.message}" for f in blocking[:5])
        )
    advised = result.report.plan
    if not truncate_torn_tail:
        return advised
    return recover_plan(result.findings, result.repairs, advised.stopping, truncate=True)


def undo(store: str, backup: Path) -> Manifest:
    """Put back every file of BACKUP's manifest (reverse order) and delete the files and directories recover created."""
    check_stopped(store)
    root = local_path(store)
    manifest = read_manifest(backup, root)
    restore(root, backup, manifest)
    manifest = dataclasses.replace(manifest, state="undone")
    write_manifest(backup, manifest)
    return manifest


def recover(
    run: Run,
    store: str,
    rebuilt: str,
    do_apply: bool,
    truncate_torn_tail: bool = False,
    backup_dir: Path | None = None,
    report_dir: str | None = None,
    audited: AuditResult | None = None,
) -> int:
    """Audit (unless ``audited`` is given), print the plan; with ``do_apply`` back up, change, audit again.

    Returns the exit code: 0 done (or nothing to do), 1 repairable findings remain after applying.
    """
    check_stopped(store)
    backup = check_backup_dir(store, backup_dir or default_backup_dir(store)) if do_apply else None
    if audited is None:
        audited = audit(run, store, rebuilt, report_dir and join(report_dir, "before"))
        run = audited.run  # the store's settings and rules, as the audit settled them
    before = audited
    if before.exit_code == EXIT_CANNOT:
        raise Refused("the store could not be audited: " + "; ".join(f.message for f in before.findings[:3]))
    planned = plan(before, truncate_torn_tail)
    steps = list(planned.steps)
    for note in planned.notes:
        print(f"  note: {note}")
    if not steps:
        print("recover: nothing to change")
        return EXIT_OK
    print("\n".join(plan_lines(before.report, steps, str(backup) if backup else None)))
    if backup is None:
        print("recover: dry run; nothing was changed (--apply to make these changes)")
        return EXIT_OK
    check_stopped(store)
    apply(steps, store, rebuilt, backup, run.cfg)
    print(f"recover: applied; backup in {backup} (undo: rmqstore recover --store {store} --undo {backup})")
    return said_after(audit(run, store, rebuilt, report_dir and join(report_dir, "after")))


def said_after(after: AuditResult) -> int:
    """The audit after an apply, said: each divergence left, then the closing line; its exit code."""
    for f in after.findings:
        if is_divergence(f):
            print(f"  after: {f.severity.upper():7} {f.kind}: {f.file}: {f.message}")
    line, code = closing_line(after.report)
    print(line)
    return code
