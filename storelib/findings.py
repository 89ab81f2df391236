"""Every finding kind, in one registry, and the Finding record: the shared report schema.

Used by rebuild (damaged segments, queue offset gaps), audit and recover. ``KINDS`` holds every fact about a
kind, once: its area of the store, severity and meaning, whether ``rmqstore recover`` repairs it (or its
checkpoint step answers it), whether it stops recover altogether and what to do then, whether the broker's
load() fails on it or its recovery stops at it, whether it is damage to one record, whether it leaves a run
incomplete. Code asks the kind; the docs' tables of kinds are made from it (``kinds_table``, ``python -m
storelib.findings --markdown``; tests/test_findings.py fails when a page's table differs).
``finding()`` is the only way a Finding is made, so an unregistered kind fails where it is emitted.
``Finding.to_dict`` is the documented, stable JSON schema of every report.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict, Unpack

SEVERITIES = ("info", "warning", "error")


@dataclasses.dataclass(frozen=True)
class Finding:
    kind: str  # what was found, e.g. "cq-wrong-entries", "crc-mismatch" (a key of KINDS)
    severity: str  # "info" (expected, e.g. expired head), "warning", "error": the kind's
    file: str  # store-relative path of the file concerned ("" for the store as a whole)
    message: str  # one sentence for a person, in the broker's words
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None  # first queue offset concerned
    commitlog_offset: int | None = None  # first commitlog (physical) offset concerned
    file_offset: int | None = None  # byte offset inside ``file``
    count: int | None = None  # how many entries/records/bytes are concerned
    expected: str | None = None
    actual: str | None = None

    def __post_init__(self) -> None:
        kind = KINDS.get(self.kind)
        if kind is None or kind.severity != self.severity:
            raise ValueError(f"finding {self.kind!r} of severity {self.severity!r} is not a registered kind")

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:  # a report's JSON object
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


#: the parts of the store, one line of the verdict each, in this order
AREA_COMMITLOG = "commitlog"
AREA_CQ = "ConsumeQueue"
AREA_INDEX = "IndexFile"
AREA_CHECKPOINT = "checkpoint and abort"
AREA_RUN = "this audit"
AREA_TIMERS = "timers and delay levels"
AREAS = (AREA_COMMITLOG, AREA_CQ, AREA_INDEX, AREA_CHECKPOINT, AREA_TIMERS, AREA_RUN)
#: how ``CommitLog.checkMessageAndReturnSize`` treats such a record when the broker recovers (``Kind.recovery``)
STOPS = "stops"  # it fails: recovery truncates the log there
BODY_CRC = "body-crc"  # it fails when checkCRCOnRecover checks BODYCRC (forceVerifyPropCRC off)
PROPERTY_CRC = "property-crc"  # it fails when checkCRCOnRecover checks the __CRC32# property (forceVerifyPropCRC)


@dataclasses.dataclass(frozen=True)
class Kind:
    """Everything the toolkit knows about one kind of finding: the one place each such fact is written."""

    area: str  # the part of the store it is about (AREAS)
    severity: str
    meaning: str
    repairable: bool = False  # ``rmqstore recover`` replaces the files concerned
    by_checkpoint: bool = False  # recover's checkpoint step answers it: crash recovery then starts past it
    refusal: str = ""  # recover refuses while it stands (the rebuilt index cannot vouch for the store): do this
    incomplete: bool = False  # parts of the store were not read: the run's result is incomplete
    start_fails: str = ""  # ``DefaultMessageStore.load()`` fails, so the broker exits instead of starting: why
    record_damage: bool = False  # damage to one record: never a reason to stop or skip a segment
    kept: bool = False  # (record damage) the record still frames and is dispatched
    recovery: str = ""  # how the broker's recovery treats such a record (STOPS, BODY_CRC, PROPERTY_CRC)
    index_build: bool = False  # found building the index, not scanning the commitlog: the audit takes rebuild.json's
    at_start: str = ""  # (timers, delay levels, damaged records) what the broker does with it when it starts
    truncation: bool = False  # the broker's recovery truncates the log there (report.json's verdict.truncate)
    salvaged: bool = False  # ``rmqstore recover --salvage`` rewrites the records concerned (docs/salvage.md)

    @property
    def blocks_recover(self) -> bool:
        """The rebuilt index cannot vouch for the store while such a finding stands."""
        return bool(self.refusal)


_CQ, _LOG, _INDEX, _CHECKPOINT, _RUN = AREA_CQ, AREA_COMMITLOG, AREA_INDEX, AREA_CHECKPOINT, AREA_RUN


def _timer(severity: str, what: str, at_start: str, repairable: bool = False, start_fails: str = "") -> Kind:
    """A kind of the timer store or the delay offsets: its meaning says what the broker does with it at start."""
    meaning = f"{what}: at start the broker {at_start}"
    return Kind(AREA_TIMERS, severity, meaning, repairable, start_fails=start_fails, at_start=at_start)


def _segment_stops(meaning: str, start_fails: str = "") -> Kind:
    """Records stop in the middle of the log: an error the broker's recovery stops at."""
    return Kind(_LOG, "error", meaning, start_fails=start_fails, recovery=STOPS)


