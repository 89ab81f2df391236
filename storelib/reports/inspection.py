"""Describe a store without changing it: commitlog segments, ConsumeQueue queues, IndexFiles, checkpoint.

Everything is opened read-only. A directory name under ``consumequeue/`` that is not a legal
topic (``TopicValidator``: ``[%|a-zA-Z0-9_-]``, at most 127 characters) or queueId (decimal
digits), and any symbolic link there, is reported and never followed.

- Segments: named by their 20-digit start offset, ``mappedFileSizeCommitLog`` bytes each; the
  records end at a BLANK (a full segment), at zero bytes (preallocated tail), or at damage.
- Queues: 20-byte units; a unit is valid while ``offset >= 0 and size > 0``; a queue's first file
  may start with pre-blank units (offset 0, size 0x7fffffff) when older messages were deleted.
- IndexFiles: the 40-byte header; a file holding maxIndexNum - 1 entries shows indexCount maxIndexNum.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections import Counter
from pathlib import Path

import numpy as np

from storelib.broker.config import BrokerConfig
from storelib.broker.timers import timer_records
from storelib.constants import (
    CHECKPOINT_SIZE,
)
from storelib.errors import HostileNameError, StoreFormatError
from storelib.formats.checkpoint import Checkpoint
from storelib.formats.consumequeue import CONSUME_QUEUE, decode_units, is_pre_blank
from storelib.formats.indexfile import IndexHeader, IndexLayout, index_file_size
from storelib.formats.scanner import (
    COMMITLOG_FRAMING,
    DLEDGER_FRAMING,
    END_BLANK,
    END_EOF,
    END_ZERO_TAIL,
    SegmentScanner,
)
from storelib.layout import (
    ABORT,
    CHECKPOINT,
    COMMITLOG,
    CONSUMEQUEUE,
    INDEX,
    LOCK,
    is_dledger_data,
    is_index_name,
    offset_file_name,
    offset_layout_problems,
    parse_offset_name,
    parse_queue_id,
    queue_dir,
    segment_dirs,
    validate_topic,
)

_MAX_LISTED = 10  # damaged records listed per segment


@dataclasses.dataclass(frozen=True)
class SegmentInfo:
    name: str
    start_offset: int
    file_size: int
    end_offset: int  # commitlog offset where the valid records end
    records: int
    end: str  # why records stop: blank, zero-tail, eof, torn, bad-magic, bad-size, bad-blank
    end_detail: str
    damage: list[dict[str, object]]  # records that framed but failed a check: kind, offset, detail
    first_store_timestamp: int | None
    last_store_timestamp: int | None
    dir: str = COMMITLOG  # the store-relative directory: commitlog, or dledger-<selfId>/data


@dataclasses.dataclass(frozen=True)
class QueueInfo:
    topic: str
    queue_id: int
    files: int
    first_file: str | None
    last_file: str | None
    entries: int  # valid units that are not pre-blank
    pre_blank: int  # pre-blank units before the first entry
    min_offset: int | None  # queue offset of the first entry
    max_offset: int | None  # queue offset of the last entry
    stale_units: int  # non-zero units after the queue's end (a truncated dirty tail)
    problems: list[str]


@dataclasses.dataclass(frozen=True)
class IndexInfo:
    name: str
    file_size: int
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int  # entries + 1 (entry 0 is never used)
    full: bool
    problems: list[str]


@dataclasses.dataclass(frozen=True)
class StoreReport:
    root: str
    config: dict[str, object]
    segments: list[SegmentInfo]
    topics: dict[str, int]  # message records per topic in the commitlog
    queues: list[QueueInfo]
    index_files: list[IndexInfo]
    checkpoint: dict[str, int] | None
    abort: bool  # the broker is running, or crashed
    lock: bool
    problems: list[str]  # whatever is wrong with the store as a whole: names, sizes, missing files

    @property
    def messages(self) -> int:
        return sum(s.records for s in self.segments)

    @property
    def blanks(self) -> int:
        return sum(s.end == END_BLANK for s in self.segments)

    @property
    def cq_files(self) -> int:
        return sum(q.files for q in self.queues)

    @property
    def clean(self) -> bool:
        """Nothing beyond what a cleanly stopped, undamaged store shows."""
        return not self.all_problems()

    def all_problems(self) -> list[str]:
        """Every problem, one line each, naming the store-relative file."""
        out = list(self.problems)
        if self.abort:
            out.append("abort: present, so the broker is running or did not shut down cleanly")
        # a full segment ends with a BLANK; only the last written one may end in zeros (or run to its end);
        # empty segments after it are preallocated ones a crash leaves behind
        last = max((i for i, s in enumerate(self.segments) if s.records or s.end != END_ZERO_TAIL), default=-1)
        for i, s in enumerate(self.segments):
            rel = f"{s.dir}/{s.name}"
            if not (s.end == END_BLANK or (i >= last and s.end in (END_ZERO_TAIL, END_EOF))):
                detail = f" ({s.end_detail})" if s.end_detail else ""
                out.append(f"{rel}: records stop at offset {s.end_offset}: {s.end}{detail}")
            out += [f"{rel}: {d['kind']} at offset {d['offset']}: {d['detail']}" for d in s.damage[:_MAX_LISTED]]
            if len(s.damage) > _MAX_LISTED:
                out.append(f"{rel}: {len(s.damage) - _MAX_LISTED} more damaged records")
        out += [f"{queue_dir(q.topic, q.queue_id)}: {p}" for q in self.queues for p in q.problems]
        out += [f"{INDEX}/{printable(f.name)}: {p}" for f in self.index_files for p in f.problems]
        return out

    def to_dict(self) -> dict[str, object]:
        out = dataclasses.asdict(self)
        out["totals"] = {
            "segments": len(self.segments),
            "messages": self.messages,
            "blanks": self.blanks,
            "queues": len(self.queues),
            "cq_files": self.cq_files,
            "cq_entries": sum(q.entries for q in self.queues),
            "index_files": len(self.index_files),
            "index_entries": sum(max(f.index_count - 1, 0) for f in self.index_files),
            "clean": self.clean,
            "problems": self.all_problems(),
        }
        return out


def printable(name: str) -> str:
    """A file name as it can be shown: itself, or its repr when it holds control characters."""
    return name if name.isprintable() else repr(name)


def inspect_store(root: str | Path, cfg: BrokerConfig, timer_batches: list | None = None) -> StoreReport:
    """Read everything under ``root`` (read-only) and describe it; ``timer_batches`` receives the records of timers
    and delay levels (storelib.broker.timers.timer_records) met on the way."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"no store directory at {root}")
    problems: list[str] = []
    topics: Counter[str] = Counter()
    dirs = segment_dirs([e.name for e in _listing(root, problems) if e.is_dir()])
    segments = [s for d in dirs for s in _segments(root, d, cfg, topics, problems, timer_batches)]
    # a broker creates consumequeue/, index/ and checkpoint once it dispatches its first message
    written = any(s.records for s in segments)
    queues = _queues(root / CONSUMEQUEUE, cfg, problems, required=written)
    index_files = _index_files(root / INDEX, cfg, problems, required=written and cfg.messageIndexEnable)
    checkpoint = None
    path = root / CHECKPOINT
    if path.is_file():
        data = path.read_bytes()
        if len(data) != CHECKPOINT_SIZE:
            problems.append(f"checkpoint is {len(data)} bytes, expected {CHECKPOINT_SIZE}")
        with contextlib.suppress(StoreFormatError):  # too short to hold its fields: reported above
            checkpoint = dataclasses.asdict(Checkpoint.unpack(data))
    elif written:
        problems.append("no checkpoint file")
    return StoreReport(
        root=str(root),
        config=cfg.to_dict(),
        segments=segments,
        topics=dict(sorted(topics.items())),
        queues=queues,
        index_files=index_files,
        checkpoint=checkpoint,
        abort=(root / ABORT).exists(),
        lock=(root / LOCK).exists(),
        problems=problems,
    )


