"""recover's transaction (``--apply``): everything checked before the first byte is written, every file it
changes backed up (jobs.pipeline.backup), then each step made durably (jobs.pipeline.durable); a failure while
changing puts the store back from the backup."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from jobs.pipeline.backup import (
    Manifest,
    back_up,
    check_backup_dir,
    restore,
    store_target,
    write_manifest,
)
from jobs.pipeline.durable import TMP_DIR, Piece, fsync_dir, rename_into, write_tmp
from jobs.pipeline.liveness import local_path
from storelib.broker.config import BrokerConfig
from storelib.constants import CHECKPOINT_SIZE
from storelib.errors import Refused, RmqStoreError
from storelib.formats.checkpoint import Checkpoint
from storelib.layout import CHECKPOINT, inside
from storelib.reports.plan import Step
from udfs.fs import join, read_file, resolve

#: free space recover keeps in hand beyond what its files need (manifest, directories, metadata)
SPACE_MARGIN = 1 << 20


def _checkpoint(store: str, rebuilt: str) -> bytes:
    """The rebuilt checkpoint's timestamps; the 5.x offsets kept from the live one."""
    fs, root = resolve(rebuilt)
    new = Checkpoint.unpack(read_file(fs, join(root, CHECKPOINT)))
    path = local_path(store) / CHECKPOINT
    old = Checkpoint.unpack(path.read_bytes()) if path.is_file() and path.stat().st_size == CHECKPOINT_SIZE else None
    return new.with_5x_fields_of(old).pack()


def _new_size(s: Step, old_size: int, new_size: Callable[[Step], int], cfg: BrokerConfig) -> int:
    """The size of a step's new file (0 for a delete)."""
    if s.action == "delete":
        return 0
    if s.action == "truncate":
        return max(old_size, cfg.mappedFileSizeCommitLog)
    return new_size(s)


def check_free_space(
    steps: list[Step], targets: list[Path], backup: Path, new_size: Callable[[Step], int], cfg: BrokerConfig
) -> None:
    """Refuse before any change when the backup and the new files do not fit.

    The store needs, at its peak, what the files grew by so far plus one new file under its temporary name;
    the backup needs every old byte it keeps. Both count against one filesystem when they share it.
    """
    if not steps:
        return
    keep = grown = peak = 0
    for s, target in zip(steps, targets):
        old = target.stat().st_size if target.exists() else 0
        new = _new_size(s, old, new_size, cfg)
        keep += old - (s.offset or 0) if s.action != "create" else 0
        peak = max(peak, grown + new)
        grown += max(0, new - old)
    store_dir, backup_dir = targets[0].parent, _existing_parent(backup)
    while not store_dir.exists():
        store_dir = store_dir.parent
    needs = {store_dir: peak + SPACE_MARGIN, backup_dir: keep + SPACE_MARGIN}
    if os.stat(store_dir).st_dev == os.stat(backup_dir).st_dev:
        needs = {store_dir: peak + keep + SPACE_MARGIN}
    for where, need in needs.items():
        free = shutil.disk_usage(where).free
        if free < need:
            raise Refused(
                f"not enough free space on the filesystem of {where}: {free:,} bytes free, recover needs {need:,} "
                f"(backup {keep:,}, new files up to {peak:,}); nothing was changed"
            )


def _existing_parent(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


def _missing_dirs(root: Path, targets: list[Path]) -> list[str]:
    """Store-relative directories the targets need that do not exist yet, parents first."""
    out: set[Path] = set()
    for t in targets:
        out |= {d for d in t.parents if inside(str(d), str(root)) and d != root and not d.exists()}
    return [str(d.relative_to(root)) for d in sorted(out, key=lambda d: len(d.parts))]


def _change(s: Step, target: Path, root: Path, content: Callable[[Step], Piece], cfg: BrokerConfig) -> str:
    """Make one step's change; the sha256 of the new content (of nothing for a delete)."""
    if s.action == "delete":
        target.unlink(missing_ok=True)
        fsync_dir(target.parent)
        return hashlib.sha256().hexdigest()
    if s.action == "truncate":
        old, offset = target.stat().st_size, s.offset or 0
        new = [Piece.of_file(target, 0, offset), Piece(None, offset, max(old, cfg.mappedFileSizeCommitLog))]
    else:
        new = [content(s)]
    tmp, sha256 = write_tmp(root, new)
    rename_into(tmp, target)
    return sha256


def apply(steps: list[Step], store: str, rebuilt: str, backup: Path, cfg: BrokerConfig) -> Manifest:
    """Back up, then change the store step by step; returns the manifest written to BACKUP/manifest.json.

    Everything is checked before the first byte is written: every target inside the store, a new backup
    directory outside it, enough free space. A failure while changing undoes what was changed.
    """
    root = local_path(store)
    backup = check_backup_dir(store, backup)
    targets = [store_target(root, s.file) for s in steps]
    fs, rebuilt_root = resolve(rebuilt)
    checkpoint = _checkpoint(store, rebuilt) if any(s.file == CHECKPOINT for s in steps) else b""

    def content(s: Step) -> Piece:
        """A step's new content: its rebuilt file, or the rebuilt checkpoint with the live 5.x offsets."""
        if s.source is None:
            return Piece.of_bytes(checkpoint)
        path = join(rebuilt_root, s.source)
        return Piece(lambda: fs.open_input_stream(path), 0, fs.get_file_info(path).size)

    check_free_space(steps, targets, backup, lambda s: content(s).stop, cfg)
    created_at = dt.datetime.now(dt.UTC).isoformat()
    manifest = Manifest(str(root), created_at, "backed-up", tuple(_missing_dirs(root, targets)), ())
    backup.mkdir(parents=True)
    try:
        manifest = dataclasses.replace(manifest, steps=back_up(steps, targets, backup))
        write_manifest(backup, manifest)
    except (OSError, Refused) as exc:
        shutil.rmtree(backup, ignore_errors=True)
        raise RmqStoreError(f"could not back up into {backup}: {exc}; nothing in the store was changed") from None
    entries = list(manifest.steps)
    for i, (step, target) in enumerate(zip(steps, targets)):
        try:
            entries[i] = dataclasses.replace(entries[i], new_sha256=_change(step, target, root, content, cfg))
        except BaseException as exc:  # a full disk, an I/O error, an interrupt: put back what was changed
            _roll_back(root, backup, manifest, f"{step.action} {step.file}: {exc or type(exc).__name__}")
        manifest = dataclasses.replace(manifest, steps=tuple(entries))
        print(f"  done     {step.action} {step.file}", file=sys.stderr)
    manifest = dataclasses.replace(manifest, state="applied")
    write_manifest(backup, manifest)
    shutil.rmtree(root / TMP_DIR, ignore_errors=True)
    return manifest


def _roll_back(root: Path, backup: Path, manifest: Manifest, failure: str) -> NoReturn:
    """After a failed change: put the store back from the backup, then raise saying what happened."""
    shutil.rmtree(root / TMP_DIR, ignore_errors=True)  # the failed step's temporary file: space for the undo
    try:
        restore(root, backup, manifest)
        write_manifest(backup, dataclasses.replace(manifest, state="rolled-back"))
    except Exception as exc:
        raise RmqStoreError(
            f"recover --apply failed at {failure}; undoing it failed too ({exc}); the store is half-changed: "
            f"once the cause is fixed run: rmqstore recover --store {root} --undo {backup}"
        ) from None
    raise RmqStoreError(
        f"recover --apply failed at {failure}; every change was undone, the store is as it was "
        f"(backup kept in {backup})"
    )
