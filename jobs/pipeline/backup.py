"""recover's backup: every file it changes is copied first into a new directory outside the store, with
manifest.json (the steps, each file's copy and sha256, the directories recover made); ``restore`` puts them back."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from jobs.pipeline.durable import TMP_DIR, Piece, fsync_dir, pour, rename_into, write_durably, write_tmp
from jobs.pipeline.listing import check_outside_store, real_path
from jobs.pipeline.liveness import local_path
from storelib.errors import BadInput, Refused
from storelib.layout import inside
from storelib.reports.plan import ACTIONS, Step

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "rmqstore-recover-backup/1"


def default_backup_dir(store: str) -> Path:
    root = local_path(store)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return root.parent / f"{root.name}-rmqstore-backup-{stamp}"


def check_backup_dir(store: str, backup: Path) -> Path:
    """The backup directory with its links followed: a new directory, outside the store (BadInput otherwise)."""
    check_outside_store(store, str(backup), "--backup-dir")
    if os.path.lexists(backup):
        raise BadInput(f"--backup-dir {backup} exists: every --apply makes a new backup directory")
    return Path(real_path(str(backup)))


def store_target(root: Path, file: str) -> Path:
    """``root / file`` with its links followed; Refused unless that lies strictly inside the store."""
    target = Path(real_path(str(root / file)))
    if Path(file).is_absolute() or target == root or not inside(str(target), str(root)):
        raise Refused(f"{file!r} resolves to {target}, outside the store {root} (a symbolic link or '..'?): refusing")
    return target


@dataclasses.dataclass(frozen=True)
class BackedUp:
    """manifest.json's ``steps`` entry: one step and, when its file existed, the copy of its old bytes (from
    ``offset`` for a truncate) and the sha256 of the whole old file; ``new_sha256`` once it is changed."""

    action: str
    file: str  # store-relative
    reason: str = ""
    backup: str | None = None  # backup-relative copy (None: the file did not exist, recover creates it)
    size: int | None = None
    offset: int | None = None
    sha256: str | None = None
    new_sha256: str | None = None

    def to_json(self) -> dict[str, object]:
        """The entry as ``apply`` writes it: the copy's fields only for a backed-up file."""
        out: dict[str, object] = {"action": self.action, "file": self.file, "reason": self.reason}
        out["backup"] = self.backup
        if self.backup is not None:
            out |= {"size": self.size, "offset": self.offset, "sha256": self.sha256}
        return out | ({"new_sha256": self.new_sha256} if self.new_sha256 is not None else {})

    @classmethod
    def from_json(cls, entry: object) -> BackedUp | None:
        """The entry, None unless it is one ``apply`` writes: action, file, and for a backed-up file its copy and
        sha256 (and a truncate's offset)."""
        if not isinstance(entry, dict) or entry.get("action") not in ACTIONS or not isinstance(entry.get("file"), str):
            return None
        if "backup" not in entry:
            return None
        if entry["backup"] is not None:
            offset_ok = entry["action"] != "truncate" or isinstance(entry.get("offset"), int)
            if not (isinstance(entry["backup"], str) and isinstance(entry.get("sha256"), str) and offset_ok):
                return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in entry.items() if k in names})


@dataclasses.dataclass(frozen=True)
class Manifest:
    """BACKUP/manifest.json: the store, when and how far ``apply`` got (``state``: backed-up, applied, rolled-back,
    undone), the directories it made (parents first) and its steps in order."""

    store: str
    created_at: str | None
    state: str
    created_dirs: tuple[str, ...]
    steps: tuple[BackedUp, ...]

    def to_json(self) -> str:
        d = {
            "format": MANIFEST_FORMAT,
            "store": self.store,
            "created_at": self.created_at,
            "state": self.state,
            "created_dirs": list(self.created_dirs),
            "steps": [s.to_json() for s in self.steps],
        }
        return json.dumps(d, indent=1) + "\n"


