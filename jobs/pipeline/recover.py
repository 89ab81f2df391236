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
import io
import json
import os
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from jobs.pipeline.audit import AuditResult, audit
from jobs.pipeline.context import Run
from jobs.pipeline.listing import check_outside_store, real_path
from jobs.pipeline.liveness import broker_processes, is_local, local_path, lock_held
from storelib.checkpoint import Checkpoint
from storelib.config import BrokerConfig
from storelib.constants import CHECKPOINT_SIZE
from storelib.errors import EXIT_CANNOT, EXIT_OK, BadInput, Refused, RmqStoreError
from storelib.findings import blocks_recover, is_divergence
from storelib.layout import ABORT, CHECKPOINT, inside, segment_dirs
from storelib.plan import ACTIONS, Plan, Step, recover_plan
from storelib.verdict import closing_line, plan_lines
from udfs.fs import join, read_file, resolve

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "rmqstore-recover-backup/1"
TMP_DIR = ".rmqstore-recover-tmp"
#: free space recover keeps in hand beyond what its files need (manifest, directories, metadata)
SPACE_MARGIN = 1 << 20


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
    advised = Plan.from_dict(result.report["plan"])
    if not truncate_torn_tail:
        return advised
    return recover_plan(result.findings, result.repairs, advised.stopping, truncate=True)


def _checkpoint(store: str, rebuilt: str) -> bytes:
    """The rebuilt checkpoint's timestamps; the 5.x offsets kept from the live one."""
    fs, root = resolve(rebuilt)
    new = Checkpoint.unpack(read_file(fs, join(root, CHECKPOINT)))
    path = local_path(store) / CHECKPOINT
    old = Checkpoint.unpack(path.read_bytes()) if path.is_file() and path.stat().st_size == CHECKPOINT_SIZE else None
    return new.with_5x_fields_of(old).pack()


# --- applying ---------------------------------------------------------------------------------


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: files are copied and hashed this many bytes at a time: recover's memory does not grow with a 1 GiB segment
CHUNK = 8 << 20
_ZEROS = bytes(CHUNK)


@dataclasses.dataclass(frozen=True)
class Piece:
    """Bytes [start, stop) of what ``open()`` reads (a binary stream), or ``stop - start`` zeros when it is None."""

    open: Callable[[], BinaryIO] | None
    start: int
    stop: int

    @classmethod
    def of_file(cls, path: Path, start: int, stop: int) -> Piece:
        return cls(lambda: open(path, "rb"), start, stop)

    @classmethod
    def of_bytes(cls, data: bytes) -> Piece:
        return cls(lambda: io.BytesIO(data), 0, len(data))


def _pour(pieces: list[Piece], out: BinaryIO | None, digest: Any) -> None:
    """The pieces' bytes, in order, into ``digest`` and, unless None, ``out`` (zeros skipped: a hole), a CHUNK at a
    time; OSError when a source ends early."""
    for p in pieces:
        left = p.stop - p.start
        if p.open is None:
            if out is not None:
                out.seek(left, os.SEEK_CUR)
            while left:
                digest.update(memoryview(_ZEROS)[: min(CHUNK, left)])
                left -= min(CHUNK, left)
            continue
        with p.open() as src:
            if p.start:
                src.seek(p.start)
            while left:
                chunk = src.read(min(CHUNK, left))
                if not chunk:
                    raise OSError(f"{getattr(src, 'name', 'a source')} ends {left} bytes before byte {p.stop}")
                digest.update(chunk)
                if out is not None:
                    out.write(chunk)
                left -= len(chunk)


def _write_durably(path: Path, pieces: list[Piece], digest: Any = None) -> str:
    """The pieces into ``path`` (zeros a hole), fsynced; the sha256 of its bytes (continuing ``digest`` if given)."""
    digest = hashlib.sha256() if digest is None else digest
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        _pour(pieces, f, digest)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())
    return digest.hexdigest()


def _write_tmp(root: Path, pieces: list[Piece]) -> tuple[Path, str]:
    """The pieces written durably under a temporary name in the store's tmp dir; that name and their sha256."""
    tmp = root / TMP_DIR / uuid.uuid4().hex
    return tmp, _write_durably(tmp, pieces)


