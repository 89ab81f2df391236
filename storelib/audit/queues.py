"""The ConsumeQueue audit: a live queue against the queue rebuilt from the commitlog, unit by unit.

20-byte units, entry ``n`` at logical byte ``n * 20``. "A unit is valid while offset >= 0 && size > 0; the first
invalid unit ends the queue" (``ConsumeQueue.recover``): that is the live queue's logical end, and non-zero bytes
past it are stale, reported separately. Pre-blank units are offset 0, size 0x7fffffff, tagsCode 0.

Every result is a ``storelib.findings.Finding`` of a kind registered in ``storelib.findings.KINDS``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from storelib.broker.config import BrokerConfig
from storelib.constants import SCHEDULE_TOPIC
from storelib.findings import Finding, QueuePlace, finding, is_divergence, worst
from storelib.formats.consumequeue import CONSUME_QUEUE, UNIT_DTYPE, decode_units, is_pre_blank
from storelib.layout import (
    offset_file_name,
)
from storelib.reports.report import QueueRow

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
            s = CONSUME_QUEUE.first_unit(name) - base
            k = min(CONSUME_QUEUE.whole_units(len(data)), per_file)
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
        per_file = CONSUME_QUEUE.units_per_file(file_size)
        starts = [CONSUME_QUEUE.first_unit(n) for n in (*live, *rebuilt)]
        if not starts:
            return None
        base = min(starts)
        n = max(starts) + per_file - base
        lv = _Units.layout(live, base, n, per_file, file_size)
        rb = _Units.layout(rebuilt, base, n, per_file, file_size)
        return cls(topic, queue_id, live, rebuilt, file_size, base, lv, rb, lo, hi)

    @property
    def per_file(self) -> int:
        return CONSUME_QUEUE.units_per_file(self.file_size)

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
        live_first = min(CONSUME_QUEUE.first_unit(k) for k in self.live) - self.base if self.live else n
        stops = np.flatnonzero(~(self.lv.valid | self.lv.blank)[live_first:])
        return live_first + (int(stops[0]) if len(stops) else n - live_first)

    @property
    def reach(self) -> np.ndarray:
        return self.idx < self.l_end

    def path(self, i: int) -> str:
        return f"{self.rel_dir}/{CONSUME_QUEUE.file_name(self.base + i, self.file_size)}"

    def where(self, i: int) -> QueuePlace:
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "queue_offset": self.base + i,
            "file_offset": CONSUME_QUEUE.file_offset(self.base + i, self.file_size),
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
        return queue_row(
            self.topic,
            self.queue_id,
            findings,
            live_entries,
            len(self.entries),
            b + self.l_end,
            b + self.r_min,
            b + self.r_end,
            max_physic_offset(self.lv.offset[: self.l_end], self.lv.size[: self.l_end], self.lv.valid[: self.l_end]),
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
    damaged: Sequence[tuple[int, int]] = (),
) -> QueueAudit:
    """Compare one live queue's files with the rebuilt ones (file name -> bytes; names are 20-digit starts).

    ``commitlog_min``/``commitlog_max``: first offset of the commitlog and the end of its last
    valid record. ``schedule_tags_hash``: for SCHEDULE_TOPIC_XXXX, (commitlog offset, size) -> the
    TAGS hash of the record there (None when unreadable), to recognise the 4.9.8 crash-recovery quirk.
    ``damaged``: the commitlog ranges [start, end) of damaged records (damaged-records): live units pointing into
    them are cq-damaged-entries, not wrong ones.
    """
    q = _Queue.of(topic, queue_id, live, rebuilt, cfg.cq_file_size, commitlog_min, commitlog_max)
    if q is None:
        return QueueAudit(topic, queue_id, [], queue_row(topic, queue_id, [], 0, 0, None, None, None), [], [])
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
        row = queue_row(topic, queue_id, findings, 0, len(q.entries), None, q.base + q.r_min, q.base + q.r_end)
        return QueueAudit(topic, queue_id, findings, row, sorted(rebuilt), [])
    masks = _entry_masks(q, cfg, schedule_tags_hash, damaged)
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
        s = CONSUME_QUEUE.first_unit(name) - q.base
        window = slice(s, s + q.per_file)
        lost = np.flatnonzero(q.rb.valid[window] & (q.lv.state[window] == _TORN)) + s
        partial = CONSUME_QUEUE.partial_unit(len(data))
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
    row = queue_row(q.topic, q.queue_id, findings, 0, 0, None, None, None)
    return QueueAudit(q.topic, q.queue_id, findings, row, [], delete)


#: the message of ``cq-damaged-entries`` (ConsumeQueue and BatchConsumeQueue units alike)
DAMAGED_UNITS = (
    "{count} units from queue offset {first} point into damaged records (damaged-records): those messages are "
    "lost, and the broker serves the damaged bytes: a pull whose result holds one decodes only the messages "
    "before it, losing the sound ones after it in that result; the rebuilt queue has no unit for them"
)


def into_ranges(offset: np.ndarray, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """Per unit: its commitlog offset lies in one of ``ranges`` ([start, end))."""
    inside = np.zeros(len(offset), dtype=bool)
    for start, end in ranges:
        inside |= (offset >= start) & (offset < end)
    return inside


def _entry_masks(
    q: _Queue,
    cfg: BrokerConfig,
    schedule_tags_hash: Callable[[int, int], int | None] | None,
    damaged: Sequence[tuple[int, int]] = (),
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
    into_damage = extra & into_ranges(lv.offset, damaged)
    missing = r_entry & ~lv.valid & ~lv.blank
    present = np.flatnonzero(r_entry & lv.valid)
    last_present = int(present[-1]) if len(present) else -1
    return {
        "wrong": (differ & ~quirk) | (extra & ~into_damage),
        "damaged": into_damage,
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
    out += q.first_count("cq-damaged-entries", m["damaged"], DAMAGED_UNITS)
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
        s = CONSUME_QUEUE.first_unit(name) - q.base
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
        s = CONSUME_QUEUE.first_unit(name) - q.base
        odd = len(data) != q.file_size or int(name) > last_rebuilt or bad[s : s + q.per_file].any()
        if name not in q.rebuilt and odd:
            delete.append(name)
    return write, sorted(delete)


def queue_row(
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


def max_physic_offset(offset: np.ndarray, size: np.ndarray, valid: np.ndarray | None = None) -> int:
    """offset + size of the last (valid) unit: where a queue's records end in the commitlog; -1 without one."""
    last = np.flatnonzero(valid) if valid is not None else np.arange(len(offset))
    return int(offset[last[-1]]) + int(size[last[-1]]) if len(last) else -1