#: every finding kind an audit reports (with those of the rebuild it includes), for the docs and the HTML legend
KINDS: dict[str, Kind] = {
    # ConsumeQueue
    "cq-missing-tail": Kind(
        _CQ, "error", "the queue stops before the commitlog's last message of it (crash before dispatch)", True
    ),
    "cq-dirty-tail": Kind(
        _CQ, "warning", "entries past the queue's end point at or past the commitlog's last valid record", True
    ),
    "cq-wrong-entries": Kind(
        _CQ, "error", "entries whose commitlog offset, size or tagsCode differ (first queue offset, count)", True
    ),
    "cq-schedule-tagscode-quirk": Kind(
        _CQ,
        "warning",
        "SCHEDULE_TOPIC_XXXX entries hold the TAGS hash, not the deliver time: the known 4.9.8 crash-recovery quirk",
        True,
    ),
    "cq-zeroed-entries": Kind(
        _CQ, "error", "invalid (zeroed) units inside the queue: the broker ends the queue there", True
    ),
    "cq-torn-file": Kind(
        _CQ,
        "error",
        "a ConsumeQueue file of the wrong size or with a partial unit: the broker will not load",
        True,
        start_fails="a ConsumeQueue file has the wrong length",
    ),
    "cq-missing-file": Kind(_CQ, "error", "a ConsumeQueue file in the middle of the queue does not exist", True),
    "cq-extra-file": Kind(
        _CQ,
        "warning",
        "a ConsumeQueue file after the queue's last file; an empty last file breaks correctMinOffset at start",
        True,
    ),
    "cq-damaged-entries": Kind(
        _CQ,
        "error",
        "live units of messages whose records are damaged (damaged-records): lost; the rebuilt queue has no unit there",
    ),
    "cq-expired-head": Kind(_CQ, "info", "entries below the commitlog's min offset: expected after retention"),
    "cq-wrong-pre-blank": Kind(_CQ, "error", "the pre-blank units before a queue's first entry are wrong", True),
    "cq-no-messages": Kind(_CQ, "warning", "a live queue directory whose queue has no message in the commitlog", True),
    "cq-missing-queue": Kind(_CQ, "error", "a queue with messages in the commitlog has no ConsumeQueue files", True),
    "cq-empty-queue": Kind(
        _CQ, "warning", "a live queue directory without a single entry, of a queue with no message in the commitlog"
    ),
    "cq-stale-bytes": Kind(
        _CQ, "info", "non-zero bytes after the queue's logical end (left by a truncation; never read)"
    ),
    "cq-rolled-back-rocksdb": Kind(
        _CQ,
        "warning",
        "a RocksDB ConsumeQueue the broker does not read (storeType=default): its file ConsumeQueues are rebuilt",
    ),
    "hostile-topic-name": Kind(
        _RUN,
        "error",
        "a record's topic is not a legal RocketMQ name: its queue is never written as a path",
        refusal="a record's topic is not a legal name: its queue cannot be written back",
        incomplete=True,
        index_build=True,
    ),
    "hostile-name": Kind(
        _RUN,
        "warning",
        "a directory or file name that is not a legal topic / queueId / file name; not read",
        incomplete=True,
    ),
    "unreadable-file": Kind(
        _RUN,
        "error",
        "a store file could not be read (permissions, vanished); that part is not audited",
        refusal="make every store file readable, then audit again",
        incomplete=True,
    ),
    # CommitLog (audit)
    "commitlog-preallocated": Kind(_LOG, "info", "a zero-filled segment after the last record (left by a crash)"),
    "abort-marker": Kind(
        _CHECKPOINT, "warning", "abort exists: the broker crashed (or runs) and will run crash recovery at start"
    ),
    "recovery-would-truncate": Kind(
        _LOG,
        "error",
        "the broker's recovery would stop at a damaged record and truncate every sound record after it; recover's "
        "new checkpoint moves its start past the damage",
        True,
        by_checkpoint=True,
        truncation=True,
    ),
    "recovery-would-truncate-after-recover": Kind(
        _LOG,
        "error",
        "the broker's recovery would stop at a damaged record and truncate every sound record after it, after "
        "recover too: from where recover's new checkpoint starts it, its walk still reaches the damage",
        truncation=True,
    ),
    "checkpoint-ahead": Kind(
        _CHECKPOINT, "error", "the checkpoint vouches for data the store does not hold", by_checkpoint=True
    ),
    # DLedger (dledger-<selfId>/: data, index, checkpoint)
    "dledger-entry-pos": Kind(
        _LOG,
        "error",
        "a DLedger entry whose pos field is not where it sits: recovery truncates the log there",
        record_damage=True,
        kept=True,
    ),
    "dledger-entry-index": Kind(
        _LOG,
        "error",
        "a DLedger entry whose index does not follow the previous entry's: recovery truncates there",
        record_damage=True,
        kept=True,
    ),
    "dledger-entry-term": Kind(
        _LOG,
        "error",
        "a DLedger entry whose term is below the previous entry's: recovery truncates there",
        record_damage=True,
        kept=True,
    ),
    "dledger-index-wrong": Kind(
        _LOG, "warning", "DLedger index units (pos, size, index, term) that differ from the entries in the data", True
    ),
    "dledger-checkpoint-ahead": Kind(
        _LOG, "error", "the DLedger checkpoint's committedIndex or endIndex is past the last entry in the data"
    ),
    "dledger-uncommitted": Kind(
        _LOG, "warning", "DLedger entries past the checkpoint's committedIndex (a one-node group commits them at start)"
    ),
    "checkpoint-unreadable": Kind(
        _CHECKPOINT, "warning", "the checkpoint file is missing or not 4096 bytes", True, by_checkpoint=True
    ),
    # CommitLog (found by the rebuild's scan, included as is)
    "crc-mismatch": Kind(
        _LOG,
        "warning",
        "a record whose BODYCRC does not match its body (kept: it frames correctly)",
        record_damage=True,
        kept=True,
        recovery=BODY_CRC,
        salvaged=True,
    ),
    "crc-property-mismatch": Kind(
        _LOG,
        "warning",
        "a record whose __CRC32# property (5.2+) does not match its bytes (kept: it frames correctly; the broker's "
        "recovery checks it only with forceVerifyPropCRC, else serves it as sound)",
        record_damage=True,
        kept=True,
        recovery=PROPERTY_CRC,
        salvaged=True,
    ),
    "length-mismatch": Kind(
        _LOG,
        "error",
        "a record whose fields do not add up to its TOTALSIZE (skipped by its length)",
        record_damage=True,
        recovery=STOPS,
    ),
    "damaged-records": Kind(
        _LOG,
        "error",
        "bytes where records do not frame, between sound records found on both sides; their messages are not indexed",
        record_damage=True,
        recovery=STOPS,
        at_start="recovery, when it walks them, stops at them and truncates the log; outside its walk the broker "
        "serves the queue units that point into them",
        salvaged=True,
    ),
    "bad-delay-level": Kind(
        _LOG,
        "error",
        "a SCHEDULE_TOPIC_XXXX record whose DELAY is not an integer",
        record_damage=True,
        recovery=STOPS,
    ),
    "commitlog-torn-tail": Kind(
        _LOG,
        "warning",
        "the log ends with a damaged record the broker would truncate (recover --truncate-torn-tail)",
        True,
    ),
    "segment-gap": _segment_stops("commitlog segments missing between two segments"),
    "segment-size": _segment_stops(
        "a commitlog segment of the wrong size", start_fails="a commitlog segment has the wrong size"
    ),
    "segment-misaligned": _segment_stops("a segment name that is not a multiple of mappedFileSizeCommitLog"),
    "segment-torn": _segment_stops("records stop in the middle of the log: a record runs past its segment"),
    "segment-bad-magic": _segment_stops("records stop in the middle of the log at an unknown magic code"),
    "segment-bad-size": _segment_stops("records stop in the middle of the log at an impossible TOTALSIZE"),
    "segment-bad-blank": _segment_stops("records stop in the middle of the log at a BLANK of the wrong length"),
    "segment-zero-tail": _segment_stops("records stop in the middle of the log at zero bytes before the segment's end"),
    "segments-skipped": Kind(
        _RUN,
        "error",
        "damaged segments left out of the rebuilt index",
        refusal="damaged segments were left out of the rebuilt index: recover cannot vouch for them",
        index_build=True,
    ),
    "stray-file": Kind(_RUN, "warning", "a file whose name is not a store file name; ignored"),
    "duplicate-queue-offset": Kind(
        _LOG, "error", "two records of one queue claim the same queue offset", index_build=True
    ),
    "queue-offset-gap": Kind(_LOG, "error", "queue offsets of a queue's records are not dense", index_build=True),
    "queue-header-contradicted": Kind(
        _LOG,
        "error",
        "a record whose QUEUEOFFSET, QUEUEID or topic (no CRC covers them) contradicts a queue: its records before and "
        "after it in the log leave one queue offset free, and it alone lies between them out of place (the broker "
        "serves it there as sound)",
        index_build=True,
        record_damage=True,
        kept=True,
        salvaged=True,
    ),
    # IndexFile
    "index-header-inconsistent": Kind(
        _INDEX, "error", "an IndexFile header disagrees with the file's slots and entries", True
    ),
    "index-bad-entries": Kind(_INDEX, "error", "live index entries that point at no record with their keyHash", True),
    "index-keys-not-found": Kind(
        _INDEX, "error", "keys of dispatched messages the broker's lookup does not find", True
    ),
    "index-file-differs": Kind(
        _INDEX, "error", "a live IndexFile differs from the rebuilt file at the same position", True
    ),
    "index-missing-file": Kind(_INDEX, "error", "the rebuilt index has more files than the live one", True),
    "index-extra-file": Kind(_INDEX, "warning", "the live index has files past the rebuilt ones", True),
    "index-deleted-on-recovery": Kind(
        _INDEX,
        "warning",
        "crash recovery deletes IndexFiles newer than the checkpoint's indexMsgTimestamp",
        True,
        by_checkpoint=True,
    ),
    # timers (timerlog/, timerwheel, config/timercheck) and delay levels (config/delayOffset.json)
    "timer-wheel-missing": _timer(
        "error",
        "the timerwheel file is missing, and pending timers' units lie before the timerlog's flush position minus one "
        "file",
        "creates an empty wheel and refiles only the timerlog's units from its last flush position minus one file: "
        "the timers filed before are never delivered (the 5.5.0 broker alone delivers none of them)",
        True,
    ),
    "timer-wheel-refilled": _timer(
        "warning",
        "the timerwheel file is missing; every pending timer's unit lies from the timerlog's flush position minus one "
        "file on",
        "creates an empty wheel and refiles the timerlog's units from its last flush position minus one file, which "
        "holds every pending one (read from the 5.0.0, 5.3.3 and 5.5.0 jars; no broker has shown it)",
        True,
    ),
    "timer-wheel-size": _timer(
        "error",
        "the timerwheel file is not 38,707,200 bytes",
        "does not start (TimerWheel: 'Timer wheel length')",
        True,
        start_fails="the timerwheel file has the wrong length",
    ),
    "timer-slot-wrong": _timer(
        "error",
        "timer wheel slots that differ from the fold of the timerlog",
        "patches only the slots of units from its last flush position minus one file; dequeue walks each slot back "
        "from its lastPos, so the other slots' timers are lost, repeated or delivered at another time",
        True,
    ),
    "timer-snapshot-wrong": _timer(
        "warning",
        "a timerwheel.<position> snapshot (5.4.0+) that differs from the fold of the timerlog before its position",
        "loads the newest snapshot instead of timerwheel (with timerWheelSnapshotFlush)",
    ),
    "timer-log-torn": _timer(
        "warning",
        "timerlog units stop at damage before the timerlog's end",
        "truncates the timerlog there when its recovery walks that file, losing every later unit",
    ),
    "timer-unit-past-log": _timer(
        "error",
        "timerlog units that point at or past the commitlog's end (after a truncation)",
        "cannot read their messages at dequeue and drops them; recover cuts them off",
        True,
    ),
    "timer-unit-bad-record": _timer(
        "error",
        "timerlog units that point at no rmq_sys_wheel_timer record of their size",
        "cannot decode their messages at dequeue and drops the timers",
    ),
    "timer-unit-wrong-time": _timer(
        "error",
        "timerlog units filed under another time than their record's TIMER_OUT_MS",
        "delivers them at the unit's time",
    ),
    "timer-unit-duplicate": _timer(
        "warning",
        "rmq_sys_wheel_timer records with more than one timerlog unit (a retried enqueue)",
        "delivers such a message once per unit",
    ),
    "timer-checkpoint-unreadable": _timer(
        "error",
        "config/timercheck is missing or shorter than its fields",
        "enqueues rmq_sys_wheel_timer from its first record again and reads the wheel from 7 days back, "
        "delivering timers again",
        True,
    ),
    "timer-checkpoint-ahead": _timer(
        "error",
        "config/timercheck points past the timerlog's end or past rmq_sys_wheel_timer's records",
        "cannot read what it points at; 5.0.0-5.2.x do not move the enqueue offset back into the queue, so new timers "
        "wait until the queue grows past it",
        True,
    ),
    "timer-lookback-exceeded": _timer(
        "warning",
        "pending timers due before the broker's 7-day look-back",
        "reads the wheel from at most 7 days back: never delivers them (send them again: inspect --pending-out)",
    ),
    "timer-rocksdb-not-audited": _timer(
        "info",
        "the RocksDB timer store (5.4.0+, timerRocksDBEnable) holds records this tool does not check",
        "with timerRocksDBEnable delivers them from its timeline",
    ),
    "schedule-offsets-missing": _timer(
        "error",
        "delay levels with records and no delivered offset in delayOffset.json (nor its .bak)",
        "starts such a level at its first record and delivers every delayed message of it again",
        True,
    ),
    "schedule-offsets-unreadable": _timer(
        "error",
        "delayOffset.json and its .bak cannot be read",
        "does not start (ConfigManager.load fails)",
        True,
        start_fails="delayOffset.json and its .bak cannot be read",
    ),
    "schedule-offset-behind": _timer(
        "warning",
        "a delay level's offset below what the commitlog shows delivered",
        "delivers the messages between again",
        True,
    ),
    "schedule-offset-ahead": _timer(
        "error",
        "a delay level's offset above what the commitlog shows delivered",
        "never delivers the messages between",
        True,
    ),
    "schedule-delivered-out-of-order": _timer(
        "warning",
        "delayed messages delivered after an earlier one of their level was not",
        "delivers them again when it delivers the earlier one (no offset can say so)",
    ),
    # the run
    "store-in-use": Kind(
        _RUN,
        "warning",
        "the store was being written while it was audited; tail findings may be moving",
        refusal="stop the broker, then audit again",
        incomplete=True,
    ),
    "rebuilt-stale": Kind(
        _RUN,
        "error",
        "the rebuilt index was made from another state of the commitlog",
        refusal="rebuild the index from the store as it is now, then audit again",
    ),
}