def _rename_into(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` over ``target`` (a crash leaves the old or the new file), fsync the directories."""
    created = not target.parent.exists()
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, target)
    _fsync_dir(target.parent)
    if created:
        _fsync_dir(target.parent.parent)
        _fsync_dir(target.parent.parent.parent)


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


def _back_up(steps: list[Step], targets: list[Path], backup: Path) -> list[dict[str, Any]]:
    """Copy every file a step changes into ``backup/files``, fsynced; the manifest's step entries."""
    entries = []
    for i, (s, target) in enumerate(zip(steps, targets)):
        entry: dict[str, Any] = {"action": s.action, "file": s.file, "reason": s.reason, "backup": None}
        if s.action != "create" and target.exists():
            size = target.stat().st_size
            kept_from = s.offset if s.action == "truncate" else 0  # a truncate keeps what it zeroes
            digest = hashlib.sha256()
            _pour([Piece.of_file(target, 0, kept_from)], None, digest)
            entry.update(backup=f"files/{i:05d}", size=size, offset=s.offset)
            entry["sha256"] = _write_durably(backup / entry["backup"], [Piece.of_file(target, kept_from, size)], digest)
        elif s.action == "create" and target.exists():
            raise Refused(f"{s.file} appeared since the audit; audit again")
        entries.append(entry)
    for d in {(backup / e["backup"]).parent for e in entries if e["backup"]}:
        _fsync_dir(d)
    return entries


def _change(s: Step, target: Path, root: Path, content: Callable[[Step], Piece], cfg: BrokerConfig) -> str:
    """Make one step's change; the sha256 of the new content (of nothing for a delete)."""
    if s.action == "delete":
        target.unlink(missing_ok=True)
        _fsync_dir(target.parent)
        return hashlib.sha256().hexdigest()
    if s.action == "truncate":
        old, offset = target.stat().st_size, s.offset or 0
        new = [Piece.of_file(target, 0, offset), Piece(None, offset, max(old, cfg.mappedFileSizeCommitLog))]
    else:
        new = [content(s)]
    tmp, sha256 = _write_tmp(root, new)
    _rename_into(tmp, target)
    return sha256


def apply(steps: list[Step], store: str, rebuilt: str, backup: Path, cfg: BrokerConfig) -> dict[str, Any]:
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
    manifest = {
        "format": MANIFEST_FORMAT,
        "store": str(root),
        "created_at": dt.datetime.now(dt.UTC).isoformat(),
        "state": "backed-up",
        "created_dirs": _missing_dirs(root, targets),
        "steps": [],
    }
    backup.mkdir(parents=True)
    try:
        manifest["steps"] = _back_up(steps, targets, backup)
        _write_manifest(backup, manifest)
    except (OSError, Refused) as exc:
        shutil.rmtree(backup, ignore_errors=True)
        raise RmqStoreError(f"could not back up into {backup}: {exc}; nothing in the store was changed") from None
    for step, entry, target in zip(steps, manifest["steps"], targets):
        try:
            entry["new_sha256"] = _change(step, target, root, content, cfg)
        except BaseException as exc:  # a full disk, an I/O error, an interrupt: put back what was changed
            _roll_back(root, backup, manifest, f"{step.action} {step.file}: {exc or type(exc).__name__}")
        print(f"  done     {step.action} {step.file}", file=sys.stderr)
    manifest["state"] = "applied"
    _write_manifest(backup, manifest)
    shutil.rmtree(root / TMP_DIR, ignore_errors=True)
    return manifest


def _roll_back(root: Path, backup: Path, manifest: dict[str, Any], failure: str) -> NoReturn:
    """After a failed change: put the store back from the backup, then raise saying what happened."""
    shutil.rmtree(root / TMP_DIR, ignore_errors=True)  # the failed step's temporary file: space for the undo
    try:
        _restore(root, backup, manifest)
        manifest["state"] = "rolled-back"
        _write_manifest(backup, manifest)
    except Exception as exc:
        raise RmqStoreError(
            f"recover --apply failed at {failure}; undoing it failed too ({exc}); the store is half-changed: "
            f"once the cause is fixed run: rmqstore recover --store {root} --undo {backup}"
        ) from None
    raise RmqStoreError(
        f"recover --apply failed at {failure}; every change was undone, the store is as it was "
        f"(backup kept in {backup})"
    )


def _write_manifest(backup: Path, manifest: dict[str, Any]) -> None:
    tmp = backup / f".{MANIFEST}.tmp"
    _write_durably(tmp, [Piece.of_bytes((json.dumps(manifest, indent=1) + "\n").encode())])
    os.replace(tmp, backup / MANIFEST)
    _fsync_dir(backup)


def read_manifest(backup: Path, root: Path) -> dict[str, Any]:
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
    for entry in steps:
        if not _is_step_entry(entry):
            raise BadInput(f"{path}: {str(entry)[:200]} is not a step recover writes")
        store_target(root, entry["file"])
        saved = real_path(str(backup / entry["backup"])) if entry["backup"] is not None else None
        if saved is not None and not inside(saved, real_path(str(backup))):
            raise Refused(f"{path}: backup copy {entry['backup']!r} lies outside the backup directory")
    for d in dirs:
        store_target(root, d)
    return manifest


def _is_step_entry(entry: object) -> bool:
    """A manifest step as ``apply`` writes it: action, file, and for a backed-up file its copy and sha256."""
    if not isinstance(entry, dict) or entry.get("action") not in ACTIONS or not isinstance(entry.get("file"), str):
        return False
    if "backup" not in entry or entry["backup"] is None:
        return "backup" in entry
    offset_ok = entry["action"] != "truncate" or isinstance(entry.get("offset"), int)
    return isinstance(entry["backup"], str) and isinstance(entry.get("sha256"), str) and offset_ok


def _restore(root: Path, backup: Path, manifest: dict[str, Any]) -> None:
    """Put back every backed-up file (reverse order), delete created files, then the directories recover made."""
    for entry in reversed(manifest["steps"]):
        target = store_target(root, entry["file"])
        if entry["backup"] is None:  # the file did not exist before: recover created it
            if target.exists():
                target.unlink()
                _fsync_dir(target.parent)
            continue
        copy = backup / entry["backup"]
        saved = [Piece.of_file(copy, 0, copy.stat().st_size)]
        if entry["action"] == "truncate":
            saved.insert(0, Piece.of_file(target, 0, entry["offset"]))
        tmp, sha256 = _write_tmp(root, saved)
        if sha256 != entry["sha256"]:
            tmp.unlink()
            raise Refused(f"backup of {entry['file']} does not match its sha256 in the manifest")
        _rename_into(tmp, target)
        print(f"  restored {entry['file']}", file=sys.stderr)
    for d in reversed(manifest.get("created_dirs", [])):
        path = store_target(root, d)
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
            _fsync_dir(path.parent)
    shutil.rmtree(root / TMP_DIR, ignore_errors=True)


def undo(store: str, backup: Path) -> dict[str, Any]:
    """Put back every file of BACKUP's manifest (reverse order) and delete the files and directories recover created."""
    check_stopped(store)
    root = local_path(store)
    manifest = read_manifest(backup, root)
    _restore(root, backup, manifest)
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
    backup = check_backup_dir(store, backup_dir or default_backup_dir(store)) if do_apply else None
    before = audited or audit(run, store, rebuilt, report_dir and join(report_dir, "before"))
    if before.exit_code == EXIT_CANNOT:
        raise Refused("the store could not be audited: " + "; ".join(f.message for f in before.findings[:3]))
    planned = plan(before, truncate_torn_tail)
    steps = list(planned.steps)
    for note in planned.notes:
        print(f"  note: {note}")
    if not steps:
        print("recover: nothing to change")
        return EXIT_OK
    print("\n".join(plan_lines(before.report, [s.to_dict() for s in steps], str(backup) if backup else None)))
    if backup is None:
        print("recover: dry run; nothing was changed (--apply to make these changes)")
        return EXIT_OK
    check_stopped(store)
    apply(steps, store, rebuilt, backup, run.cfg)
    print(f"recover: applied; backup in {backup} (undo: rmqstore recover --store {store} --undo {backup})")
    after = audit(run, store, rebuilt, report_dir and join(report_dir, "after"))
    for f in after.findings:
        if is_divergence(f):
            print(f"  after: {f.severity.upper():7} {f.kind}: {f.file}: {f.message}")
    line, code = closing_line(after.report)
    print(line)
    return code
