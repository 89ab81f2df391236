"""Audit work that runs on executors: live files are read here, through udfs.fs, never on the driver.

Each function takes paths relative to a store root (``consumequeue/<topic>/<queueId>/<name>``,
``index/<name>``) and returns findings as ``Finding`` dicts, so a task's output is small
whatever the size of the files it read.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import pyarrow.fs as pafs

from storelib.audit import (
    EntryScope,
    IndexPart,
    check_index_header,
    classify_queue,
    compare_index_files,
    compare_index_range,
    index_entries,
)
from storelib.checkpoint import Checkpoint
from storelib.commitlog import decode_message
from storelib.config import BrokerConfig
from storelib.constants import CHECKPOINT_SIZE, PROPERTY_TAGS
from storelib.errors import StoreFormatError
from storelib.findings import finding
from storelib.indexfile import IndexFileReader
from storelib.javahash import java_hash
from storelib.layout import commitlog_file, index_file, offset_file_name, queue_dir
from udfs.fs import join, map_file, read_file, resolve


def unreadable(rel: str, exc: BaseException) -> dict[str, Any]:
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return finding("unreadable-file", rel, f"cannot read: {reason}; not audited").to_dict()


def _read(store: str, rel: str) -> bytes:
    fs, root = resolve(store)
    return read_file(fs, join(root, rel))


def _map(store: str, rel: str) -> bytes | memoryview:
    fs, root = resolve(store)
    return map_file(fs, join(root, rel))


def audit_queue(row: dict[str, Any], store: str, rebuilt: str, cfg: BrokerConfig, cl_min: int, cl_max: int) -> str:
    """One queue: read its live and rebuilt files, classify; JSON of QueueAudit (findings as dicts)."""
    topic, queue_id = row["topic"], row["queue_id"]
    rel_dir = queue_dir(topic, queue_id)
    live: dict[str, bytes] = {}
    for name in row["live_files"] or []:
        try:
            live[name] = _read(store, f"{rel_dir}/{name}")
        except OSError as exc:
            f = unreadable(f"{rel_dir}/{name}", exc)
            f.update(topic=topic, queue_id=queue_id)
            return json.dumps({"findings": [f], "row": None, "write": [], "delete": [], "unreadable": True})
    rebuilt_files = {name: _read(rebuilt, f"{rel_dir}/{name}") for name in row["rebuilt_files"] or []}
    qa = classify_queue(topic, queue_id, live, rebuilt_files, cfg, cl_min, cl_max, record_tags_hash(store, cfg))
    return json.dumps(
        {
            "findings": [f.to_dict() for f in qa.findings],
            "row": qa.row,
            "write": qa.write,
            "delete": qa.delete,
            "unreadable": False,
        }
    )


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


def audit_index_file(
    pair: tuple[int, str | None, str | None], store: str, rebuilt: str, cfg: BrokerConfig, entries: EntryScope
) -> dict[str, Any]:
    """The live IndexFile at one position against the rebuilt one: header checks and the first difference;
    ``ranges``: the commitlog ranges its entries fall in, ``rebuilt_entries``: the rebuilt file's entries, both
    within ``entries`` (the entry comparison's scope)."""
    position, live_name, rebuilt_name = pair
    out: dict[str, Any] = {"position": position, "live": live_name, "rebuilt": rebuilt_name, "header": None}
    out["ranges"], out["rebuilt_entries"], findings = [], 0, []
    built = None if rebuilt_name is None else _map(rebuilt, index_file(rebuilt_name))
    if built is not None:
        out["rebuilt_entries"] = int(entries.keep(index_entries(IndexFileReader(built, cfg))[2]).sum())
    if live_name is None:
        findings.append(
            finding(
                "index-missing-file",
                index_file(rebuilt_name),
                f"the rebuilt index has a file at position {position} (rebuilt {rebuilt_name}), the live one does not",
            ).to_dict()
        )
        out["findings"] = findings
        return out
    rel = index_file(live_name)
    try:
        live = _map(store, rel)
    except OSError as exc:
        out["findings"] = [unreadable(rel, exc)]
        out["unreadable"] = True
        return out
    try:
        reader = IndexFileReader(live, cfg, rel)
    except StoreFormatError as exc:
        findings.append(finding("index-header-inconsistent", rel, exc.reason).to_dict())
    else:
        out["header"] = reader.header.__dict__
        out["ranges"] = entries.ranges(index_entries(reader)[2])
        findings += [f.to_dict() for f in check_index_header(rel, reader, cfg)]
    if built is None:
        findings.append(
            finding("index-extra-file", rel, f"live file at position {position} has no rebuilt counterpart").to_dict()
        )
    else:
        findings += [f.to_dict() for f in compare_index_files(rel, live, rebuilt_name, built, cfg)]
    out["findings"] = findings
    return out


def audit_index_range(
    task: dict[str, Any], store: str, rebuilt: str, cfg: BrokerConfig, entries: EntryScope, threshold: int
) -> dict[str, Any]:
    """One commitlog range (``task``: its number, the live and rebuilt files with entries there): the live
    entries against the rebuilt ones and the broker's lookup (storelib.audit.compare_index_range)."""

    def parts(root: str, names: list[str], reach: bool) -> list[IndexPart]:
        out = []
        for name in names:
            try:
                reader = IndexFileReader(_map(root, index_file(name)), cfg, name)
            except (OSError, StoreFormatError):
                continue  # reported by audit_index_file
            out.append(IndexPart.of(reader, lambda phy: entries.in_range(phy, task["range"]), reach))
        return out

    return compare_index_range(parts(store, task["live"], True), parts(rebuilt, task["rebuilt"], False), threshold)


def read_checkpoint(store: str) -> dict[str, Any]:
    """The live checkpoint's fields (None when missing or short) and whether ``abort`` exists."""
    fs, root = resolve(store)
    abort = fs.get_file_info(join(root, "abort")).type == pafs.FileType.File
    try:
        data = read_file(fs, join(root, "checkpoint"))
    except OSError:
        return {"checkpoint": None, "abort": abort}
    if len(data) != CHECKPOINT_SIZE:
        return {"checkpoint": None, "abort": abort}
    return {"checkpoint": Checkpoint.unpack(data).__dict__, "abort": abort}
