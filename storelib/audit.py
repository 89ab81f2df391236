"""Audit rules, no Spark: how a live store's files differ from the index rebuilt from its commitlog.

ConsumeQueue: a queue is compared unit by unit (20-byte units, entry ``n`` at logical byte
``n * 20``) with the rebuilt queue. "A unit is valid while offset >= 0 && size > 0; the first
invalid unit ends the queue" (``ConsumeQueue.recover``): that is the live queue's logical
end, and non-zero bytes past it are stale, reported separately. Pre-blank units are offset 0,
size 0x7fffffff, tagsCode 0.

CommitLog: what the broker's own recovery would make of the log (where it starts, where its
CRC check stops it) against the last valid record found by the rebuild.

IndexFile: header consistency, the broker's key lookup (``IndexService.queryOffset``), and
the live files compared with the rebuilt ones by order (names are creation times).

Every result is a ``storelib.findings.Finding``; ``KINDS`` documents each kind.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping

import numpy as np

from storelib.checkpoint import Checkpoint
from storelib.config import BrokerConfig
from storelib.constants import (
    CQ_BLANK_SIZE,
    CQ_STORE_UNIT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HASH_SLOT_SIZE,
    INDEX_HEADER_SIZE,
    SCHEDULE_TOPIC,
    offset_file_name,
)
from storelib.consumequeue import UNIT_DTYPE, decode_units
from storelib.findings import SEVERITIES, Finding
from storelib.indexfile import IndexFileReader, IndexHeader, query_offsets

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


@dataclasses.dataclass(frozen=True)
class Kind:
    severity: str
    meaning: str
    repairable: bool = False  # ``rmqstore recover`` replaces the files concerned


#: every finding kind an audit reports (with those of the rebuild it includes), for the README and the HTML legend
KINDS: dict[str, Kind] = {
    # ConsumeQueue
    "cq-missing-tail": Kind(
        "error", "the queue stops before the commitlog's last message of it (crash before dispatch)", True
    ),
    "cq-dirty-tail": Kind(
        "warning", "entries past the queue's end point at or past the commitlog's last valid record", True
    ),
    "cq-wrong-entries": Kind(
        "error", "entries whose commitlog offset, size or tagsCode differ (first queue offset, count)", True
    ),
    "cq-schedule-tagscode-quirk": Kind(
        "warning",
        "SCHEDULE_TOPIC_XXXX entries hold the TAGS hash, not the deliver time: the known 4.9.8 crash-recovery quirk",
        True,
    ),
    "cq-zeroed-entries": Kind(
        "error", "invalid (zeroed) units inside the queue: the broker ends the queue there", True
    ),
    "cq-torn-file": Kind(
        "error", "a ConsumeQueue file of the wrong size or with a partial unit: the broker will not load", True
    ),
    "cq-missing-file": Kind("error", "a ConsumeQueue file in the middle of the queue does not exist", True),
    "cq-extra-file": Kind(
        "warning",
        "a ConsumeQueue file after the queue's last file; an empty last file breaks correctMinOffset at start",
        True,
    ),
    "cq-expired-head": Kind("info", "entries below the commitlog's min offset: expected after retention"),
    "cq-wrong-pre-blank": Kind("error", "the pre-blank units before a queue's first entry are wrong", True),
    "cq-no-messages": Kind("warning", "a live queue directory whose queue has no message in the commitlog", True),
    "cq-missing-queue": Kind("error", "a queue with messages in the commitlog has no ConsumeQueue files", True),
    "cq-stale-bytes": Kind("info", "non-zero bytes after the queue's logical end (left by a truncation; never read)"),
    "hostile-name": Kind(
        "warning", "a directory or file name that is not a legal topic / queueId / file name; not read"
    ),
    "unreadable-file": Kind(
        "error", "a store file could not be read (permissions, vanished); that part is not audited"
    ),
    # CommitLog (audit)
    "commitlog-preallocated": Kind("info", "a zero-filled segment after the last record (left by a crash)"),
    "abort-marker": Kind("warning", "abort exists: the broker crashed (or runs) and will run crash recovery at start"),
    "recovery-would-truncate": Kind(
        "error", "the broker's recovery would stop at a damaged record and truncate every sound record after it", True
    ),
    "checkpoint-ahead": Kind("error", "the checkpoint vouches for data the store does not hold"),
    "checkpoint-unreadable": Kind("warning", "the checkpoint file is missing or not 4096 bytes", True),
    # CommitLog (found by the rebuild's scan, included as is)
    "crc-mismatch": Kind("warning", "a record whose BODYCRC does not match its body (kept: it frames correctly)"),
    "length-mismatch": Kind("error", "a record whose fields do not add up to its TOTALSIZE (skipped by its length)"),
    "bad-delay-level": Kind("error", "a SCHEDULE_TOPIC_XXXX record whose DELAY is not an integer"),
    "commitlog-torn-tail": Kind(
        "warning", "the log ends with a damaged record the broker would truncate (recover --truncate-torn-tail)", True
    ),
    "segment-gap": Kind("error", "commitlog segments missing between two segments"),
    "segment-size": Kind("error", "a commitlog segment of the wrong size"),
    "segment-misaligned": Kind("error", "a segment name that is not a multiple of mappedFileSizeCommitLog"),
    "segment-torn": Kind("error", "records stop in the middle of the log: a record runs past its segment"),
    "segment-bad-magic": Kind("error", "records stop in the middle of the log at an unknown magic code"),
    "segment-bad-size": Kind("error", "records stop in the middle of the log at an impossible TOTALSIZE"),
    "segment-bad-blank": Kind("error", "records stop in the middle of the log at a BLANK of the wrong length"),
    "segment-zero-tail": Kind("error", "records stop in the middle of the log at zero bytes before the segment's end"),
    "segments-skipped": Kind("error", "damaged segments left out of the rebuilt index"),
    "stray-file": Kind("warning", "a file whose name is not a store file name; ignored"),
    "duplicate-queue-offset": Kind("error", "two records of one queue claim the same queue offset"),
    "queue-offset-gap": Kind("error", "queue offsets of a queue's records are not dense"),
    # IndexFile
    "index-header-inconsistent": Kind("error", "an IndexFile header disagrees with the file's slots and entries", True),
    "index-bad-entries": Kind("error", "live index entries that point at no record with their keyHash", True),
    "index-keys-not-found": Kind("error", "keys of dispatched messages the broker's lookup does not find", True),
    "index-file-differs": Kind("error", "a live IndexFile differs from the rebuilt file at the same position", True),
    "index-missing-file": Kind("error", "the rebuilt index has more files than the live one", True),
    "index-extra-file": Kind("warning", "the live index has files past the rebuilt ones", True),
    "index-deleted-on-recovery": Kind(
        "warning", "crash recovery deletes IndexFiles newer than the checkpoint's indexMsgTimestamp", True
    ),
    # the run
    "store-in-use": Kind("warning", "the store was being written while it was audited; tail findings may be moving"),
    "rebuilt-stale": Kind("error", "the rebuilt index was made from another state of the commitlog"),
}


def finding(kind: str, file: str, message: str, **fields: object) -> Finding:
    """A Finding of a documented kind, with the kind's severity."""
    return Finding(kind, KINDS[kind].severity, file, message, **fields)


