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
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

from jobs.liveness import broker_processes, is_local, local_path, lock_held
from jobs.pipeline.audit import AuditResult, audit
from jobs.pipeline.context import Run
from storelib.checkpoint import Checkpoint
from storelib.config import BrokerConfig
from storelib.constants import CHECKPOINT_SIZE
from storelib.errors import Refused
from storelib.findings import blocks_recover, is_divergence, is_repairable
from udfs.fs import join, read_file, resolve

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "rmqstore-recover-backup/1"
TMP_DIR = ".rmqstore-recover-tmp"
#: findings the checkpoint update answers
CHECKPOINT_KINDS = ("recovery-would-truncate", "index-deleted-on-recovery", "checkpoint-unreadable", "checkpoint-ahead")


@dataclasses.dataclass
class Step:
    action: str  # replace, create, delete, truncate
    file: str  # store-relative path
    reason: str
    source: str | None = None  # rebuilt-relative path of the new content
    data: bytes | None = None  # new content computed here (the checkpoint)
    offset: int | None = None  # truncate: file offset from which the file is zeroed

    def describe(self) -> str:
        what = {"truncate": f"zero from file offset {self.offset} to the end"}.get(self.action, "")
        src = f" <- rebuilt {self.source}" if self.source else ""
        return f"  {self.action:8} {self.file}{src}{' (' + what + ')' if what else ''}  [{self.reason}]"


# --- refusing -------------------------------------------------------------------------------


def check_stopped(store: str) -> None:
    """Raise Refused when a broker may be using the store (or it cannot be told)."""
    if not is_local(store):
        raise Refused(f"{store} is not a local path: recover works on a stopped broker's local store only")
    root = local_path(store)
    if not (root / "commitlog").is_dir():
        raise Refused(f"{root} has no commitlog directory: not a store root")
    if lock_held(store):
        raise Refused(f"{root / 'lock'} is locked by another process: the broker is running; stop it first")
    if (root / "abort").exists():
        alive = broker_processes(store)
        if alive:
            raise Refused(
                f"{root / 'abort'} exists and a Java process references the store, so the broker looks alive: "
                + "; ".join(alive)
            )


# --- the plan -------------------------------------------------------------------------------


def plan(result: AuditResult, store: str, rebuilt: str, truncate_torn_tail: bool) -> tuple[list[Step], list[str]]:
    """Steps for the audit's repairs, the checkpoint and (when asked) the torn tail; and what is left alone, why."""
    blocking = [f for f in result.findings if blocks_recover(f)]
    if blocking:
        raise Refused(
            "the audit cannot vouch for the rebuilt index: "
            + "; ".join(f"{f.kind} {f.file}: {f.message}" for f in blocking[:5])
        )
    steps = [Step(r["action"], r["file"], r["reason"], r["source"]) for r in result.repairs]
    notes = []
    for f in result.findings:
        if f.kind != "commitlog-torn-tail":
            continue
        if truncate_torn_tail:
            steps.append(Step("truncate", f.file, f.kind, offset=f.file_offset))
        else:
            notes.append(
                f"torn commitlog tail in {f.file} at file offset {f.file_offset}: left alone (--truncate-torn-tail)"
            )
    if steps or any(f.kind in CHECKPOINT_KINDS for f in result.findings):
        steps.append(
            Step("replace", "checkpoint", "checkpoint for the rebuilt index", data=_checkpoint(store, rebuilt))
        )
    for f in result.findings:
        if is_divergence(f) and not is_repairable(f) and not blocks_recover(f):
            notes.append(f"{f.kind} {f.file}: not something recover changes ({f.message})")
    return steps, notes


def _checkpoint(store: str, rebuilt: str) -> bytes:
    """The rebuilt checkpoint's timestamps; masterFlushedOffset and confirmPhyOffset (5.x) kept from the live one."""
    fs, root = resolve(rebuilt)
    new = Checkpoint.unpack(read_file(fs, join(root, "checkpoint")))
    path = local_path(store) / "checkpoint"
    old = Checkpoint.unpack(path.read_bytes()) if path.is_file() and path.stat().st_size == CHECKPOINT_SIZE else None
    if old is not None:
        new = dataclasses.replace(
            new, master_flushed_offset=old.master_flushed_offset, confirm_phy_offset=old.confirm_phy_offset
        )
    return new.pack()


# --- applying ---------------------------------------------------------------------------------


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_durably(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _replace_atomically(root: Path, target: Path, data: bytes) -> None:
    """Write ``data`` under a temporary name in the store's tmp dir, fsync, rename over ``target``, fsync dirs."""
    tmp = root / TMP_DIR / uuid.uuid4().hex
    _write_durably(tmp, data)
    created = not target.parent.exists()
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, target)
    _fsync_dir(target.parent)
    if created:
        _fsync_dir(target.parent.parent)
        _fsync_dir(target.parent.parent.parent)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def default_backup_dir(store: str) -> Path:
    root = local_path(store)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return root.parent / f"{root.name}-rmqstore-backup-{stamp}"