def _listing(directory: Path, problems: list[str], required: bool = True) -> list[os.DirEntry]:
    """Entries of ``directory`` sorted by name; a missing ``required`` directory is a problem, not an error."""
    if not directory.is_dir():
        if required:
            problems.append(f"no {directory.name}/ directory")
        return []
    with os.scandir(directory) as it:
        return sorted(it, key=lambda e: e.name)


def _segments(
    root: Path,
    directory: str,
    cfg: BrokerConfig,
    topics: Counter[str],
    problems: list[str],
    timer_batches: list | None = None,
) -> list[SegmentInfo]:
    """The segments in ``root/directory`` (commitlog/, or DLedger data files), each scanned."""
    out: list[SegmentInfo] = []
    size = cfg.mappedFileSizeCommitLog
    entries = []
    for entry in _listing(root / directory, problems):
        if parse_offset_name(entry.name) is None or not entry.is_file() or entry.is_symlink():
            problems.append(
                f"{directory}/{printable(entry.name)}: not a commitlog segment (name, type or a link), skipped"
            )
            continue
        entries.append(entry)
    for kind, start, expected in offset_layout_problems([int(e.name) for e in entries], size):
        rel = f"{directory}/{offset_file_name(start)}"
        if kind == "misaligned":
            problems.append(f"{rel}: start offset is not a multiple of the segment size {size}")
        else:
            problems.append(f"{rel}: segments from {offset_file_name(expected)} up to here are missing")
    framing = DLEDGER_FRAMING if is_dledger_data(directory) else COMMITLOG_FRAMING
    for entry in entries:
        rel = f"{directory}/{entry.name}"
        start = int(entry.name)
        file_size = entry.stat().st_size
        if file_size != size:
            problems.append(f"{rel}: {file_size} bytes, but the segment size is {size} (the broker will not load it)")
        first_ts = None
        with open(entry.path, "rb") as f:
            scanner = SegmentScanner(f, rel, start, size, check_crc=cfg.checkCRCOnRecover, framing=framing)
            for batch in scanner:
                if first_ts is None:
                    first_ts = int(batch.store_timestamp[0])
                topics.update(batch.topic)
                if timer_batches is not None and (found := timer_records(batch)) is not None:
                    timer_batches.append(found)
        end = scanner.end
        assert end is not None  # set when the scan is done
        out.append(
            SegmentInfo(
                name=entry.name,
                start_offset=start,
                file_size=file_size,
                end_offset=end.offset,
                records=scanner.messages,
                end=end.reason,
                end_detail=end.detail,
                damage=[{"kind": d.kind, "offset": d.offset, "detail": d.detail} for d in scanner.damage],
                first_store_timestamp=first_ts,
                last_store_timestamp=scanner.last_store_timestamp if scanner.messages else None,
                dir=directory,
            )
        )
    return out