class QueuePlace(TypedDict, total=False):
    """Where in a queue (or a queue's file) a finding is."""

    topic: str | None
    queue_id: int | None
    queue_offset: int | None
    file_offset: int | None


class FindingFields(QueuePlace, total=False):
    """The optional fields of a Finding, as ``finding()`` takes them."""

    commitlog_offset: int | None
    count: int | None
    expected: str | None
    actual: str | None


def finding(kind: str, file: str, message: str, **fields: Unpack[FindingFields]) -> Finding:
    """A Finding of a registered kind, with the kind's severity: the only way findings are made."""
    if kind not in KINDS:
        raise KeyError(f"finding kind {kind!r} is not registered in storelib.findings.KINDS")
    return Finding(kind, KINDS[kind].severity, file, message, **fields)


def worst(findings: Iterable[Finding]) -> str:
    """The highest severity among ``findings`` ("ok" when there are none)."""
    levels = [SEVERITIES.index(f.severity) for f in findings]
    return SEVERITIES[max(levels)] if levels else "ok"


def is_divergence(f: Finding) -> bool:
    return f.severity != "info"


def is_repairable(f: Finding) -> bool:
    """A divergence that ``rmqstore recover`` fixes (by replacing index files or the checkpoint)."""
    return is_divergence(f) and KINDS[f.kind].repairable