def apply(steps: list[Step], store: str, rebuilt: str, backup: Path, cfg: BrokerConfig) -> dict[str, Any]:
    """Back up, then change the store step by step; returns the manifest written to BACKUP/manifest.json."""
    root = local_path(store)
    backup = backup.resolve()
    if _inside(backup, root) or _inside(root, backup):
        raise Refused(f"backup directory {backup} overlaps the store {root}")
    for s in steps:
        target = (root / s.file).resolve()
        if not _inside(target, root) or target == root:
            raise Refused(f"{s.file} resolves to {target}, outside the store (a symlink?): refusing")
    backup.mkdir(parents=True)  # fails when it exists: one backup per run
    fs, rebuilt_root = resolve(rebuilt)
    entries = []
    for i, s in enumerate(steps):
        target = root / s.file
        entry: dict[str, Any] = {"action": s.action, "file": s.file, "reason": s.reason, "backup": None}
        if s.action != "create" and target.exists():
            old = target.read_bytes()
            keep = old[s.offset :] if s.action == "truncate" else old
            entry.update(backup=f"files/{i:05d}", size=len(old), sha256=_sha256(old), offset=s.offset)
            _write_durably(backup / entry["backup"], keep)
        elif s.action == "create" and target.exists():
            raise Refused(f"{s.file} appeared since the audit; audit again")
        entries.append(entry)
    for d in {(backup / e["backup"]).parent for e in entries if e["backup"]}:
        _fsync_dir(d)
    manifest = {
        "format": MANIFEST_FORMAT,
        "store": str(root),
        "created_at": dt.datetime.now(dt.UTC).isoformat(),
        "state": "backed-up",
        "steps": entries,
    }
    _write_manifest(backup, manifest)
    for s, entry in zip(steps, entries):
        target = root / s.file
        if s.action == "delete":
            target.unlink(missing_ok=True)
            _fsync_dir(target.parent)
            continue
        if s.action == "truncate":
            old = target.read_bytes()
            size = max(len(old), cfg.mappedFileSizeCommitLog)
            data = old[: s.offset] + bytes(size - s.offset)
        elif s.data is not None:
            data = s.data
        else:
            data = read_file(fs, join(rebuilt_root, s.source))
        _replace_atomically(root, target, data)
        entry["new_sha256"] = _sha256(data)
        print(f"  done     {s.action} {s.file}", file=sys.stderr)
    manifest["state"] = "applied"
    _write_manifest(backup, manifest)
    shutil.rmtree(root / TMP_DIR, ignore_errors=True)
    return manifest


def _write_manifest(backup: Path, manifest: dict[str, Any]) -> None:
    tmp = backup / f".{MANIFEST}.tmp"
    _write_durably(tmp, (json.dumps(manifest, indent=1) + "\n").encode())
    os.replace(tmp, backup / MANIFEST)
    _fsync_dir(backup)


def undo(store: str, backup: Path) -> dict[str, Any]:
    """Put back every file of BACKUP's manifest (reverse order) and delete the files recover created."""
    check_stopped(store)
    root = local_path(store)
    manifest = json.loads((backup / MANIFEST).read_text())
    if manifest.get("format") != MANIFEST_FORMAT:
        raise Refused(f"{backup / MANIFEST} is not a recover backup manifest")
    if Path(manifest["store"]) != root:
        raise Refused(f"backup {backup} is of the store {manifest['store']}, not {root}")
    for entry in reversed(manifest["steps"]):
        target = root / entry["file"]
        if entry["backup"] is None:  # the file did not exist before: recover created it
            if target.exists():
                target.unlink()
                _fsync_dir(target.parent)
            continue
        saved = (backup / entry["backup"]).read_bytes()
        if entry["action"] == "truncate":
            current = target.read_bytes()
            saved = current[: entry["offset"]] + saved
        if _sha256(saved) != entry["sha256"]:
            raise Refused(f"backup of {entry['file']} does not match its sha256 in the manifest")
        _replace_atomically(root, target, saved)
        print(f"  restored {entry['file']}", file=sys.stderr)
    shutil.rmtree(root / TMP_DIR, ignore_errors=True)
    manifest["state"] = "undone"
    _write_manifest(backup, manifest)
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
    before = audited or audit(run, store, rebuilt, report_dir and join(report_dir, "before"))
    if before.exit_code == 2:
        raise Refused("the store could not be audited: " + "; ".join(f.message for f in before.findings[:3]))
    steps, notes = plan(before, store, rebuilt, truncate_torn_tail)
    for note in notes:
        print(f"  note: {note}")
    if not steps:
        print("recover: nothing to change")
        return 0
    print(f"recover plan ({len(steps)} steps):")
    for s in steps:
        print(s.describe())
    if not do_apply:
        print("recover: dry run; nothing was changed (--apply to make these changes)")
        return 0
    check_stopped(store)
    backup = backup_dir or default_backup_dir(store)
    apply(steps, store, rebuilt, backup, run.cfg)
    print(f"recover: applied; backup in {backup} (undo: rmqstore recover --store {store} --undo {backup})")
    after = audit(run, store, rebuilt, report_dir and join(report_dir, "after"))
    left = [f for f in after.findings if is_repairable(f)]
    for f in after.findings:
        if is_divergence(f):
            print(f"  after: {f.severity.upper():7} {f.kind}: {f.file}: {f.message}")
    print(f"recover: re-audit: {len(left)} repairable findings left, exit code {after.exit_code}")
    return 1 if left else 0
