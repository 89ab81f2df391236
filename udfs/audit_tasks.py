"""Audit work that runs on executors: live files are read here, through udfs.fs, never on the driver.

Each function takes paths relative to a store root (``consumequeue/<topic>/<queueId>/<name>``,
``index/<name>``) and returns findings, so a task's output is small whatever the size of the files it read.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

import pyarrow.fs as pafs

from storelib.audit.index_headers import check_index_header, compare_index_files, index_entries
from storelib.audit.index_ranges import (
    WHOLE_RANGE,
    EntryScope,
    IndexPart,
    PairPart,
    RangeComparison,
    compare_index_range,
)
from storelib.audit.queues import QueueAudit, classify_queue
from storelib.broker.config import BrokerConfig
from storelib.constants import CHECKPOINT_SIZE, PROPERTY_TAGS
from storelib.errors import StoreFormatError
from storelib.findings import Finding, finding
from storelib.formats.checkpoint import Checkpoint
from storelib.formats.commitlog import decode_message
from storelib.formats.indexfile import IndexFileReader, IndexHeader
from storelib.formats.javahash import java_hash
from storelib.layout import commitlog_file, index_file, offset_file_name, queue_dir
from udfs.fs import join, map_file, read_file, resolve


def unreadable(rel: str, exc: BaseException, **where: Any) -> Finding:
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return finding("unreadable-file", rel, f"cannot read: {reason}; not audited", **where)


def _read(store: str, rel: str) -> bytes:
    fs, root = resolve(store)
    return read_file(fs, join(root, rel))


def _map(store: str, rel: str) -> bytes | memoryview:
    fs, root = resolve(store)
    return map_file(fs, join(root, rel))


@dataclasses.dataclass(frozen=True)
class QueueTask:
    """One queue to audit: its live and rebuilt file names."""

    topic: str
    queue_id: int
    live_files: tuple[str, ...]
    rebuilt_files: tuple[str, ...]


def audit_queue(
    task: QueueTask,
    store: str,
    rebuilt: str,
    cfg: BrokerConfig,
    cl_min: int,
    cl_max: int,
    damaged: tuple[tuple[int, int], ...] = (),
) -> QueueAudit:
    """One queue: its live and rebuilt files read and classified; without a row when a live file cannot be read.
    ``damaged``: the commitlog ranges of damaged records (storelib.audit.queues.classify_queue)."""
    topic, queue_id = task.topic, task.queue_id
    rel_dir = queue_dir(topic, queue_id)
    live: dict[str, bytes] = {}
    for name in task.live_files:
        try:
            live[name] = _read(store, f"{rel_dir}/{name}")
        except OSError as exc:
            f = unreadable(f"{rel_dir}/{name}", exc, topic=topic, queue_id=queue_id)
            return QueueAudit(topic, queue_id, [f], None, [], [])
    rebuilt_files = {name: _read(rebuilt, f"{rel_dir}/{name}") for name in task.rebuilt_files}
    tags = record_tags_hash(store, cfg)
    return classify_queue(topic, queue_id, live, rebuilt_files, cfg, cl_min, cl_max, tags, damaged)


def record_tags_hash(store: str, cfg: BrokerConfig) -> Callable[[int, int], int | None]:
    """(commitlog offset, size) -> hashCode of the TAGS of the record there, read from the store's segment."""

    def tags_hash(offset: int, size: int) -> int | None:
        start = offset - offset % cfg.mappedFileSizeCommitLog
        fs, root = resolve(store)
        try:
            with fs.open_input_file(join(root, commitlog_file(offset_file_name(start)))) as f:
                data = f.read_at(size, offset - start)
            tags = decode_message(data, 0).property_map().get(PROPERTY_TAGS)
        except (OSError, StoreFormatError, struct.error):
            return None
        return java_hash(tags) if tags else 0

    return tags_hash


@dataclasses.dataclass(frozen=True)
class IndexPosition:
    """The live IndexFile at one position against the rebuilt one (``audit_index_file``)."""

    position: int
    live: str | None  # the live file's name, None when it has none there
    rebuilt: str | None
    header: IndexHeader | None = None  # the live file's, when it reads
    findings: tuple[Finding, ...] = ()
    ranges: tuple[int, ...] = ()  # the commitlog ranges the live file's entries in scope fall in
    rebuilt_entries: int = 0  # the rebuilt file's entries in scope
    unreadable: bool = False

    def to_json(self) -> dict[str, object]:
        """report.json's ``index_files`` entry: the position, both names and the live header."""
        header = dataclasses.asdict(self.header) if self.header else None
        out: dict[str, object] = {
            "position": self.position,
            "live": self.live,
            "rebuilt": self.rebuilt,
            "header": header,
        }
        return out | ({"unreadable": True} if self.unreadable else {})