def blocks_recover(f: Finding) -> bool:
    """The rebuilt index cannot vouch for the store while this finding stands."""
    return KINDS[f.kind].blocks_recover


def finding_order(f: Finding) -> tuple[object, ...]:
    """Worst first, then by file and position: the order of every report."""
    return (-SEVERITIES.index(f.severity), f.file, f.queue_offset or -1, f.commitlog_offset or -1, f.kind, *tie(f))


def tie(f: Finding) -> tuple[str, ...]:
    """The last key of every order of findings: every field, so that two findings equal in the leading keys still
    come in one order, whatever order the tasks that found them finished in."""
    return tuple("" if v is None else f"{v!r}" for v in dataclasses.astuple(f))


def kinds_table(areas: Iterable[str] = AREAS) -> str:
    """The Markdown table of the kinds of ``areas``, in registry order: kind, severity, whether recover repairs it,
    meaning."""
    wanted = set(areas)
    rows = ["| kind | severity | recover | meaning |", "|---|---|---|---|"]
    for name, k in KINDS.items():
        if k.area in wanted:
            rows.append(f"| `{name}` | {k.severity} | {'yes' if k.repairable else ''} | {k.meaning} |")
    return "\n".join(rows)


if __name__ == "__main__":  # python -m storelib.findings --markdown [AREA ...]: the table of those areas' kinds
    if sys.argv[1:2] != ["--markdown"]:
        sys.exit("usage: python -m storelib.findings --markdown [AREA ...]")
    print(kinds_table(sys.argv[2:] or AREAS))