def back_up(steps: list[Step], targets: list[Path], backup: Path) -> tuple[BackedUp, ...]:
    """Copy every file a step changes into ``backup/files``, fsynced; the manifest's step entries."""
    entries = []
    for i, (s, target) in enumerate(zip(steps, targets)):
        entry = BackedUp(s.action, s.file, s.reason)
        if s.action != "create" and target.exists():
            size = target.stat().st_size
            kept_from = 0  # a truncate keeps what it zeroes
            if s.action == "truncate":
                assert s.offset is not None  # a truncate step names its offset
                kept_from = s.offset
            digest = hashlib.sha256()
            pour([Piece.of_file(target, 0, kept_from)], None, digest)
            copy = f"files/{i:05d}"
            sha256 = write_durably(backup / copy, [Piece.of_file(target, kept_from, size)], digest)
            entry = dataclasses.replace(entry, backup=copy, size=size, offset=s.offset, sha256=sha256)
        elif s.action == "create" and target.exists():
            raise Refused(f"{s.file} appeared since the audit; audit again")
        entries.append(entry)
    for d in {(backup / e.backup).parent for e in entries if e.backup}:
        fsync_dir(d)
    return tuple(entries)


def write_manifest(backup: Path, manifest: Manifest) -> None:
    tmp = backup / f".{MANIFEST}.tmp"
    write_durably(tmp, [Piece.of_bytes(manifest.to_json().encode())])
    os.replace(tmp, backup / MANIFEST)
    fsync_dir(backup)


def read_manifest(backup: Path, root: Path) -> Manifest:
    """BACKUP/manifest.json, refused unless it is what ``apply`` writes for this store, every path inside it."""
    path = backup / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path} is not a readable recover manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise BadInput(f"{path} is not a recover backup manifest (format {MANIFEST_FORMAT})")
    if manifest.get("store") != str(root):
        raise Refused(f"backup {backup} is of the store {manifest.get('store')!r}, not {root}")
    steps, dirs = manifest.get("steps"), manifest.get("created_dirs", [])
    if not isinstance(steps, list) or not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise BadInput(f"{path}: 'steps' and 'created_dirs' must be lists as recover writes them")
    entries = []
    for entry in steps:
        step = BackedUp.from_json(entry)
        if step is None:
            raise BadInput(f"{path}: {str(entry)[:200]} is not a step recover writes")
        store_target(root, step.file)
        saved = real_path(str(backup / step.backup)) if step.backup is not None else None
        if saved is not None and not inside(saved, real_path(str(backup))):
            raise Refused(f"{path}: backup copy {step.backup!r} lies outside the backup directory")
        entries.append(step)
    for d in dirs:
        store_target(root, d)
    return Manifest(str(root), manifest.get("created_at"), manifest.get("state", ""), tuple(dirs), tuple(entries))


def restore(root: Path, backup: Path, manifest: Manifest) -> None:
    """Put back every backed-up file (reverse order), delete created files, then the directories recover made."""
    for entry in reversed(manifest.steps):
        target = store_target(root, entry.file)
        if entry.backup is None:  # the file did not exist before: recover created it
            if target.exists():
                target.unlink()
                fsync_dir(target.parent)
            continue
        copy = backup / entry.backup
        saved = [Piece.of_file(copy, 0, copy.stat().st_size)]
        if entry.action == "truncate":
            saved.insert(0, Piece.of_file(target, 0, entry.offset or 0))
        tmp, sha256 = write_tmp(root, saved)
        if sha256 != entry.sha256:
            tmp.unlink()
            raise Refused(f"backup of {entry.file} does not match its sha256 in the manifest")
        rename_into(tmp, target)
        print(f"  restored {entry.file}", file=sys.stderr)
    for d in reversed(manifest.created_dirs):
        path = store_target(root, d)
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
            fsync_dir(path.parent)
    shutil.rmtree(root / TMP_DIR, ignore_errors=True)
