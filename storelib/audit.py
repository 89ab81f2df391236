"""Audit rules, no Spark: how a live store's files differ from the index rebuilt from its commitlog.

ConsumeQueue: a queue is compared unit by unit (20-byte units, entry ``n`` at logical byte
``n * 20``) with the rebuilt queue. "A unit is valid while offset >= 0 && size > 0; the first
invalid unit ends the queue" (``ConsumeQueue.recover``): that is the live queue's logical
end, and non-zero bytes past it are stale, reported separately. Pre-blank units are offset 0,
size 0x7fffffff, tagsCode 0.

CommitLog: what the broker's own recovery would make of the log (where it starts, where its
CRC check stops it) against the last valid record found by the rebuild.

BatchConsumeQueue (5.0+): 46-byte units appended in queue order; the live queue ends where
``BatchConsumeQueue.recover`` stops (offset >= 0, size > 0, msgBaseOffset >= 0, batchSize > 0) and units are
compared with the rebuilt ones by msgBaseOffset.

IndexFile: header consistency, the broker's key lookup (``IndexService.queryOffset``), and
the live files compared with the rebuilt ones by order (names are creation times).

Every result is a ``storelib.findings.Finding`` of a kind registered in ``storelib.findings.KINDS``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from storelib.batchcq import BATCH_CONSUME_QUEUE
from storelib.checkpoint import Checkpoint
from storelib.config import BrokerConfig
from storelib.constants import (
    CQ_STORE_UNIT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HASH_SLOT_SIZE,
    INDEX_HEADER_SIZE,
    SCHEDULE_TOPIC,
)
from storelib.consumequeue import CONSUME_QUEUE, UNIT_DTYPE, decode_units, is_pre_blank
from storelib.findings import KINDS, Finding, finding, is_divergence, worst
from storelib.indexfile import IndexFileReader, IndexHeader, lookup_reachable
from storelib.layout import (
    ABORT,
    CHECKPOINT,
    commitlog_file,
    index_file,
    index_name_after,
    index_name_ms,
    offset_file_name,
    queue_dir,
)
from storelib.plan import Step
from storelib.report import QueueRow, SegmentRecord
from storelib.restart import Restart, SegmentFacts, next_start, stops_recovery
from storelib.segments import Segment, SegmentSummary

# --- ConsumeQueue --------------------------------------------------------------------------

_NO_FILE, _TORN, _UNIT = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class QueueAudit:
    """One queue's findings, its row of the per-queue table (None when a live file could not be read: the queue
    was not audited), and the files recover would change: what an executor's queue task returns."""

    topic: str
    queue_id: int
    findings: list[Finding]
    row: QueueRow | None
    write: list[str]  # rebuilt file names that replace or create live files
    delete: list[str]  # live file names to delete
    rel_dir: str | None = None  # the queue's directory, when not consumequeue/<topic>/<queueId>


def unit_text(offset: int, size: int, tags_code: int) -> str:
    return f"commitlog offset {offset}, size {size}, tagsCode {tags_code}"