def worst(findings: Iterable[Finding]) -> str:
    """The highest severity among ``findings`` ("ok" when there are none)."""
    levels = [SEVERITIES.index(f.severity) for f in findings]
    return SEVERITIES[max(levels)] if levels else "ok"


def is_divergence(f: Finding) -> bool:
    return f.severity != "info"


def is_repairable(f: Finding) -> bool:
    """A divergence that ``rmqstore recover`` fixes (by replacing index files or the checkpoint)."""
    return is_divergence(f) and f.kind in KINDS and KINDS[f.kind].repairable


# --- ConsumeQueue --------------------------------------------------------------------------

_NO_FILE, _TORN, _UNIT = 0, 1, 2


@dataclasses.dataclass
class QueueAudit:
    """One queue's findings, its row of the per-queue table, and the files recover would change."""

    topic: str
    queue_id: int
    findings: list[Finding]
    row: dict[str, object]
    write: list[str]  # rebuilt file names that replace or create live files
    delete: list[str]  # live file names to delete


def unit_text(offset: int, size: int, tags_code: int) -> str:
    return f"commitlog offset {offset}, size {size}, tagsCode {tags_code}"


@dataclasses.dataclass
class _Units:
    """A queue's units laid out by position (relative to ``base``), with per-position file state."""

    offset: np.ndarray
    size: np.ndarray
    tags: np.ndarray
    state: np.ndarray

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
        return cls(
            units["offset"].astype(np.int64), units["size"].astype(np.int64), units["tags_code"].astype(np.int64), state
        )

    @property
    def present(self) -> np.ndarray:
        return self.state == _UNIT

    @property
    def blank(self) -> np.ndarray:
        return self.present & (self.offset == 0) & (self.size == CQ_BLANK_SIZE) & (self.tags == 0)

    @property
    def valid(self) -> np.ndarray:
        """``offset >= 0 && size > 0``, pre-blank units excepted."""
        return self.present & (self.offset >= 0) & (self.size > 0) & ~self.blank

    @property
    def nonzero(self) -> np.ndarray:
        return self.present & ((self.offset != 0) | (self.size != 0) | (self.tags != 0))

    def text(self, i: int) -> str:
        if self.state[i] == _NO_FILE:
            return "no file"
        if self.state[i] == _TORN:
            return "past the end of a torn file"
        return unit_text(int(self.offset[i]), int(self.size[i]), int(self.tags[i]))


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of each run of True."""
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return list(zip(starts.tolist(), (ends - starts).tolist()))


def classify_queue(
    topic: str,
    queue_id: int,
    live: Mapping[str, bytes],
    rebuilt: Mapping[str, bytes],
    cfg: BrokerConfig,
    commitlog_min: int,
    commitlog_max: int,
    schedule_tags_hash: Mapping[int, int] | None = None,
) -> QueueAudit:
    """Compare one live queue's files with the rebuilt ones (file name -> bytes; names are 20-digit starts).

    ``commitlog_min``/``commitlog_max``: first offset of the commitlog and the end of its last
    valid record. ``schedule_tags_hash``: for SCHEDULE_TOPIC_XXXX, commitlog offset -> TAGS
    hash of the record, to recognise the 4.9.8 crash-recovery tagsCode quirk.
    """
    file_size = cfg.cq_file_size
    per_file = file_size // CQ_STORE_UNIT_SIZE
    rel_dir = f"consumequeue/{topic}/{queue_id}"
    starts = [int(n) // CQ_STORE_UNIT_SIZE for n in (*live, *rebuilt)]
    if not starts:
        return QueueAudit(topic, queue_id, [], _row(topic, queue_id, [], 0, 0, None, None, None), [], [])
    base = min(starts)
    n = max(starts) + per_file - base
    lv = _Units.layout(live, base, n, per_file, file_size)
    rb = _Units.layout(rebuilt, base, n, per_file, file_size)
    idx = np.arange(n)

    def path(i: int) -> str:
        return f"{rel_dir}/{offset_file_name((base + i) // per_file * file_size)}"

    def where(i: int) -> dict[str, object]:
        return {
            "topic": topic,
            "queue_id": queue_id,
            "queue_offset": base + i,
            "file_offset": (base + i) % per_file * CQ_STORE_UNIT_SIZE,
        }

    findings: list[Finding] = []
    r_entry = rb.valid
    entries = np.flatnonzero(r_entry)
    r_min = int(entries[0]) if len(entries) else n
    r_end = int(entries[-1]) + 1 if len(entries) else 0
    l_ok = lv.valid | lv.blank
    live_first = min(int(k) // CQ_STORE_UNIT_SIZE for k in live) - base if live else n
    stops = np.flatnonzero(~l_ok[live_first:])
    l_end = live_first + (int(stops[0]) if len(stops) else n - live_first)  # ConsumeQueue.recover's end
    reach = idx < l_end

    # torn files: wrong length or a partial unit
    for name, data in sorted(live.items()):
        if len(data) != file_size:
            s = int(name) // CQ_STORE_UNIT_SIZE - base
            lost = np.flatnonzero(r_entry[s : s + per_file] & (lv.state[s : s + per_file] == _TORN)) + s
            partial = len(data) % CQ_STORE_UNIT_SIZE
            findings.append(
                finding(
                    "cq-torn-file",
                    f"{rel_dir}/{name}",
                    f"file is {len(data)} bytes, not {file_size}"
                    + (f", ending in a partial unit of {partial} bytes" if partial else "")
                    + f"; the broker will not load it; {len(lost)} entries of the queue are lost with it",
                    topic=topic,
                    queue_id=queue_id,
                    queue_offset=base + int(lost[0]) if len(lost) else None,
                    commitlog_offset=int(rb.offset[lost[0]]) if len(lost) else None,
                    file_offset=len(data) - partial,
                    count=len(lost),
                    expected=f"{file_size} bytes",
                    actual=f"{len(data)} bytes",
                )
            )

    if not len(entries):
        # no message of this queue in the commitlog: only expired entries are normal
        live_entries = np.flatnonzero(lv.valid & reach)
        expired = lv.offset[live_entries] < commitlog_min
        if len(live_entries) and not expired.all():
            i = int(live_entries[~expired][0])
            findings.append(
                finding(
                    "cq-no-messages",
                    path(i),
                    f"the commitlog holds no message of {topic}/{queue_id}, but the live queue has "
                    f"{int((~expired).sum())} entries pointing into it",
                    **where(i),
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
                    path(i),
                    f"all {len(live_entries)} entries point below the commitlog's min offset {commitlog_min}",
                    **where(i),
                    commitlog_offset=int(lv.offset[i]),
                    count=len(live_entries),
                )
            )
        delete = sorted(live) if any(is_divergence(f) for f in findings) else []
        return QueueAudit(
            topic, queue_id, findings, _row(topic, queue_id, findings, 0, 0, None, None, None), [], delete
        )

    if not live:
        findings.append(
            finding(
                "cq-missing-queue",
                rel_dir,
                f"{len(entries)} entries (queue offsets {base + r_min} to {base + r_end - 1}) have no file",
                topic=topic,
                queue_id=queue_id,
                queue_offset=base + r_min,
                commitlog_offset=int(rb.offset[r_min]),
                count=len(entries),
            )
        )
        row = _row(topic, queue_id, findings, 0, len(entries), None, base + r_min, base + r_end)
        return QueueAudit(topic, queue_id, findings, row, sorted(rebuilt), [])

    same = (lv.offset == rb.offset) & (lv.size == rb.size) & (lv.tags == rb.tags)
    differ = r_entry & lv.valid & ~same
    quirk = np.zeros(n, dtype=bool)
    if topic == SCHEDULE_TOPIC and schedule_tags_hash:
        cand = np.flatnonzero(differ & (lv.offset == rb.offset) & (lv.size == rb.size))
        quirk[cand] = [schedule_tags_hash.get(int(lv.offset[i])) == int(lv.tags[i]) for i in cand]
    head = idx < r_min
    not_entry = ~r_entry
    expired = not_entry & head & lv.valid & (lv.offset < commitlog_min) & reach
    dirty = not_entry & ~head & lv.valid & (lv.offset >= commitlog_max) & reach
    extra = not_entry & lv.valid & reach & ~expired & ~dirty
    wrong = (differ & ~quirk) | extra
    pre_blank = (r_entry & lv.blank) | (rb.blank & lv.present & ~lv.valid & ~lv.blank)
    missing = r_entry & ~lv.valid & ~lv.blank
    present = np.flatnonzero(r_entry & lv.valid)
    last_present = int(present[-1]) if len(present) else -1
    middle = missing & (idx < last_present)
    tail = missing & (idx > last_present) & (lv.state != _TORN)
    stale = not_entry & ~reach & lv.nonzero & ~rb.blank

    def first_count(kind: str, mask: np.ndarray, message: str, expected: str | None = None) -> None:
        hits = np.flatnonzero(mask)
        if not len(hits):
            return
        i = int(hits[0])
        findings.append(
            finding(
                kind,
                path(i),
                message.format(count=len(hits), first=base + i),
                **where(i),
                commitlog_offset=int(rb.offset[i] if r_entry[i] else lv.offset[i]),
                count=len(hits),
                expected=expected or (rb.text(i) if r_entry[i] or rb.blank[i] else "no entry"),
                actual=lv.text(i),
            )
        )

    first_count(
        "cq-wrong-entries", wrong, "{count} entries differ from the commitlog, the first at queue offset {first}"
    )
    first_count(
        "cq-schedule-tagscode-quirk",
        quirk,
        "{count} SCHEDULE_TOPIC_XXXX entries hold the TAGS hash as tagsCode instead of the deliver time "
        "(the 4.9.8 crash-recovery quirk: recovery runs before the delay table is loaded)",
    )
    first_count(
        "cq-dirty-tail",
        dirty,
        f"{{count}} entries after the queue's end (queue offset {base + r_end}) point at or past the commitlog's "
        f"last valid record ({commitlog_max}); the broker truncates them at start",
        expected=f"queue ends at queue offset {base + r_end}",
    )
    first_count(
        "cq-expired-head",
        expired,
        f"{{count}} entries from queue offset {{first}} point below the commitlog's min offset {commitlog_min}",
        expected="expired (retention)",
    )
    first_count("cq-wrong-pre-blank", pre_blank, "{count} units before the queue's first entry are not pre-blank units")
    first_count(
        "cq-missing-tail",
        tail,
        f"the queue ends at queue offset {{first}}, the commitlog has {{count}} more entries for it "
        f"(up to queue offset {base + r_end - 1})",
    )
    first_count(
        "cq-stale-bytes",
        stale,
        f"{{count}} units with stale bytes after the queue's logical end (queue offset {base + l_end})",
        expected="zero bytes",
    )
    for start, length in _runs(middle & (lv.state == _UNIT)):
        findings.append(
            finding(
                "cq-zeroed-entries",
                path(start),
                f"{length} entries from queue offset {base + start} are invalid units (offset < 0 or size <= 0); "
                f"ConsumeQueue.recover ends the queue there and drops the {r_end - start} entries "
                "from there on, sound ones included",
                **where(start),
                commitlog_offset=int(rb.offset[start]),
                count=length,
                expected=rb.text(start),
                actual=lv.text(start),
            )
        )
    no_file = middle & (lv.state == _NO_FILE)
    file_no = (base + idx) // per_file
    for f_no in np.unique(file_no[no_file]).tolist():
        lost = np.flatnonzero(no_file & (file_no == f_no))
        i = int(lost[0])
        findings.append(
            finding(
                "cq-missing-file",
                path(i),
                f"file missing in the middle of the queue: {len(lost)} entries from queue offset {base + i} are lost",
                topic=topic,
                queue_id=queue_id,
                queue_offset=base + i,
                commitlog_offset=int(rb.offset[i]),
                count=len(lost),
                expected=f"{file_size} bytes",
                actual="no file",
            )
        )

    last_rebuilt = max(int(k) for k in rebuilt)
    for name in sorted(k for k in live if int(k) > last_rebuilt):
        s = int(name) // CQ_STORE_UNIT_SIZE - base
        findings.append(
            finding(
                "cq-extra-file",
                f"{rel_dir}/{name}",
                f"file after the queue's last file ({offset_file_name(last_rebuilt)}), holding "
                f"{int(lv.nonzero[s : s + per_file].sum())} non-zero units",
                topic=topic,
                queue_id=queue_id,
                queue_offset=base + s,
                count=int(lv.nonzero[s : s + per_file].sum()),
                expected="no file",
                actual=f"{len(live[name])} bytes",
            )
        )

    write: list[str] = []
    delete: list[str] = []
    if any(is_divergence(f) for f in findings):
        bad = wrong | quirk | dirty | pre_blank | missing
        write = sorted(name for name, data in rebuilt.items() if live.get(name) != data)
        for name, data in live.items():
            s = int(name) // CQ_STORE_UNIT_SIZE - base
            if name not in rebuilt and (
                len(data) != file_size or int(name) > last_rebuilt or bad[s : s + per_file].any()
            ):
                delete.append(name)
    row = _row(
        topic,
        queue_id,
        findings,
        int((lv.valid & reach).sum()),
        len(entries),
        base + l_end,
        base + r_min,
        base + r_end,
    )
    return QueueAudit(topic, queue_id, findings, row, write, sorted(delete))


def _row(
    topic: str,
    queue_id: int,
    findings: list[Finding],
    live_entries: int,
    rebuilt_entries: int,
    live_end: int | None,
    rebuilt_min: int | None,
    rebuilt_end: int | None,
) -> dict[str, object]:
    """One line of the per-queue table."""
    bad = [f for f in findings if is_divergence(f)]
    return {
        "topic": topic,
        "queue_id": queue_id,
        "status": worst(findings),
        "kinds": sorted({f.kind for f in findings}),
        "live_entries": live_entries,
        "live_end": live_end,
        "rebuilt_entries": rebuilt_entries,
        "rebuilt_min": rebuilt_min,
        "rebuilt_end": rebuilt_end,
        "first_bad_queue_offset": min((f.queue_offset for f in bad if f.queue_offset is not None), default=None),
        "bad_entries": sum(f.count or 0 for f in bad),
    }


# --- CommitLog -------------------------------------------------------------------------------

#: rebuild findings at which the broker's recovery check stops (CRC checked on recovery)
RECOVERY_STOPS = ("crc-mismatch", "length-mismatch", "bad-delay-level")


@dataclasses.dataclass(frozen=True)
class SegmentFacts:
    """What the audit needs of a segment (from rebuild.json and the parsed records)."""

    file: str
    start: int
    messages: int
    end_offset: int
    first_store_timestamp: int  # 0 when the segment has no message


def recovery_start(segments: list[SegmentFacts], checkpoint: Checkpoint | None, abort: bool) -> int:
    """Index of the segment the broker's recovery starts from.

    Clean shutdown (``recoverNormally``): the third-last segment. Crash (``recoverAbnormally``):
    walking back from the last segment, the first whose first message is not after the
    checkpoint's min timestamp (min(physic, logics) - 3 s); segment 0 if none is.
    """
    if not abort:
        return max(0, len(segments) - 3)
    limit = checkpoint.min_timestamp() if checkpoint else 0
    for i in range(len(segments) - 1, -1, -1):
        ts = segments[i].first_store_timestamp
        if ts > 0 and ts <= limit:
            return i
    return 0


def check_commitlog(
    segments: list[SegmentFacts],
    rebuild_findings: list[Finding],
    checkpoint: Checkpoint | None,
    abort: bool,
    cfg: BrokerConfig,
    commitlog_max: int,
    last_store_timestamp: int,
    last_cq_store_timestamp: int,
) -> list[Finding]:
    """Preallocated segments, the abort marker, the checkpoint, and whether recovery would truncate sound data."""
    out: list[Finding] = []
    with_messages = [i for i, s in enumerate(segments) if s.messages > 0]
    last = with_messages[-1] if with_messages else -1
    for s in segments[last + 1 :]:
        if s.end_offset == s.start:
            out.append(
                finding(
                    "commitlog-preallocated",
                    f"commitlog/{s.file}",
                    "zero-filled segment after the last record; the broker deletes it at start",
                    commitlog_offset=s.start,
                )
            )
    start = recovery_start(segments, checkpoint, abort)
    how = "crash recovery (abort exists)" if abort else "normal recovery"
    if abort:
        out.append(
            finding(
                "abort-marker",
                "abort",
                f"the broker did not shut down cleanly; at start its {how} re-checks the commitlog from segment "
                f"{segments[start].file if segments else '-'}",
            )
        )
    if checkpoint is None:
        out.append(finding("checkpoint-unreadable", "checkpoint", "no readable 4096-byte checkpoint"))
    else:
        for field, have in (
            ("physicMsgTimestamp", last_store_timestamp),
            ("logicsMsgTimestamp", last_cq_store_timestamp),
        ):
            value = checkpoint.physic_msg_timestamp if field.startswith("physic") else checkpoint.logics_msg_timestamp
            if value > have:
                out.append(
                    finding(
                        "checkpoint-ahead",
                        "checkpoint",
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
                    "checkpoint",
                    f"confirmPhyOffset {checkpoint.confirm_phy_offset} is past the last valid record {commitlog_max}",
                    commitlog_offset=commitlog_max,
                    expected=f"<= {commitlog_max}",
                    actual=str(checkpoint.confirm_phy_offset),
                )
            )
    if segments:
        begin = segments[start].start
        stops = sorted(
            (f for f in rebuild_findings if f.commitlog_offset is not None and f.commitlog_offset >= begin),
            key=lambda f: f.commitlog_offset or 0,
        )
        stops = [
            f
            for f in stops
            if (f.kind in RECOVERY_STOPS and (f.kind != "crc-mismatch" or cfg.checkCRCOnRecover))
            or f.kind.startswith("segment-")
        ]
        if stops and (stops[0].commitlog_offset or 0) < commitlog_max:
            f = stops[0]
            at = f.commitlog_offset or 0
            lost = commitlog_max - at
            total = commitlog_max - segments[0].start
            out.append(
                finding(
                    "recovery-would-truncate",
                    f.file,
                    f"the broker's {how} starts at segment {segments[start].file}, stops at the record at "
                    f"commitlog offset {at} ({f.kind}) and truncates the commitlog there: {lost} bytes "
                    f"({100 * lost / max(1, total):.0f}% of the log) of records after it are lost to consumers",
                    commitlog_offset=at,
                    file_offset=f.file_offset,
                    count=lost,
                    expected=f"max offset {commitlog_max}",
                    actual=f"max offset {at} after recovery",
                )
            )
    return out


# --- IndexFile ------------------------------------------------------------------------------


def index_entries(reader: IndexFileReader) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(entry number, keyHash, commitlog offset) of the entries within the header's indexCount."""
    count = max(1, min(reader.header.index_count, len(reader.entries)))
    e = reader.entries[1:count]
    return np.arange(1, count, dtype=np.int64), e["key_hash"].astype(np.int32), e["phy_offset"].astype(np.int64)


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
    occupied = int((reader.slots > 0).sum()) if cfg.hashSlotCountRule == "occupied" else count - 1
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
    """The first difference between a live IndexFile and the rebuilt one at the same position."""
    if live == rebuilt:
        return []
    slots_end = INDEX_HEADER_SIZE + cfg.maxHashSlotNum * INDEX_HASH_SLOT_SIZE
    n = min(len(live), len(rebuilt))
    diff = np.flatnonzero(np.frombuffer(live, np.uint8, n) != np.frombuffer(rebuilt, np.uint8, n))
    at = int(diff[0]) if len(diff) else n
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
            count=len(diff) + abs(len(live) - len(rebuilt)),
            expected=exp or f"{len(rebuilt)} bytes as rebuilt",
            actual=act or f"{len(live)} bytes, {len(diff)} differ",
        )
    ]


def _header(data: bytes) -> tuple[int, ...]:
    return dataclasses.astuple(IndexHeader.unpack(data)) if len(data) >= INDEX_HEADER_SIZE else ()


def keys_not_found(readers: list[IndexFileReader], key: str, offsets: Iterable[int]) -> list[int]:
    """Commitlog offsets of ``key`` (``topic#k``) that the broker's lookup over all files does not return."""
    found = set(query_offsets(readers, key, INT_MAX, 0, LONG_MAX))
    return sorted(o for o in offsets if o not in found)


def index_file_name_after(name: str, previous: str | None) -> str:
    """``name``, or the previous name plus 1 ms when ``name`` would not sort after it (load order)."""
    if previous is None or name > previous:
        return name
    t = datetime.datetime.strptime(previous[:14], "%Y%m%d%H%M%S") + datetime.timedelta(
        milliseconds=int(previous[14:]) + 1
    )
    return t.strftime("%Y%m%d%H%M%S") + f"{t.microsecond // 1000:03d}"