def _queues(directory: Path, cfg: BrokerConfig, problems: list[str], required: bool) -> list[QueueInfo]:
    out: list[QueueInfo] = []
    for topic_entry in _listing(directory, problems, required):
        rel = f"{CONSUMEQUEUE}/{printable(topic_entry.name)}"
        try:
            validate_topic(topic_entry.name)
        except HostileNameError as exc:
            problems.append(f"{rel}: {exc.reason}; not followed")
            continue
        if topic_entry.is_symlink() or not topic_entry.is_dir():
            problems.append(f"{rel}: not a directory (or a symbolic link); not followed")
            continue
        with os.scandir(topic_entry.path) as it:
            queue_entries = sorted(it, key=lambda e: e.name)
        for queue_entry in queue_entries:
            qrel = f"{CONSUMEQUEUE}/{topic_entry.name}/{printable(queue_entry.name)}"
            if parse_queue_id(queue_entry.name) is None:
                problems.append(f"{qrel}: not a queueId; not followed")
            elif queue_entry.is_symlink() or not queue_entry.is_dir():
                problems.append(f"{qrel}: not a directory (or a symbolic link); not followed")
            else:
                out.append(_queue(Path(queue_entry.path), topic_entry.name, int(queue_entry.name), cfg))
    out.sort(key=lambda q: (q.topic, q.queue_id))
    return out


def _queue_files(directory: Path, file_size: int) -> tuple[list[os.DirEntry[str]], list[str]]:
    """A queue directory's ConsumeQueue files in order (links are not followed), and what is wrong with its names."""
    problems: list[str] = []
    files = []
    with os.scandir(directory) as it:
        for entry in sorted(it, key=lambda e: e.name):
            if parse_offset_name(entry.name) is not None and entry.is_file() and not entry.is_symlink():
                files.append(entry)
            else:
                problems.append(f"{printable(entry.name)}: not a ConsumeQueue file; skipped")
    for kind, start, expected in offset_layout_problems([int(e.name) for e in files], file_size):
        if kind == "misaligned":
            problems.append(f"{offset_file_name(start)}: start offset is not a multiple of the file size {file_size}")
        else:
            problems.append(
                f"{offset_file_name(start)}: files from {offset_file_name(expected)} up to here are missing"
            )
    return files, problems


