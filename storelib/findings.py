"""Every finding kind, in one registry, and the Finding record: the shared report schema.

Used by rebuild (damaged segments, queue offset gaps), audit and recover. ``KINDS`` gives each kind its
severity, meaning, whether ``rmqstore recover`` repairs it and whether it stops recover altogether; the
README's table of kinds is checked against it (tests/test_findings.py). ``finding()`` is the only way a
Finding is made, so an unregistered kind fails where it is emitted. ``Finding.to_dict`` is the documented,
stable JSON schema of every report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

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
    def from_dict(cls, d: dict[str, object]) -> Finding:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclasses.dataclass(frozen=True)
class Kind:
    severity: str
    meaning: str
    repairable: bool = False  # ``rmqstore recover`` replaces the files concerned
    blocks_recover: bool = False  # the rebuilt index cannot vouch for the store: recover refuses


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
    "cq-empty-queue": Kind(
        "warning", "a live queue directory without a single entry, of a queue with no message in the commitlog"
    ),
    "cq-rolled-back-rocksdb": Kind(
        "warning",
        "a RocksDB ConsumeQueue the broker does not read (storeType=default): its file ConsumeQueues are rebuilt",
    ),
    "cq-stale-bytes": Kind("info", "non-zero bytes after the queue's logical end (left by a truncation; never read)"),
    "hostile-topic-name": Kind(
        "error", "a record's topic is not a legal RocketMQ name: its queue is never written as a path", False, True
    ),
    "hostile-name": Kind(
        "warning", "a directory or file name that is not a legal topic / queueId / file name; not read"
    ),
    "unreadable-file": Kind(
        "error", "a store file could not be read (permissions, vanished); that part is not audited", False, True
    ),
    # CommitLog (audit)
    "commitlog-preallocated": Kind("info", "a zero-filled segment after the last record (left by a crash)"),
    "abort-marker": Kind("warning", "abort exists: the broker crashed (or runs) and will run crash recovery at start"),
    "recovery-would-truncate": Kind(
        "error", "the broker's recovery would stop at a damaged record and truncate every sound record after it", True
    ),
    "checkpoint-ahead": Kind("error", "the checkpoint vouches for data the store does not hold"),
    # DLedger (dledger-<selfId>/: data, index, checkpoint)
    "dledger-entry-pos": Kind(
        "error", "a DLedger entry whose pos field is not where it sits: recovery truncates the log there"
    ),
    "dledger-entry-index": Kind(
        "error", "a DLedger entry whose index does not follow the previous entry's: recovery truncates there"
    ),
    "dledger-entry-term": Kind(
        "error", "a DLedger entry whose term is below the previous entry's: recovery truncates there"
    ),
    "dledger-index-wrong": Kind(
        "warning", "DLedger index units (pos, size, index, term) that differ from the entries in the data", True
    ),
    "dledger-checkpoint-ahead": Kind(
        "error", "the DLedger checkpoint's committedIndex or endIndex is past the last entry in the data"
    ),
    "dledger-uncommitted": Kind(
        "warning", "DLedger entries past the checkpoint's committedIndex (a one-node group commits them at start)"
    ),
    "checkpoint-unreadable": Kind("warning", "the checkpoint file is missing or not 4096 bytes", True),
    # CommitLog (found by the rebuild's scan, included as is)
    "crc-mismatch": Kind("warning", "a record whose BODYCRC does not match its body (kept: it frames correctly)"),
    "crc-property-mismatch": Kind(
        "warning", "a record whose __CRC32# property (5.2+) does not match its bytes (kept: it frames correctly)"
    ),
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
    "segments-skipped": Kind("error", "damaged segments left out of the rebuilt index", False, True),
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
    "store-in-use": Kind(
        "warning", "the store was being written while it was audited; tail findings may be moving", False, True
    ),
    "rebuilt-stale": Kind("error", "the rebuilt index was made from another state of the commitlog", False, True),
}


def finding(kind: str, file: str, message: str, **fields: object) -> Finding:
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
    return (-SEVERITIES.index(f.severity), f.file, f.queue_offset or -1, f.commitlog_offset or -1, f.kind)
