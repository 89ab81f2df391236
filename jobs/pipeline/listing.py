"""Listing a store on the driver: names and sizes only (contents are read on executors), and its state."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import posixpath
import sys
from collections.abc import Mapping

import pyarrow.fs as pafs

from jobs.pipeline.liveness import lock_held
from storelib.broker.config import BrokerConfig, load_store_config
from storelib.broker.segments import ListedFile
from storelib.errors import BadInput
from storelib.findings import Finding, finding
from storelib.formats.consumequeue import CONSUME_QUEUE, QueueFormat
from storelib.layout import (
    COMMITLOG,
    INDEX,
    inside,
    is_index_name,
    is_local,
    is_valid_topic,
    parse_offset_name,
    parse_queue_id,
    segment_dirs,
)
from udfs.fs import join, list_files, resolve


def segment_files(store: str) -> tuple[list[str], list[ListedFile]]:
    """The store-relative directories holding log segments that exist (``commitlog/``, ``dledger-<selfId>/data``:
    storelib.layout.segment_dirs), and every file in them (names and sizes, nothing read)."""
    fs, root = resolve(store)
    entries = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    names = [i.base_name for i in entries if i.type == pafs.FileType.Directory]
    dirs = [d for d in segment_dirs(names) if fs.get_file_info(join(root, d)).type == pafs.FileType.Directory]
    listed = [
        ListedFile(i.base_name, i.size, f"{store.rstrip('/')}/{d}/{i.base_name}" if "://" in store else i.path, d)
        for d in dirs
        for i in list_files(fs, join(root, d))
    ]
    return dirs, listed


def store_broker_config(store: str, path: str | None) -> BrokerConfig:
    """The broker config of ``store``: the segment size read off its segment files when ``path`` does not set it.

    The note (size taken from the files, or a config contradicting them) goes to stderr.
    """
    sizes = [f.size for f in segment_files(store)[1] if parse_offset_name(f.name) is not None]
    cfg, note = load_store_config(path, sizes)
    if note:
        print(f"note: {note}", file=sys.stderr)
    return cfg


def real_path(uri: str) -> str:
    """The path ``uri`` names once every symbolic link is followed (local paths; other filesystems have none).

    A path that does not exist yet resolves through its longest existing prefix. A dangling link or a link loop
    on the way cannot be resolved: BadInput, so nothing is ever written where a link might lead.
    """
    if not is_local(uri):
        return posixpath.normpath(resolve(uri)[1])
    path = os.path.join(os.getcwd(), uri.removeprefix("file://"))
    head, rest = path, []
    while not os.path.lexists(head):
        head, name = os.path.split(head)
        rest.append(name)
    try:
        real = os.path.realpath(head, strict=True)
    except OSError as exc:
        raise BadInput(f"{uri}: cannot resolve {head} ({exc.strerror or exc}): a dangling symbolic link?") from None
    return os.path.normpath(os.path.join(real, *reversed(rest)))


def check_outside_store(store: str, uri: str, option: str) -> None:
    """Refuse an output ``uri`` that is (through links or not) inside the store or holds it: BadInput."""
    real, root = real_path(uri), real_path(store)
    if inside(real, root) or inside(root, real):
        raise BadInput(f"{option} {uri} ({real}) overlaps the store {root}: the tool never writes into a store")


def _entries(fs: pafs.FileSystem, path: str, rel: str, findings: list[Finding]) -> list[pafs.FileInfo]:
    """Directory entries of ``path``; names that are not UTF-8 and symbolic links are reported, not returned.

    A link is never followed (inspect's rule too): it may lead out of the store, where nothing is audited or
    written.
    """
    out: list[pafs.FileInfo] = []
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except OSError as exc:
        findings.append(finding("unreadable-file", rel, f"cannot list: {exc}; not audited"))
        return out
    for info in infos:
        try:
            info.base_name  # noqa: B018 - pyarrow decodes the name here
        except UnicodeDecodeError:
            findings.append(finding("hostile-name", rel, "an entry whose name is not UTF-8; not read"))
            continue
        if isinstance(fs, pafs.LocalFileSystem) and os.path.islink(info.path):
            message = f"a symbolic link (to {os.readlink(info.path)!r}); not followed"
            findings.append(finding("hostile-name", f"{rel}/{info.base_name}", message))
            continue
        out.append(info)
    return sorted(out, key=lambda i: i.base_name)


def list_queues(
    store: str, fmt: QueueFormat = CONSUME_QUEUE
) -> tuple[dict[tuple[str, int], dict[str, int]], list[Finding]]:
    """``<fmt.dir>/<topic>/<queueId>/<file>``: {(topic, queueId): {file name: size}}, and the names that are not
    read (hostile names, links, names that are not UTF-8, stray files)."""
    fs, root = resolve(store)
    findings: list[Finding] = []
    queues: dict[tuple[str, int], dict[str, int]] = {}
    for t in _entries(fs, join(root, fmt.dir), fmt.dir, findings):
        if not is_valid_topic(t.base_name) or t.type != pafs.FileType.Directory:
            message = f"{t.base_name!r} is not a legal topic directory name; not read"
            findings.append(finding("hostile-name", f"{fmt.dir}/{t.base_name!r}", message))
            continue
        rel = f"{fmt.dir}/{t.base_name}"
        for q in _entries(fs, t.path, rel, findings):
            queue_id = parse_queue_id(q.base_name)
            if queue_id is None or q.type != pafs.FileType.Directory:
                message = "not a queueId directory; not read"
                findings.append(finding("hostile-name", f"{rel}/{q.base_name!r}", message, topic=t.base_name))
                continue
            where = {"topic": t.base_name, "queue_id": queue_id}
            files = queues.setdefault((t.base_name, queue_id), {})
            for f in _entries(fs, q.path, f"{rel}/{q.base_name}", findings):
                if parse_offset_name(f.base_name) is not None and f.type == pafs.FileType.File:
                    files[f.base_name] = f.size
                else:
                    message = f"not a {fmt.name} file name; ignored"
                    findings.append(finding("stray-file", f"{rel}/{q.base_name}/{f.base_name!r}", message, **where))
    return queues, findings


def list_index(store: str) -> tuple[list[str], list[Finding]]:
    """index/<yyyyMMddHHmmssSSS> names in load order (the broker sorts them by name)."""
    fs, root = resolve(store)
    findings: list[Finding] = []
    names = []
    for f in _entries(fs, join(root, INDEX), INDEX, findings):
        if is_index_name(f.base_name) and f.type == pafs.FileType.File:
            names.append(f.base_name)
        else:
            findings.append(finding("stray-file", f"{INDEX}/{f.base_name!r}", "not an IndexFile name; ignored"))
    return names, findings


@dataclasses.dataclass(frozen=True)
class StoreState:
    """What changes while a broker writes, and when it was seen: log segment sizes and modification times (by
    store-relative path), and whether the lock is held."""

    commitlog: Mapping[str, tuple[int, int]]
    locked: bool
    at: dt.datetime


def store_state(store: str) -> StoreState:
    """The store's StoreState now."""
    fs, root = resolve(store)
    dirs = segment_files(store)[0]
    files = {f"{d}/{i.base_name}": (i.size, i.mtime_ns) for d in dirs for i in list_files(fs, join(root, d))}
    return StoreState(files, lock_held(store), dt.datetime.now(dt.UTC))


def in_use_finding(before: StoreState, after: StoreState) -> Finding | None:
    """store-in-use when the commitlog changed during the audit or a broker holds the lock."""
    paths = set(before.commitlog) | set(after.commitlog)
    changed = sorted(n for n in paths if before.commitlog.get(n) != after.commitlog.get(n))
    if not changed and not after.locked:
        return None
    why = "the lock file is held by a running broker" if after.locked else ""
    if changed:
        why += ("; " if why else "") + f"commitlog files changed during the audit: {', '.join(changed[:5])}"
    return finding("store-in-use", "lock" if after.locked else COMMITLOG, why, count=len(changed))