def audit_index_file(
    pair: tuple[int, str | None, str | None], store: str, rebuilt: str, cfg: BrokerConfig, entries: EntryScope
) -> IndexPosition:
    """The live IndexFile at one position against the rebuilt one: header checks and the first difference, the
    commitlog ranges of its entries and the rebuilt file's entry count, both within ``entries`` (the entry
    comparison's scope)."""
    position, live_name, rebuilt_name = pair
    at = IndexPosition(position, live_name, rebuilt_name)
    built = None if rebuilt_name is None else _map(rebuilt, index_file(rebuilt_name))
    if built is not None:
        in_scope = int(entries.keep(index_entries(IndexFileReader(built, cfg))[1]).sum())
        at = dataclasses.replace(at, rebuilt_entries=in_scope)
    if live_name is None:
        assert rebuilt_name is not None  # a position has a live file, a rebuilt one or both
        why = f"the rebuilt index has a file at position {position} (rebuilt {rebuilt_name}), the live one does not"
        return dataclasses.replace(at, findings=(finding("index-missing-file", index_file(rebuilt_name), why),))
    rel = index_file(live_name)
    try:
        live = _map(store, rel)
    except OSError as exc:
        return dataclasses.replace(at, findings=(unreadable(rel, exc),), unreadable=True)
    try:
        reader = IndexFileReader(live, cfg, rel)
    except StoreFormatError as exc:
        findings = [finding("index-header-inconsistent", rel, exc.reason)]
    else:
        at = dataclasses.replace(at, header=reader.header, ranges=tuple(entries.ranges(index_entries(reader)[1])))
        findings = check_index_header(rel, reader, cfg)
    if built is None:
        findings.append(
            finding("index-extra-file", rel, f"live file at position {position} has no rebuilt counterpart")
        )
    else:
        assert rebuilt_name is not None  # it was read
        findings += compare_index_files(rel, live, rebuilt_name, built, cfg)
    return dataclasses.replace(at, findings=tuple(findings))


@dataclasses.dataclass(frozen=True)
class IndexRangeTask:
    """One commitlog range (its number in the audit's EntryScope), the live and rebuilt IndexFiles with entries
    there, and the part of its pairs compared (storelib.audit.index_ranges.PairPart)."""

    range: int
    live: tuple[str, ...]
    rebuilt: tuple[str, ...]
    part: PairPart = WHOLE_RANGE


def audit_index_range(
    task: IndexRangeTask, store: str, rebuilt: str, cfg: BrokerConfig, entries: EntryScope, threshold: int
) -> RangeComparison:
    """One commitlog range, or a part of its pairs: the live entries against the rebuilt ones and the broker's
    lookup (storelib.audit.index_ranges.compare_index_range)."""

    def parts(root: str, names: tuple[str, ...], reach: bool) -> list[IndexPart]:
        out = []
        for name in names:
            try:
                reader = IndexFileReader(_map(root, index_file(name)), cfg, name)
            except (OSError, StoreFormatError):
                continue  # reported by audit_index_file
            out.append(IndexPart.of(reader, lambda phy: entries.in_range(phy, task.range), reach, task.part))
        return out

    return compare_index_range(parts(store, task.live, True), parts(rebuilt, task.rebuilt, False), threshold)


@dataclasses.dataclass(frozen=True)
class LiveControl:
    """What the broker's next start reads besides the log: the checkpoint (None when missing or short) and
    whether the ``abort`` file exists (the broker did not shut down cleanly)."""

    checkpoint: Checkpoint | None
    abort: bool


def read_checkpoint(store: str) -> LiveControl:
    """The live store's checkpoint and abort file."""
    fs, root = resolve(store)
    abort = fs.get_file_info(join(root, "abort")).type == pafs.FileType.File
    try:
        data = read_file(fs, join(root, "checkpoint"))
    except OSError:
        return LiveControl(None, abort)
    return LiveControl(Checkpoint.unpack(data) if len(data) == CHECKPOINT_SIZE else None, abort)