@dataclasses.dataclass
class _Units:
    """A queue's units laid out by position (relative to ``base``), with per-position file state."""

    offset: np.ndarray
    size: np.ndarray
    tags: np.ndarray
    state: np.ndarray
    kept: np.ndarray  # what ConsumeQueue.recover keeps (CONSUME_QUEUE.valid)
    pre_blank: np.ndarray

    @classmethod
    def layout(cls, files: Mapping[str, bytes], base: int, n: int, per_file: int, file_size: int) -> _Units:
        units = np.zeros(n, dtype=UNIT_DTYPE)
        state = np.full(n, _NO_FILE, dtype=np.int8)
        for name, data in files.items():
            s = int(name) // CQ_STORE_UNIT_SIZE - base
            k = min(len(data) // CQ_STORE_UNIT_SIZE, per_file)
            units[s : s + k] = decode_units(data)[:k]
            state[s : s + k] = _UNIT
            if len(data) < file_size:
                state[s + k : s + per_file] = _TORN
        offset, size, tags = (units[f].astype(np.int64) for f in ("offset", "size", "tags_code"))
        return cls(offset, size, tags, state, CONSUME_QUEUE.valid(units), is_pre_blank(units))

    @property
    def present(self) -> np.ndarray:
        return self.state == _UNIT

    @property
    def blank(self) -> np.ndarray:
        return self.present & self.pre_blank

    @property
    def valid(self) -> np.ndarray:
        """What ``ConsumeQueue.recover`` keeps, pre-blank units excepted."""
        return self.present & self.kept & ~self.pre_blank

    @property
    def nonzero(self) -> np.ndarray:
        return self.present & ((self.offset != 0) | (self.size != 0) | (self.tags != 0))

    def text(self, i: int) -> str:
        if self.state[i] == _NO_FILE:
            return "no file"
        if self.state[i] == _TORN:
            return "past the end of a torn file"
        return unit_text(int(self.offset[i]), int(self.size[i]), int(self.tags[i]))


def _empty_queue(topic: str, queue_id: int, rel_dir: str, live: Mapping[str, bytes], nonzero: int) -> Finding:
    """An orphan queue: files without a single entry, of a queue the commitlog has no message of."""
    return finding(
        "cq-empty-queue",
        f"{rel_dir}/{min(live)}",
        f"{len(live)} file(s) without a single entry ({nonzero} non-zero invalid units), and the commitlog holds "
        f"no message of {topic}/{queue_id}: the broker sees an empty queue; left as it is",
        topic=topic,
        queue_id=queue_id,
        count=len(live),
    )


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of each run of True."""
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return list(zip(starts.tolist(), (ends - starts).tolist()))


@dataclasses.dataclass
class _Queue:
    """One queue laid out for comparison: live and rebuilt units by position from queue offset ``base``."""

    topic: str
    queue_id: int
    live: Mapping[str, bytes]
    rebuilt: Mapping[str, bytes]
    file_size: int
    base: int
    lv: _Units
    rb: _Units
    commitlog_min: int
    commitlog_max: int

    @classmethod
    def of(
        cls,
        topic: str,
        queue_id: int,
        live: Mapping[str, bytes],
        rebuilt: Mapping[str, bytes],
        file_size: int,
        lo: int,
        hi: int,
    ) -> _Queue | None:
        per_file = file_size // CQ_STORE_UNIT_SIZE
        starts = [int(n) // CQ_STORE_UNIT_SIZE for n in (*live, *rebuilt)]
        if not starts:
            return None
        base = min(starts)
        n = max(starts) + per_file - base
        lv = _Units.layout(live, base, n, per_file, file_size)
        rb = _Units.layout(rebuilt, base, n, per_file, file_size)
        return cls(topic, queue_id, live, rebuilt, file_size, base, lv, rb, lo, hi)

    @property
    def per_file(self) -> int:
        return self.file_size // CQ_STORE_UNIT_SIZE

    @property
    def rel_dir(self) -> str:
        return CONSUME_QUEUE.queue_dir(self.topic, self.queue_id)

    @functools.cached_property
    def idx(self) -> np.ndarray:
        return np.arange(len(self.lv.state))

    @functools.cached_property
    def entries(self) -> np.ndarray:
        """Positions of the rebuilt queue's entries."""
        return np.flatnonzero(self.rb.valid)

    @property
    def r_min(self) -> int:
        return int(self.entries[0]) if len(self.entries) else len(self.idx)

    @property
    def r_end(self) -> int:
        return int(self.entries[-1]) + 1 if len(self.entries) else 0

    @functools.cached_property
    def l_end(self) -> int:
        """Where ``ConsumeQueue.recover`` ends the live queue: its first unit that is neither valid nor blank."""
        n = len(self.idx)
        live_first = min(int(k) // CQ_STORE_UNIT_SIZE for k in self.live) - self.base if self.live else n
        stops = np.flatnonzero(~(self.lv.valid | self.lv.blank)[live_first:])
        return live_first + (int(stops[0]) if len(stops) else n - live_first)

    @property
    def reach(self) -> np.ndarray:
        return self.idx < self.l_end

    def path(self, i: int) -> str:
        return f"{self.rel_dir}/{offset_file_name((self.base + i) // self.per_file * self.file_size)}"

    def where(self, i: int) -> dict[str, object]:
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "queue_offset": self.base + i,
            "file_offset": (self.base + i) % self.per_file * CQ_STORE_UNIT_SIZE,
        }

    def first_count(self, kind: str, mask: np.ndarray, message: str, expected: str | None = None) -> list[Finding]:
        """One finding for the units of ``mask``, at the first of them (``message`` gets count and first)."""
        hits = np.flatnonzero(mask)
        if not len(hits):
            return []
        i = int(hits[0])
        lv, rb = self.lv, self.rb
        return [
            finding(
                kind,
                self.path(i),
                message.format(count=len(hits), first=self.base + i),
                **self.where(i),
                commitlog_offset=int(rb.offset[i] if rb.valid[i] else lv.offset[i]),
                count=len(hits),
                expected=expected or (rb.text(i) if rb.valid[i] or rb.blank[i] else "no entry"),
                actual=lv.text(i),
            )
        ]

    def row(self, findings: list[Finding], live_entries: int) -> QueueRow:
        b = self.base
        return _row(
            self.topic,
            self.queue_id,
            findings,
            live_entries,
            len(self.entries),
            b + self.l_end,
            b + self.r_min,
            b + self.r_end,
            _max_physic_offset(self.lv.offset[: self.l_end], self.lv.size[: self.l_end], self.lv.valid[: self.l_end]),
        )


def classify_queue(
    topic: str,
    queue_id: int,
    live: Mapping[str, bytes],
    rebuilt: Mapping[str, bytes],
    cfg: BrokerConfig,
    commitlog_min: int,
    commitlog_max: int,
    schedule_tags_hash: Callable[[int, int], int | None] | None = None,
) -> QueueAudit:
    """Compare one live queue's files with the rebuilt ones (file name -> bytes; names are 20-digit starts).

    ``commitlog_min``/``commitlog_max``: first offset of the commitlog and the end of its last
    valid record. ``schedule_tags_hash``: for SCHEDULE_TOPIC_XXXX, (commitlog offset, size) -> the
    TAGS hash of the record there (None when unreadable), to recognise the 4.9.8 crash-recovery quirk.
    """
    q = _Queue.of(topic, queue_id, live, rebuilt, cfg.cq_file_size, commitlog_min, commitlog_max)
    if q is None:
        return QueueAudit(topic, queue_id, [], _row(topic, queue_id, [], 0, 0, None, None, None), [], [])
    findings = _torn_files(q)
    if not len(q.entries):
        return _without_messages(q, findings)
    if not live:
        first = q.r_min
        findings.append(
            finding(
                "cq-missing-queue",
                q.rel_dir,
                f"{len(q.entries)} entries (queue offsets {q.base + first} to {q.base + q.r_end - 1}) have no file",
                topic=topic,
                queue_id=queue_id,
                queue_offset=q.base + first,
                commitlog_offset=int(q.rb.offset[first]),
                count=len(q.entries),
            )
        )
        row = _row(topic, queue_id, findings, 0, len(q.entries), None, q.base + q.r_min, q.base + q.r_end)
        return QueueAudit(topic, queue_id, findings, row, sorted(rebuilt), [])
    masks = _entry_masks(q, cfg, schedule_tags_hash)
    findings += _entry_findings(q, masks) + _extra_files(q)
    write, delete = _changes(
        q, findings, masks["wrong"] | masks["quirk"] | masks["dirty"] | masks["pre_blank"] | masks["missing"]
    )
    row = q.row(findings, int((q.lv.valid & q.reach).sum()))
    return QueueAudit(topic, queue_id, findings, row, write, delete)


def _torn_files(q: _Queue) -> list[Finding]:
    """A live file of the wrong size or with a partial unit: the broker will not load it."""
    out = []
    for name, data in sorted(q.live.items()):
        if len(data) == q.file_size:
            continue
        s = int(name) // CQ_STORE_UNIT_SIZE - q.base
        window = slice(s, s + q.per_file)
        lost = np.flatnonzero(q.rb.valid[window] & (q.lv.state[window] == _TORN)) + s
        partial = len(data) % CQ_STORE_UNIT_SIZE
        out.append(
            finding(
                "cq-torn-file",
                f"{q.rel_dir}/{name}",
                f"file is {len(data)} bytes, not {q.file_size}"
                + (f", ending in a partial unit of {partial} bytes" if partial else "")
                + f"; the broker will not load it; {len(lost)} entries of the queue are lost with it",
                topic=q.topic,
                queue_id=q.queue_id,
                queue_offset=q.base + int(lost[0]) if len(lost) else None,
                commitlog_offset=int(q.rb.offset[lost[0]]) if len(lost) else None,
                file_offset=len(data) - partial,
                count=len(lost),
                expected=f"{q.file_size} bytes",
                actual=f"{len(data)} bytes",
            )
        )
    return out


def _without_messages(q: _Queue, findings: list[Finding]) -> QueueAudit:
    """No message of this queue in the commitlog: only expired entries (or an empty queue) are normal."""
    lv = q.lv
    live_entries = np.flatnonzero(lv.valid & q.reach)
    expired = lv.offset[live_entries] < q.commitlog_min
    if len(live_entries) and not expired.all():
        i = int(live_entries[~expired][0])
        findings.append(
            finding(
                "cq-no-messages",
                q.path(i),
                f"the commitlog holds no message of {q.topic}/{q.queue_id}, but the live queue has "
                f"{int((~expired).sum())} entries pointing into it",
                **q.where(i),
                commitlog_offset=int(lv.offset[i]),
                count=int((~expired).sum()),
                expected="no queue",
                actual=lv.text(i),
            )
        )
    elif len(live_entries):
        i = int(live_entries[0])
        findings.append(
            finding(
                "cq-expired-head",
                q.path(i),
                f"all {len(live_entries)} entries point below the commitlog's min offset {q.commitlog_min}",
                **q.where(i),
                commitlog_offset=int(lv.offset[i]),
                count=len(live_entries),
            )
        )
    elif q.live:
        findings.append(_empty_queue(q.topic, q.queue_id, q.rel_dir, q.live, int(lv.nonzero.sum())))
    delete = sorted(q.live) if any(is_divergence(f) for f in findings) else []
    row = _row(q.topic, q.queue_id, findings, 0, 0, None, None, None)
    return QueueAudit(q.topic, q.queue_id, findings, row, [], delete)


def _entry_masks(
    q: _Queue, cfg: BrokerConfig, schedule_tags_hash: Callable[[int, int], int | None] | None
) -> dict[str, np.ndarray]:
    """Per position: which units are wrong, quirky, dirty, expired, missing, stale... (masks over the queue)."""
    lv, rb, idx, reach = q.lv, q.rb, q.idx, q.reach
    r_entry = rb.valid
    same = (lv.offset == rb.offset) & (lv.size == rb.size) & (lv.tags == rb.tags)
    differ = r_entry & lv.valid & ~same
    quirk = np.zeros(len(idx), dtype=bool)
    if q.topic == SCHEDULE_TOPIC and schedule_tags_hash and cfg.rules.schedule_tagscode_quirk:
        cand = np.flatnonzero(differ & (lv.offset == rb.offset) & (lv.size == rb.size))
        quirk[cand] = [schedule_tags_hash(int(lv.offset[i]), int(lv.size[i])) == int(lv.tags[i]) for i in cand]
    head = idx < q.r_min
    not_entry = ~r_entry
    expired = not_entry & head & lv.valid & (lv.offset < q.commitlog_min) & reach
    dirty = not_entry & ~head & lv.valid & (lv.offset >= q.commitlog_max) & reach
    extra = not_entry & lv.valid & reach & ~expired & ~dirty
    missing = r_entry & ~lv.valid & ~lv.blank
    present = np.flatnonzero(r_entry & lv.valid)
    last_present = int(present[-1]) if len(present) else -1
    return {
        "wrong": (differ & ~quirk) | extra,
        "quirk": quirk,
        "dirty": dirty,
        "expired": expired,
        "pre_blank": (r_entry & lv.blank) | (rb.blank & lv.present & ~lv.valid & ~lv.blank),
        "missing": missing,
        "middle": missing & (idx < last_present),
        "tail": missing & (idx > last_present) & (lv.state != _TORN),
        "stale": not_entry & ~reach & lv.nonzero & ~rb.blank,
    }


def _entry_findings(q: _Queue, m: dict[str, np.ndarray]) -> list[Finding]:
    """The findings the masks stand for, each at its first unit with a count."""
    b, end = q.base, q.base + q.r_end
    out = q.first_count(
        "cq-wrong-entries", m["wrong"], "{count} entries differ from the commitlog, the first at queue offset {first}"
    )
    out += q.first_count(
        "cq-schedule-tagscode-quirk",
        m["quirk"],
        "{count} SCHEDULE_TOPIC_XXXX entries hold the TAGS hash as tagsCode instead of the deliver time "
        "(the 4.9.8 crash-recovery quirk: recovery runs before the delay table is loaded)",
    )
    out += q.first_count(
        "cq-dirty-tail",
        m["dirty"],
        f"{{count}} entries after the queue's end (queue offset {end}) point at or past the commitlog's "
        f"last valid record ({q.commitlog_max}); the broker truncates them at start",
        expected=f"queue ends at queue offset {end}",
    )
    out += q.first_count(
        "cq-expired-head",
        m["expired"],
        f"{{count}} entries from queue offset {{first}} point below the commitlog's min offset {q.commitlog_min}",
        expected="expired (retention)",
    )
    out += q.first_count(
        "cq-wrong-pre-blank", m["pre_blank"], "{count} units before the queue's first entry are not pre-blank units"
    )
    out += q.first_count(
        "cq-missing-tail",
        m["tail"],
        f"the queue ends at queue offset {{first}}, the commitlog has {{count}} more entries for it "
        f"(up to queue offset {end - 1})",
    )
    out += q.first_count(
        "cq-stale-bytes",
        m["stale"],
        f"{{count}} units with stale bytes after the queue's logical end (queue offset {b + q.l_end})",
        expected="zero bytes",
    )
    return out + _holes(q, m["middle"])


def _holes(q: _Queue, middle: np.ndarray) -> list[Finding]:
    """Missing entries in the middle of the queue: zeroed units (the broker ends the queue there), missing files."""
    lv, rb, b = q.lv, q.rb, q.base
    out = []
    for start, length in _runs(middle & (lv.state == _UNIT)):
        out.append(
            finding(
                "cq-zeroed-entries",
                q.path(start),
                f"{length} entries from queue offset {b + start} are invalid units (offset < 0 or size <= 0); "
                f"ConsumeQueue.recover ends the queue there and drops the {q.r_end - start} entries "
                "from there on, sound ones included",
                **q.where(start),
                commitlog_offset=int(rb.offset[start]),
                count=length,
                expected=rb.text(start),
                actual=lv.text(start),
            )
        )
    no_file = middle & (lv.state == _NO_FILE)
    file_no = (b + q.idx) // q.per_file
    for f_no in np.unique(file_no[no_file]).tolist():
        lost = np.flatnonzero(no_file & (file_no == f_no))
        i = int(lost[0])
        out.append(
            finding(
                "cq-missing-file",
                q.path(i),
                f"file missing in the middle of the queue: {len(lost)} entries from queue offset {b + i} are lost",
                topic=q.topic,
                queue_id=q.queue_id,
                queue_offset=b + i,
                commitlog_offset=int(rb.offset[i]),
                count=len(lost),
                expected=f"{q.file_size} bytes",
                actual="no file",
            )
        )
    return out


def _extra_files(q: _Queue) -> list[Finding]:
    """Live files after the rebuilt queue's last file."""
    last_rebuilt = max(int(k) for k in q.rebuilt)
    out = []
    for name in sorted(k for k in q.live if int(k) > last_rebuilt):
        s = int(name) // CQ_STORE_UNIT_SIZE - q.base
        nonzero = int(q.lv.nonzero[s : s + q.per_file].sum())
        out.append(
            finding(
                "cq-extra-file",
                f"{q.rel_dir}/{name}",
                f"file after the queue's last file ({offset_file_name(last_rebuilt)}), "
                f"holding {nonzero} non-zero units",
                topic=q.topic,
                queue_id=q.queue_id,
                queue_offset=q.base + s,
                count=nonzero,
                expected="no file",
                actual=f"{len(q.live[name])} bytes",
            )
        )
    return out


def _changes(q: _Queue, findings: list[Finding], bad: np.ndarray) -> tuple[list[str], list[str]]:
    """The rebuilt files that replace or create live ones, and the live files to delete, when the queue diverges."""
    if not any(is_divergence(f) for f in findings):
        return [], []
    last_rebuilt = max(int(k) for k in q.rebuilt)
    write = sorted(name for name, data in q.rebuilt.items() if q.live.get(name) != data)
    delete = []
    for name, data in q.live.items():
        s = int(name) // CQ_STORE_UNIT_SIZE - q.base
        odd = len(data) != q.file_size or int(name) > last_rebuilt or bad[s : s + q.per_file].any()
        if name not in q.rebuilt and odd:
            delete.append(name)
    return write, sorted(delete)


def _row(
    topic: str,
    queue_id: int,
    findings: list[Finding],
    live_entries: int,
    rebuilt_entries: int,
    live_end: int | None,
    rebuilt_min: int | None,
    rebuilt_end: int | None,
    live_max_physic_offset: int = -1,
) -> QueueRow:
    """One line of the per-queue table."""
    bad = [f for f in findings if is_divergence(f)]
    return QueueRow(
        topic,
        queue_id,
        worst(findings),
        tuple(sorted({f.kind for f in findings})),
        live_entries,
        live_end,
        rebuilt_entries,
        rebuilt_min,
        rebuilt_end,
        live_max_physic_offset,
        min((f.queue_offset for f in bad if f.queue_offset is not None), default=None),
        sum(f.count or 0 for f in bad),
    )


@dataclasses.dataclass
class _BatchQueue:
    """One BatchConsumeQueue laid out for comparison: live and rebuilt units in file order, each up to the end of
    its valid units (``l_end``, ``r_end``), and the findings so far."""

    topic: str
    queue_id: int
    file_size: int
    lv: np.ndarray
    rb: np.ndarray
    l_end: int
    r_end: int
    first_live: int  # ordinal of the first live unit (its file's start / unit size)
    findings: list[Finding] = dataclasses.field(default_factory=list)

    @property
    def rel_dir(self) -> str:
        return BATCH_CONSUME_QUEUE.queue_dir(self.topic, self.queue_id)

    def emit(self, kind: str, positions: np.ndarray, units: np.ndarray, message: str, ordinal0: int = 0) -> None:
        """One finding for ``units[positions]``, at the first of them (``ordinal0``: the first unit's ordinal)."""
        if not len(positions):
            return
        i, unit = int(positions[0]), BATCH_CONSUME_QUEUE.unit_size
        k = ordinal0 + i  # the unit's ordinal in the queue: its file and byte in it
        self.findings.append(
            finding(
                kind,
                f"{self.rel_dir}/{offset_file_name(k * unit // self.file_size * self.file_size)}",
                message.format(count=len(positions), first=int(units["msg_base_offset"][i])),
                topic=self.topic,
                queue_id=self.queue_id,
                queue_offset=int(units["msg_base_offset"][i]),
                commitlog_offset=int(units["offset"][i]),
                file_offset=k * unit % self.file_size,
                count=len(positions),
            )
        )


def classify_batch_queue(
    topic: str,
    queue_id: int,
    live: Mapping[str, bytes],
    rebuilt: Mapping[str, bytes],
    cfg: BrokerConfig,
    commitlog_min: int,
    commitlog_max: int,
) -> QueueAudit:
    """Compare one live BatchConsumeQueue (file name -> bytes) with the rebuilt one, unit by msgBaseOffset."""
    fmt = BATCH_CONSUME_QUEUE
    lv, rb = _batch_units(live), _batch_units(rebuilt)
    first_live = int(min(live, default="0")) // fmt.unit_size
    q = _BatchQueue(topic, queue_id, fmt.file_size(cfg), lv, rb, fmt.valid_prefix(lv), fmt.valid_prefix(rb), first_live)
    for name, data in sorted(live.items()):
        if len(data) != q.file_size:
            message = f"file is {len(data)} bytes, not {q.file_size}; the broker will not load it"
            where = {"topic": topic, "queue_id": queue_id, "file_offset": len(data) - len(data) % fmt.unit_size}
            q.findings.append(finding("cq-torn-file", f"{q.rel_dir}/{name}", message, **where, count=1))
    live_base, rebuilt_base = lv["msg_base_offset"][: q.l_end], rb["msg_base_offset"][: q.r_end]
    if q.r_end and not live:
        q.emit("cq-missing-queue", np.arange(q.r_end), rb, "{count} units from queue offset {first} have no file")
    else:
        _batch_rebuilt_units(q, live_base, rebuilt_base)
    _batch_live_units(q, ~np.isin(live_base, rebuilt_base), commitlog_min, commitlog_max)
    write = delete = []
    if any(is_divergence(f) for f in q.findings):
        write = sorted(n for n, data in rebuilt.items() if live.get(n) != data)
        delete = sorted(n for n in live if n not in rebuilt)
    first = int(rebuilt_base[0]) if q.r_end else None
    live_max = _max_physic_offset(lv["offset"][: q.l_end], lv["size"][: q.l_end])
    row = _row(
        topic, queue_id, q.findings, q.l_end, q.r_end, _batch_end(lv, q.l_end), first, _batch_end(rb, q.r_end), live_max
    )
    return QueueAudit(topic, queue_id, q.findings, row, write, delete, q.rel_dir)


def _batch_rebuilt_units(q: _BatchQueue, live_base: np.ndarray, rebuilt_base: np.ndarray) -> None:
    """The rebuilt units the live queue holds differently, lacks in its middle, or lacks at its end."""
    lv, rb = q.lv, q.rb
    pos = np.searchsorted(live_base, rebuilt_base)  # where each rebuilt unit's base is among the live ones
    found = pos < q.l_end
    found[found] = live_base[pos[found]] == rebuilt_base[found]
    same = found.copy()
    for f in ("offset", "size", "tags_code", "store_timestamp", "batch_size"):
        same[found] &= lv[f][pos[found]] == rb[f][: q.r_end][found]
    last_live = int(live_base[-1]) if q.l_end else -1
    q.emit("cq-wrong-entries", np.flatnonzero(found & ~same), rb, "{count} units differ, the first at {first}")
    lost = ~found & (rebuilt_base <= last_live)
    q.emit("cq-wrong-entries", np.flatnonzero(lost), rb, "{count} units are missing, the first at queue offset {first}")
    tail = np.flatnonzero(~found & (rebuilt_base > last_live))
    q.emit("cq-missing-tail", tail, rb, "the queue lacks its last {count} units, from queue offset {first}")


def _batch_live_units(q: _BatchQueue, unmatched: np.ndarray, commitlog_min: int, commitlog_max: int) -> None:
    """The live units the rebuilt queue lacks (expired, past the commitlog's end, or wrong), and stale bytes."""
    lv, ordinal0 = q.lv, q.first_live
    expired = unmatched & (lv["offset"][: q.l_end] < commitlog_min)
    dirty = unmatched & (lv["offset"][: q.l_end] >= commitlog_max)
    kind = "cq-no-messages" if not q.r_end else "cq-wrong-entries"
    q.emit("cq-expired-head", np.flatnonzero(expired), lv, "{count} units point below the commitlog", ordinal0)
    q.emit("cq-dirty-tail", np.flatnonzero(dirty), lv, "{count} units point past the commitlog's end", ordinal0)
    extra = np.flatnonzero(unmatched & ~expired & ~dirty)
    q.emit(kind, extra, lv, "{count} units the commitlog does not hold", ordinal0)
    unit = BATCH_CONSUME_QUEUE.unit_size
    stale = np.flatnonzero(lv[q.l_end :].view(np.uint8).reshape(-1, unit).any(axis=1)) + q.l_end
    q.emit("cq-stale-bytes", stale, lv, "{count} units with stale bytes after the queue's logical end", ordinal0)


def _max_physic_offset(offset: np.ndarray, size: np.ndarray, valid: np.ndarray | None = None) -> int:
    """offset + size of the last (valid) unit: where a queue's records end in the commitlog; -1 without one."""
    last = np.flatnonzero(valid) if valid is not None else np.arange(len(offset))
    return int(offset[last[-1]]) + int(size[last[-1]]) if len(last) else -1


def _batch_end(units: np.ndarray, n: int) -> int | None:
    """One past the last queue offset of the first ``n`` units: msgBaseOffset + batchSize of the last."""
    return int(units["msg_base_offset"][n - 1]) + int(units["batch_size"][n - 1]) if n else None


def _batch_units(files: Mapping[str, bytes]) -> np.ndarray:
    """A BatchConsumeQueue's units in file order (whole units of each file)."""
    parts = [BATCH_CONSUME_QUEUE.decode(files[n]) for n in sorted(files)]
    return np.concatenate(parts) if parts else np.zeros(0, BATCH_CONSUME_QUEUE.unit)


# --- CommitLog -------------------------------------------------------------------------------


def restart_of(
    segments: list[SegmentFacts],
    rebuild_findings: list[Finding],
    checkpoint: Checkpoint | None,
    abort: bool,
    cfg: BrokerConfig,
    commitlog_max: int,
    cq_max_physic_offset: int = -1,
) -> Restart | None:
    """The broker's next start (storelib.restart.next_start), stopping at the records the rebuild found it rejects."""
    stops = [
        (f.commitlog_offset, f.kind)
        for f in rebuild_findings
        if f.commitlog_offset is not None and stops_recovery(f.kind, cfg)
    ]
    return next_start(segments, stops, checkpoint, abort, cfg, commitlog_max, cq_max_physic_offset)


def check_commitlog(
    segments: list[SegmentFacts],
    rebuild_findings: list[Finding],
    checkpoint: Checkpoint | None,
    abort: bool,
    cfg: BrokerConfig,
    commitlog_max: int,
    last_store_timestamp: int,
    last_cq_store_timestamp: int,
    cq_max_physic_offset: int = -1,
) -> list[Finding]:
    """Preallocated segments, the abort marker, the checkpoint, and whether recovery would truncate sound data
    (``cq_max_physic_offset``: the end of the last record a live ConsumeQueue points at, -1 when none does)."""
    out: list[Finding] = []
    with_messages = [i for i, s in enumerate(segments) if s.messages > 0]
    last = with_messages[-1] if with_messages else -1
    for s in segments[last + 1 :]:
        if s.end_offset == s.start:
            out.append(
                finding(
                    "commitlog-preallocated",
                    commitlog_file(s.file),
                    "zero-filled segment after the last record; the broker deletes it at start",
                    commitlog_offset=s.start,
                )
            )
    restart = restart_of(segments, rebuild_findings, checkpoint, abort, cfg, commitlog_max, cq_max_physic_offset)
    how = "crash recovery (abort exists)" if abort else "normal recovery"
    if abort:
        out.append(
            finding(
                "abort-marker",
                ABORT,
                f"the broker did not shut down cleanly; at start its {how} re-checks the commitlog from segment "
                f"{segments[restart.start].file if restart else '-'}",
            )
        )
    out += _checkpoint_findings(checkpoint, commitlog_max, last_store_timestamp, last_cq_store_timestamp)
    if restart and restart.lost:
        out.append(_truncate_finding(segments, restart, how, commitlog_max))
    return out


def _checkpoint_findings(
    checkpoint: Checkpoint | None, commitlog_max: int, last_store_timestamp: int, last_cq_store_timestamp: int
) -> list[Finding]:
    """An unreadable checkpoint, or one ahead of the records it can refer to."""
    if checkpoint is None:
        return [finding("checkpoint-unreadable", CHECKPOINT, "no readable 4096-byte checkpoint")]
    out = []
    for field, value, have in (
        ("physicMsgTimestamp", checkpoint.physic_msg_timestamp, last_store_timestamp),
        ("logicsMsgTimestamp", checkpoint.logics_msg_timestamp, last_cq_store_timestamp),
    ):
        if value > have:
            out.append(
                finding(
                    "checkpoint-ahead",
                    CHECKPOINT,
                    f"{field} {value} is after the last record it can refer to ({have}): "
                    "records the broker had flushed are missing",
                    expected=f"<= {have}",
                    actual=str(value),
                )
            )
    if checkpoint.confirm_phy_offset > commitlog_max:
        out.append(
            finding(
                "checkpoint-ahead",
                CHECKPOINT,
                f"confirmPhyOffset {checkpoint.confirm_phy_offset} is past the last valid record {commitlog_max}",
                commitlog_offset=commitlog_max,
                expected=f"<= {commitlog_max}",
                actual=str(checkpoint.confirm_phy_offset),
            )
        )
    return out


def _truncate_finding(segments: list[SegmentFacts], restart: Restart, how: str, commitlog_max: int) -> Finding:
    """recovery-would-truncate: where the broker's recovery stops, and the bytes of valid records after it."""
    at = restart.truncate_at
    seg = next(s for s in reversed(segments) if s.start <= at)
    total = commitlog_max - segments[0].start
    return finding(
        "recovery-would-truncate",
        commitlog_file(seg.file),
        f"the broker's {how} starts at segment {segments[restart.start].file}, stops at the record at "
        f"commitlog offset {at} ({restart.stop}) and truncates the commitlog there: {restart.lost} bytes "
        f"({100 * restart.lost / max(1, total):.0f}% of the log) of records after it are lost to consumers",
        commitlog_offset=at,
        file_offset=at - seg.start,
        count=restart.lost,
        expected=f"max offset {commitlog_max}",
        actual=f"max offset {at} after recovery",
    )


# --- IndexFile ------------------------------------------------------------------------------


def index_entries(reader: IndexFileReader) -> tuple[np.ndarray, np.ndarray]:
    """(keyHash, commitlog offset) of the entries within the header's indexCount: entry ``n`` at ``n - 1``."""
    count = max(1, min(reader.header.index_count, len(reader.entries)))
    e = reader.entries[1:count]
    return e["key_hash"].astype(np.int32), e["phy_offset"].astype(np.int64)


def check_index_header(file: str, reader: IndexFileReader, cfg: BrokerConfig) -> list[Finding]:
    """indexCount, hashSlotCount and the begin/end offsets against the slots and entries themselves."""
    h = reader.header
    problems: list[tuple[str, str, str]] = []  # (what, expected, actual)
    count = h.index_count
    if not 1 <= count <= cfg.maxIndexNum:
        problems.append(("indexCount out of range", f"1..{cfg.maxIndexNum}", str(count)))
    count = max(1, min(count, cfg.maxIndexNum))
    rest = reader.entries[count:]
    used = np.flatnonzero(
        (rest["key_hash"] != 0) | (rest["phy_offset"] != 0) | (rest["time_diff"] != 0) | (rest["prev_index"] != 0)
    )
    if len(used):
        last = count + int(used[-1])
        problems.append((f"{len(used)} non-empty entries lie past indexCount", f"indexCount {last + 1}", f"{count}"))
    past = int((reader.slots >= count).sum())
    if past:
        problems.append((f"{past} hash slots point past indexCount", "slots <= indexCount - 1", f"{past} slots"))
    occupied = int((reader.slots > 0).sum()) if not cfg.hash_slot_every_put else count - 1
    if h.hash_slot_count != occupied:
        problems.append(("hashSlotCount disagrees with the hash slots", str(occupied), str(h.hash_slot_count)))
    if count > 1:
        first, last = reader.entries[1], reader.entries[count - 1]
        if h.begin_phy_offset != int(first["phy_offset"]):
            problems.append(("beginPhyOffset is not entry 1's", str(int(first["phy_offset"])), str(h.begin_phy_offset)))
        if h.end_phy_offset != int(last["phy_offset"]):
            problems.append(
                (f"endPhyOffset is not entry {count - 1}'s", str(int(last["phy_offset"])), str(h.end_phy_offset))
            )
    if h.end_timestamp < h.begin_timestamp:
        problems.append(("endTimestamp before beginTimestamp", f">= {h.begin_timestamp}", str(h.end_timestamp)))
    if not problems:
        return []
    what, expected, actual = problems[0]
    return [
        finding(
            "index-header-inconsistent",
            file,
            "; ".join(p[0] for p in problems),
            file_offset=36 if "indexCount" in what else 0,
            count=len(problems),
            expected=expected,
            actual=actual,
        )
    ]


def compare_index_files(file: str, live: bytes, rebuilt_name: str, rebuilt: bytes, cfg: BrokerConfig) -> list[Finding]:
    """The first difference between a live IndexFile and the rebuilt one at the same position (memory: a chunk)."""
    n = min(len(live), len(rebuilt))
    at, differ = differing_bytes(live, rebuilt, n)
    if not differ and len(live) == len(rebuilt):
        return []
    slots_end = INDEX_HEADER_SIZE + cfg.maxHashSlotNum * INDEX_HASH_SLOT_SIZE
    if at < INDEX_HEADER_SIZE:
        fields = ("beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset", "hashSlotCount", "indexCount")
        names = [fields[i] for i, (a, b) in enumerate(zip(_header(live), _header(rebuilt))) if a != b]
        where = "header " + ", ".join(names)
        exp = ", ".join(f"{k} {v}" for k, v in zip(fields, _header(rebuilt)) if k in names)
        act = ", ".join(f"{k} {v}" for k, v in zip(fields, _header(live)) if k in names)
    elif at < slots_end:
        where = f"hash slot {(at - INDEX_HEADER_SIZE) // INDEX_HASH_SLOT_SIZE}"
        exp = act = None
    else:
        where = f"entry {(at - slots_end) // INDEX_ENTRY_SIZE}"
        exp = act = None
    return [
        finding(
            "index-file-differs",
            file,
            f"differs from the rebuilt file {rebuilt_name} (same position), first at {where}",
            file_offset=at,
            count=differ + abs(len(live) - len(rebuilt)),
            expected=exp or f"{len(rebuilt)} bytes as rebuilt",
            actual=act or f"{len(live)} bytes, {differ} differ",
        )
    ]


def differing_bytes(live: bytes, rebuilt: bytes, n: int, chunk: int = 1 << 23) -> tuple[int, int]:
    """The first differing byte of the first ``n`` (``n`` when none) and how many differ, ``chunk`` at a time."""
    first, count = n, 0
    for at in range(0, n, chunk):
        size = min(chunk, n - at)
        diff = np.frombuffer(live, np.uint8, size, at) != np.frombuffer(rebuilt, np.uint8, size, at)
        k = int(np.count_nonzero(diff))
        first, count = (min(first, at + int(diff.argmax())) if k else first), count + k
    return first, count


def _header(data: bytes) -> tuple[int, ...]:
    return dataclasses.astuple(IndexHeader.unpack(data)) if len(data) >= INDEX_HEADER_SIZE else ()


# --- IndexFile entries against the rebuilt ones, by commitlog range ---------------------------
#
# An entry is the pair (keyHash, commitlog offset): a live entry matches a rebuilt one only at the same
# commitlog offset, so the comparison splits by commitlog range and each range is compared alone, whatever
# file holds its entries. Within a range the pairs are coded as int64 (the offset's rank among the rebuilt
# offsets, then the keyHash's 32 bits) and compared as sorted arrays.

#: splitmix64's constants: a pair's sampling hash, the same in every task whatever the partitioning
_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_LOW32 = 0xFFFFFFFF
#: 2**32 / the golden ratio: a pair's part (PairPart)
_GOLDEN32 = 0x9E3779B1


def index_range_bounds(starts: Iterable[int]) -> np.ndarray:
    """Where the commitlog ranges of the entry comparison begin (range 0 has no start, the last no end): the
    rebuilt files' beginPhyOffsets and the segments' starts, the lowest left out."""
    return np.unique(np.asarray(list(starts), dtype=np.int64))[1:]


def range_of(phy_offset: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The range (``index_range_bounds``) each commitlog offset falls in."""
    return np.searchsorted(bounds, phy_offset, side="right")


@dataclasses.dataclass(frozen=True)
class EntryScope:
    """The entries the IndexFile comparison checks: commitlog offsets from ``from_offset``, split into the
    ranges ``bounds`` starts (storelib.audit.index_range_bounds)."""

    from_offset: int
    bounds: np.ndarray

    def keep(self, phy: np.ndarray) -> np.ndarray:
        return phy >= self.from_offset

    def in_range(self, phy: np.ndarray, k: int) -> np.ndarray:
        """The offsets in scope and in range ``k`` (two comparisons: no index array as long as ``phy``)."""
        inside = self.keep(phy)
        if k > 0:
            inside &= phy >= self.bounds[k - 1]
        if k < len(self.bounds):
            inside &= phy < self.bounds[k]
        return inside

    def range_bytes(self, k: int, max_offset: int) -> int:
        """The commitlog bytes of range ``k`` in scope, the last range ending at ``max_offset`` (at least 1)."""
        begin = max(self.from_offset, int(self.bounds[k - 1]) if k > 0 else 0)
        end = int(self.bounds[k]) if k < len(self.bounds) else max_offset
        return max(1, end - begin)

    def ranges(self, phy: np.ndarray) -> list[int]:
        """The ranges the offsets in scope fall in."""
        return np.flatnonzero(np.bincount(range_of(phy[self.keep(phy)], self.bounds))).tolist()


def sample_threshold(index_sample: int, entries: int) -> int:
    """Pairs whose sampling hash is below this are sampled: at most ``index_sample`` of ``entries`` expected."""
    return 1 << 64 if entries <= index_sample else (index_sample << 64) // entries


@dataclasses.dataclass(frozen=True)
class PairPart:
    """Part ``number`` of ``parts`` of a commitlog range's entries, chosen by their (keyHash, commitlog offset) pair.

    Whether a live entry is a rebuilt one and whether a rebuilt pair is reachable in a live file are decided pair by
    pair (reachability is judged over the whole file, entry by entry), so a range's comparison is exactly the sum of
    its parts' (counts added, the lowest entry and pair kept): a big range is compared by several tasks at once.

    The part is a Fibonacci hash of the pair scaled to ``parts``: not of keyHash alone, as a key on every message
    (the bench store's: one keyHash of 1.5M pairs) would keep its pairs in one part; nor keyHash mod ``parts``, as
    String.hashCode keeps a key's last characters in its low bits.
    """

    number: int = 0
    parts: int = 1

    def within(self, key_hash: np.ndarray, phy: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """``mask`` of the entries (``key_hash`` int32, ``phy`` int64), narrowed to this part's pairs."""
        if self.parts == 1:
            return mask
        mixed = phy.astype(np.uint32)  # the offset's low 32 bits
        mixed += key_hash.view(np.uint32)
        mixed *= np.uint32(_GOLDEN32)  # wraps: the low 32 bits of the product
        mixed >>= 16
        mixed *= self.parts
        mixed >>= 16  # (the top 16 bits * parts) >> 16: in 0 .. parts - 1, near-equal shares
        return mask & (mixed == self.number)


#: a range compared whole, in one part
WHOLE_RANGE = PairPart()


@dataclasses.dataclass
class IndexPart:
    """One file's entries within a commitlog range: entry numbers, keyHash, commitlog offset, and for a live
    file whether the broker's lookup reaches each (storelib.indexfile.lookup_reachable)."""

    name: str
    entry: np.ndarray
    key_hash: np.ndarray
    phy_offset: np.ndarray
    reachable: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        reader: IndexFileReader,
        keep: Callable[[np.ndarray], np.ndarray],
        reach: bool,
        part: PairPart = WHOLE_RANGE,
    ) -> IndexPart:
        """The entries within indexCount whose commitlog offsets ``keep`` selects, of ``part``."""
        key_hash, phy = index_entries(reader)
        mask = part.within(key_hash, phy, keep(phy))
        reachable = lookup_reachable(reader)[mask] if reach else None
        return cls(reader.file, np.flatnonzero(mask) + 1, key_hash[mask], phy[mask], reachable)


@dataclasses.dataclass(frozen=True)
class BadEntries:
    """A live IndexFile's entries in a range that are no rebuilt entry: how many, and the first one's entry number,
    keyHash and commitlog offset."""

    count: int
    entry: int
    key_hash: int
    phy_offset: int

    def __add__(self, other: BadEntries) -> BadEntries:
        """Two ranges' bad entries of one file: the counts added, the lowest entry first."""
        first = min(self, other, key=lambda b: (b.entry, b.key_hash, b.phy_offset))
        return dataclasses.replace(first, count=self.count + other.count)


@dataclasses.dataclass(frozen=True)
class MissingPairs:
    """Rebuilt (keyHash, commitlog offset) pairs the broker's lookup over the live files misses: how many, and the
    lowest (commitlog offset, keyHash) among them."""

    count: int
    phy_offset: int
    key_hash: int

    def __add__(self, other: MissingPairs) -> MissingPairs:
        """Two ranges' missed pairs: the counts added, the lowest (commitlog offset, keyHash) of both."""
        lowest = min(self, other, key=lambda m: (m.phy_offset, m.key_hash))
        return dataclasses.replace(lowest, count=self.count + other.count)


@dataclasses.dataclass(frozen=True)
class RangeComparison:
    """One commitlog range's IndexFile entries compared (what an index range task returns): live entries checked,
    the bad ones per live file, the distinct rebuilt pairs and how many the sample takes, and those missed (all,
    and among the sampled)."""

    entries_checked: int
    bad: Mapping[str, BadEntries]
    keys_total: int
    keys_sampled: int
    missing: MissingPairs | None
    missing_sampled: MissingPairs | None


def compare_index_range(live: list[IndexPart], rebuilt: list[IndexPart], threshold: int) -> RangeComparison:
    """One commitlog range: every live entry must be a rebuilt entry; every distinct rebuilt pair must be reachable
    in a live file (``threshold`` samples the pairs, storelib.audit.sample_threshold)."""
    phys = _distinct(np.concatenate([p.phy_offset for p in rebuilt] or [np.zeros(0, np.int64)]))
    wanted = _distinct(np.concatenate([_pair_codes(phys, p) for p in rebuilt] or [np.zeros(0, np.int64)]))
    bad, found = {}, [np.zeros(0, np.int64)]
    for part in live:
        codes = _pair_codes(phys, part)
        unknown = np.flatnonzero(~_members(codes, wanted))
        if len(unknown):
            i = int(unknown[0])
            bad[part.name] = BadEntries(
                len(unknown), int(part.entry[i]), int(part.key_hash[i]), int(part.phy_offset[i])
            )
        found.append(codes[part.reachable] if part.reachable is not None else codes[:0])
    missing = ~_members(wanted, _distinct(np.concatenate(found)))
    sampled = _sampled(phys, wanted, threshold)
    return RangeComparison(
        entries_checked=sum(len(p.entry) for p in live),
        bad=bad,
        keys_total=len(wanted),
        keys_sampled=int(sampled.sum()),
        missing=_first_pair(phys, wanted[missing]),
        missing_sampled=_first_pair(phys, wanted[missing & sampled]),
    )


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (a sort: numpy's hashing ``unique`` is slower on millions of int64)."""
    s = np.sort(values)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s


def _pair_codes(phys: np.ndarray, part: IndexPart) -> np.ndarray:
    """(keyHash, commitlog offset) as int64: the offset's rank in ``phys``, then keyHash; -1 for an offset not
    in ``phys`` (no rebuilt entry there)."""
    rank = np.searchsorted(phys, part.phy_offset)
    known = rank < len(phys)
    known[known] = phys[rank[known]] == part.phy_offset[known]
    codes = (rank.astype(np.int64) << 32) | (part.key_hash.astype(np.int64) & _LOW32)
    codes[~known] = -1
    return codes


def _members(codes: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Which ``codes`` are in ``sorted_set`` (sorted, distinct)."""
    if not len(sorted_set):
        return np.zeros(len(codes), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, codes), len(sorted_set) - 1)
    return sorted_set[at] == codes


def _unpack(phys: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(commitlog offset, keyHash) of pair codes."""
    return phys[codes >> 32], (codes & _LOW32).astype(np.uint32).view(np.int32)


def _sampled(phys: np.ndarray, codes: np.ndarray, threshold: int) -> np.ndarray:
    """The pairs sampled: splitmix64 of (offset, keyHash) below ``threshold``."""
    if threshold >= 1 << 64:
        return np.ones(len(codes), dtype=bool)
    phy, key_hash = _unpack(phys, codes)
    z = phy.astype(np.uint64) * np.uint64(_GOLDEN) + key_hash.astype(np.int64).astype(np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    return (z ^ (z >> np.uint64(31))) < np.uint64(threshold)


def _first_pair(phys: np.ndarray, codes: np.ndarray) -> MissingPairs | None:
    """How many ``codes``, and the lowest (offset, keyHash) among them; None when empty."""
    if not len(codes):
        return None
    phy, key_hash = _unpack(phys, codes)
    lowest = phy == phy.min()
    return MissingPairs(len(codes), int(phy.min()), int(key_hash[lowest].min()))


# --- scope and repairs ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CleanRun:
    """The store's last clean audit in the history table (exit code 0), what a ``--since-last`` run builds on: its
    run id, when it started (UTC), the commitlog max offset it saw and the segments it read."""

    run_id: str
    started_at: dt.datetime
    commitlog_max_offset: int | None = None
    segments_audited: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Scope:
    """What an audit covers: the commitlog segments from offset ``start`` on, and what it skips.

    A full audit starts at 0. A ``--since-last`` audit starts at the segment holding the commitlog max offset of
    ``base`` (the store's last clean run in the history table) and audits only what changed after it.
    """

    start: int
    segments: list[str]  # names of the commitlog segments audited
    base: CleanRun | None = None
    skipped: list[str] = dataclasses.field(default_factory=list)  # what was not audited, and why
    note: str = ""

    def skipping(self, count: int, what: str) -> tuple[str, ...]:
        """The note that ``count`` ``what`` were not audited, unchanged since the base run (none for a full audit)."""
        if not (count and self.base):
            return ()
        when = self.base.started_at.isoformat(timespec="seconds")
        return (f"{count} {what} unchanged since run {self.base.run_id} at {when}",)

    @property
    def base_run_id(self) -> str | None:
        return self.base.run_id if self.base else None

    def to_dict(self) -> dict[str, object]:
        """report.json's ``run.scope``."""
        return {
            "from_offset": self.start,
            "segments_audited": self.segments,
            "base_run_id": self.base_run_id,
            "skipped": self.skipped,
            "note": self.note,
        }


def audit_scope(segments: list[Segment], segment_size: int, since: CleanRun | None, note: str = "") -> Scope:
    """The whole commitlog (``note`` says why); with ``since`` (a clean run's summary), the segments from the one
    holding its max offset."""
    if since is None:
        return Scope(0, [s.name for s in segments], note=note)
    base_max = since.commitlog_max_offset
    start = base_max - base_max % segment_size if base_max is not None else 0
    tail = [s for s in segments if s.start >= start]
    if base_max is None or not tail:
        why = f"the commitlog does not reach where run {since.run_id} ended ({base_max}): full audit"
        return Scope(0, [s.name for s in segments], note=why)
    scope = Scope(start, [s.name for s in tail], since)
    below = scope.skipping(len(segments) - len(tail), f"commitlog segments below offset {start}")
    return dataclasses.replace(scope, skipped=list(below))


def repair(action: str, file: str, source: str | None, reason: str) -> Step:
    """One step of recover's plan: ``file`` (store-relative) from ``source`` (relative to the rebuilt dir)."""
    return Step(action, file, reason, source)


def queue_repairs(qa: QueueAudit, live_files: Iterable[str]) -> list[Step]:
    """Replace or create the rebuilt files of a divergent queue, delete the live files it should not have."""
    rel = qa.rel_dir or queue_dir(qa.topic, qa.queue_id)
    why = ", ".join(k for k in (qa.row.kinds if qa.row else ()) if KINDS[k].repairable)
    present = set(live_files)
    out = [repair("replace" if n in present else "create", f"{rel}/{n}", f"{rel}/{n}", why) for n in qa.write]
    return out + [repair("delete", f"{rel}/{n}", None, why) for n in qa.delete]


def index_repairs(
    positions: list[tuple[str | None, str | None]], findings: list[Finding], previous: str | None
) -> list[Step]:
    """Replace differing files by position (keeping live names), create missing ones, delete extra ones.

    ``positions``: per position, the live and rebuilt file names; ``previous``: the live file before the first
    position (None when it is the first). A created file takes the rebuilt name, moved 1 ms past the file
    before it so the broker loads it in order.
    """
    differs = {f.file for f in findings if f.kind == "index-file-differs"}
    out = []
    for live, built in positions:
        if live and built:
            if index_file(live) in differs:
                out.append(repair("replace", index_file(live), index_file(built), "index-file-differs"))
            previous = live
        elif built:
            previous = index_name_after(index_name_ms(built), previous)
            out.append(repair("create", index_file(previous), index_file(built), "index-missing-file"))
        else:
            out.append(repair("delete", index_file(str(live)), None, "index-extra-file"))
    return out


def stale_finding(rebuilt: list[SegmentRecord], now: Mapping[str, SegmentSummary]) -> Finding | None:
    """A finding when rebuild.json describes other commitlog segments than the store now holds."""
    then = {s.file: s for s in rebuilt}
    for name in sorted(set(now) | set(then)):
        was, is_ = then.get(name), now.get(name)
        described = None if was is None else (was.end_offset, was.fingerprint)
        current = None if is_ is None else (is_.end_offset, is_.fingerprint)
        if described != current:
            return finding(
                "rebuilt-stale",
                commitlog_file(name),
                "the rebuilt index was made from other records than this segment holds now; rebuild it first",
                expected="no segment" if was is None else f"records end at {was.end_offset}, {was.fingerprint}",
                actual="no segment" if is_ is None else f"records end at {is_.end_offset}, {is_.fingerprint}",
            )
    return None
