"""A rebuild's output: OUT checked before anything runs (never inside the store, only a previous rebuild replaced),
the checkpoint written into the staging directory, and the staging directory published (by rename; on an object
store the files are written in place and rebuild.json, written last, is the commit).
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow.fs as pafs

from jobs.pipeline.listing import check_outside_store
from jobs.pipeline.store_rules import read_at
from storelib.errors import BadInput
from storelib.formats.checkpoint import Checkpoint
from storelib.layout import CHECKPOINT, CONSUMEQUEUE, INDEX
from storelib.reports.report import REBUILD_REPORT, IndexFileRecord
from udfs.fs import delete_tree, join, resolve


def check_output(store: str, out: str, work_dir: str | None = None) -> None:
    """OUT and the work directory are never inside the store, nor the store inside them, links followed."""
    check_outside_store(store, out, "--out")
    if work_dir is not None:
        check_outside_store(store, work_dir, "--work-dir")
    fs, out_path = resolve(out)
    info = fs.get_file_info(out_path)
    if info.type == pafs.FileType.File:
        raise BadInput(f"--out {out} is a file")
    nonempty = info.type == pafs.FileType.Directory and fs.get_file_info(pafs.FileSelector(out_path))
    if nonempty and fs.get_file_info(join(out_path, REBUILD_REPORT)).type != pafs.FileType.File:
        raise BadInput(f"--out {out} is a non-empty directory that is not a previous rebuild; refusing to replace it")


def publish(staging: str, out: str) -> None:
    """Replace OUT with the staging directory: the old output is moved aside, then removed.

    On an object store there is no rename: the files were written to their final keys (``in_place``) and
    rebuild.json, written last, is the commit.
    """
    if staging == out:
        return
    fs, out_path = resolve(out)
    _, staging_path = resolve(staging)
    old = None
    if fs.get_file_info(out_path).type == pafs.FileType.Directory:
        old = f"{out_path}.rmqstore-old-{uuid.uuid4().hex[:8]}"
        fs.move(out_path, old)
    fs.move(staging_path, out_path)
    if old:
        fs.delete_dir(old)


def in_place(out: str) -> str:
    """Object stores: OUT itself, emptied of a previous rebuild, its rebuild.json (the commit) removed first, so
    a failed run leaves no rebuild.json and is never taken for a rebuild."""
    delete_tree(f"{out.rstrip('/')}/{REBUILD_REPORT}")
    for part in (CHECKPOINT, CONSUMEQUEUE, INDEX):
        delete_tree(f"{out.rstrip('/')}/{part}")
    return out


def live_checkpoint(store: str) -> Checkpoint | None:
    """The store's checkpoint, None when missing or shorter than its first five fields."""
    fs, root = resolve(store)
    data = read_at(fs, join(root, CHECKPOINT), 0, 48)
    return Checkpoint.unpack(data) if len(data) >= 40 else None


def rebuilt_checkpoint(summaries: Any, index_files: list[IndexFileRecord]) -> Checkpoint:
    """physicMsgTimestamp = the last message's store time, logicsMsgTimestamp = the last ConsumeQueue-dispatched
    message's, indexMsgTimestamp = the last IndexFile's endTimestamp (every rebuilt file is complete); the 5.x
    offsets are the live checkpoint's (``Checkpoint.with_5x_fields_of``)."""
    summaries = list(summaries)
    return Checkpoint(
        physic_msg_timestamp=max((s.last_store_timestamp for s in summaries), default=0),
        logics_msg_timestamp=max((s.last_cq_store_timestamp for s in summaries), default=0),
        index_msg_timestamp=index_files[-1].end_timestamp if index_files else 0,
    )