def _queue(directory: Path, topic: str, queue_id: int, cfg: BrokerConfig) -> QueueInfo:
    """One queue's files in order: entries up to the first invalid unit, pre-blank units, stale units."""
    file_size = cfg.cq_file_size
    files, problems = _queue_files(directory, file_size)
    entries = pre_blank = stale = 0
    min_offset = max_offset = None
    ended_in = None  # file where the queue's valid units end
    for entry in files:
        with open(entry.path, "rb") as f:
            data = f.read()
        if len(data) != file_size:
            problems.append(f"{entry.name}: {len(data)} bytes, expected {file_size} (the broker refuses to load it)")
        units = decode_units(data)
        if ended_in is not None:
            stale += _nonzero_units(units)
            problems.append(f"{entry.name}: after the queue's end in {ended_in}")
            continue
        n = CONSUME_QUEUE.valid_prefix(units)
        blank = is_pre_blank(units[:n])
        real = np.flatnonzero(~blank)
        later_blanks = int(blank.sum())
        if min_offset is None:
            before = int(real[0]) if len(real) else n
            pre_blank += before
            later_blanks -= before
        if later_blanks:
            problems.append(f"{entry.name}: {later_blanks} pre-blank units after the first entry")
        if len(real):
            first = CONSUME_QUEUE.first_unit(entry.name)
            min_offset = first + int(real[0]) if min_offset is None else min_offset
            max_offset = first + int(real[-1])
            entries += len(real)
        if n < len(units):
            ended_in = entry.name
            stale += _nonzero_units(units[n:])
    if stale:
        problems.append(f"{stale} non-zero units after the queue's end (stale bytes past the write position)")
    return QueueInfo(
        topic=topic,
        queue_id=queue_id,
        files=len(files),
        first_file=files[0].name if files else None,
        last_file=files[-1].name if files else None,
        entries=entries,
        pre_blank=pre_blank,
        min_offset=min_offset,
        max_offset=max_offset,
        stale_units=stale,
        problems=problems,
    )


def _nonzero_units(units: np.ndarray) -> int:
    return int(np.count_nonzero(units["offset"] | units["size"] | units["tags_code"]))


def _index_files(directory: Path, cfg: BrokerConfig, problems: list[str], required: bool) -> list[IndexInfo]:
    out: list[IndexInfo] = []
    expected_size = index_file_size(cfg.maxHashSlotNum, cfg.maxIndexNum)
    for entry in _listing(directory, problems, required):
        if not entry.is_file() or entry.is_symlink():
            problems.append(f"{INDEX}/{printable(entry.name)}: not a file; skipped")
            continue
        file_problems = []
        if not is_index_name(entry.name):
            file_problems.append("name is not a yyyyMMddHHmmssSSS time")
        size = entry.stat().st_size
        if size != expected_size:
            file_problems.append(
                f"{size} bytes, expected {expected_size} (maxHashSlotNum {cfg.maxHashSlotNum}, "
                f"maxIndexNum {cfg.maxIndexNum})"
            )
        with open(entry.path, "rb") as f:
            raw = f.read(IndexLayout.HEADER_SIZE)
        if len(raw) < IndexLayout.HEADER_SIZE:
            problems.append(f"{INDEX}/{entry.name}: shorter than the {IndexLayout.HEADER_SIZE}-byte header; skipped")
            continue
        h = IndexHeader.unpack(raw)
        if not 1 <= h.index_count <= cfg.maxIndexNum:
            file_problems.append(f"indexCount {h.index_count} is outside 1..{cfg.maxIndexNum}")
        if out and not out[-1].full:
            out[-1].problems.append("not full, but a later file exists")
        if out and h.begin_timestamp < out[-1].begin_timestamp:
            file_problems.append("begins before the previous file (names out of order)")
        out.append(
            IndexInfo(
                name=entry.name,
                file_size=size,
                begin_timestamp=h.begin_timestamp,
                end_timestamp=h.end_timestamp,
                begin_phy_offset=h.begin_phy_offset,
                end_phy_offset=h.end_phy_offset,
                hash_slot_count=h.hash_slot_count,
                index_count=h.index_count,
                full=h.index_count >= cfg.maxIndexNum,
                problems=file_problems,
            )
        )
    return out
