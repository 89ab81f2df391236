"""The reports the verbs write: rebuild.json (deterministic for the same input) and the audit's summary."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from storelib.checkpoint import Checkpoint
from storelib.config import BrokerConfig
from storelib.findings import KINDS, SEVERITIES, Finding, finding_order
from storelib.indexfile import IndexHeader
from storelib.segments import Segment, SegmentSummary, max_offset
from storelib.versions import BrokerRules

REBUILD_FORMAT = "rmq-store-rebuild/1"
REBUILD_REPORT = "rebuild.json"
AUDIT_FORMAT = "rmqstore-audit/1"


@dataclasses.dataclass(frozen=True)
class SegmentRecord:
    """rebuild.json's ``commitlog.segments`` entry: a segment and where and why its records stop."""

    file: str
    start: int
    size: int
    messages: int
    end_reason: str
    end_offset: int
    detail: str
    first_store_timestamp: int = 0  # of its first message, 0 when it has none
    fingerprint: str | None = None  # of its records: rebuilt-stale when the store's differ (None: not recorded)

    @classmethod
    def of(cls, s: Segment, summary: SegmentSummary) -> SegmentRecord:
        return cls(
            s.name,
            s.start,
            s.size,
            summary.messages,
            summary.end_reason,
            summary.end_offset,
            summary.detail or "",
            summary.first_store_timestamp,
            summary.fingerprint,
        )


@dataclasses.dataclass(frozen=True)
class CommitlogRecord:
    """rebuild.json's ``commitlog``: its segments, first and last offsets, message count."""

    segments: tuple[SegmentRecord, ...]
    min_offset: int
    max_offset: int
    messages: int


@dataclasses.dataclass(frozen=True)
class QueueRecord:
    """rebuild.json's ``consume_queues`` entry: one rebuilt queue (a QUEUE_SUMMARY_SCHEMA row less its findings)."""

    topic: str
    queue_id: int
    entries: int
    min_offset: int
    max_offset: int  # one past the last queue offset
    files: tuple[str, ...]
    last_commitlog_offset: int | None = None  # of its last unit (None: not recorded, it may touch any segment)


@dataclasses.dataclass(frozen=True)
class IndexFileRecord:
    """rebuild.json's ``index_files`` entry: a rebuilt IndexFile's name and header."""

    name: str
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int

    @classmethod
    def of(cls, name: str, header: IndexHeader) -> IndexFileRecord:
        return cls(name, **dataclasses.asdict(header))


@dataclasses.dataclass(frozen=True)
class DLedgerIndexRecord:
    """rebuild.json's ``dledger_index_files`` entry: a rebuilt DLedger index file (store-relative) and its units."""

    file: str
    units: int


@dataclasses.dataclass(frozen=True)
class ClueRecord:
    """A store clue as rebuild.json names it (``storelib.versions.Clue.to_dict``)."""

    clue: str
    detail: str
    at_least: str | None
    below: str | None


@dataclasses.dataclass(frozen=True)
class RulesRecord:
    """rebuild.json's ``broker_rules``: the rules the rebuild used and why (``BrokerRules.to_dict``)."""

    name: str
    first_release: str | None
    source: str  # "--broker-version" or "detected"
    why: str
    version: str | None  # the given release
    releases: str | None  # detected: the range the clues allow
    clues: tuple[ClueRecord, ...]

    @classmethod
    def of(cls, rules: BrokerRules) -> RulesRecord:
        return cls.from_json(rules.to_dict())

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RulesRecord:
        return cls(**{**d, "clues": tuple(ClueRecord(**c) for c in d["clues"])})

    @property
    def given_release(self) -> str:
        """The release the rebuild was given (``--broker-version``), "" when it detected its rules."""
        return (self.version or "") if self.source == "--broker-version" else ""


@dataclasses.dataclass(frozen=True)
class RebuildReport:
    """rebuild.json: deterministic for the same input (no times, no run ids), written last (the rebuild's commit).

    ``broker_rules`` is None and ``dledger_index_files`` empty in a rebuild.json written before they were recorded.
    """

    broker_config: BrokerConfig
    commitlog: CommitlogRecord
    findings: tuple[Finding, ...]
    consume_queues: tuple[QueueRecord, ...]
    index_files: tuple[IndexFileRecord, ...]
    checkpoint: Checkpoint
    broker_rules: RulesRecord | None = None
    dledger_index_files: tuple[DLedgerIndexRecord, ...] = ()

    def to_json(self) -> str:
        """The file's text: sorted keys, one-space indent, a final newline."""
        return json.dumps({"format": REBUILD_FORMAT, **dataclasses.asdict(self)}, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> RebuildReport:
        d = json.loads(text)
        cl, rules = d["commitlog"], d.get("broker_rules")
        return cls(
            broker_config=BrokerConfig(**_known(BrokerConfig, d["broker_config"])),
            commitlog=CommitlogRecord(
                tuple(SegmentRecord(**s) for s in cl["segments"]), cl["min_offset"], cl["max_offset"], cl["messages"]
            ),
            findings=tuple(Finding.from_dict(f) for f in d["findings"]),
            consume_queues=tuple(QueueRecord(**{**q, "files": tuple(q["files"])}) for q in d["consume_queues"]),
            index_files=tuple(IndexFileRecord(**f) for f in d["index_files"]),
            checkpoint=Checkpoint(**d["checkpoint"]),
            broker_rules=RulesRecord.from_json(rules) if rules else None,
            dledger_index_files=tuple(DLedgerIndexRecord(**f) for f in d.get("dledger_index_files", ())),
        )

    def index_file(self, name: str) -> IndexFileRecord | None:
        """The rebuilt IndexFile called ``name``."""
        return next((f for f in self.index_files if f.name == name), None)


def _known(cls: type, d: Mapping[str, Any]) -> dict[str, Any]:
    """``d`` less the keys that are no field of the dataclass ``cls`` (settings of another tool version), its JSON
    lists as the tuples the dataclass holds."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in names}


def build_rebuild_report(
    cfg: BrokerConfig,
    rules: BrokerRules,
    segments: list[Segment],
    summaries: Mapping[str, SegmentSummary],
    findings: list[Finding],
    queues: list[QueueRecord],
    index_files: list[IndexFileRecord],
    dledger_index_files: list[DLedgerIndexRecord],
    checkpoint: Checkpoint,
) -> RebuildReport:
    """rebuild.json of a rebuild: the findings in file and offset order."""
    return RebuildReport(
        broker_config=cfg,
        commitlog=CommitlogRecord(
            tuple(SegmentRecord.of(s, summaries[s.name]) for s in segments),
            segments[0].start,
            max_offset(segments, summaries),
            sum(summaries[s.name].messages for s in segments),
        ),
        findings=tuple(sorted(findings, key=_rebuild_order)),
        consume_queues=tuple(queues),
        index_files=tuple(index_files),
        checkpoint=checkpoint,
        broker_rules=RulesRecord.of(rules),
        dledger_index_files=tuple(dledger_index_files),
    )


def _rebuild_order(f: Finding) -> tuple[Any, ...]:
    return (f.file, f.commitlog_offset or -1, f.queue_offset or -1, f.kind)


@dataclasses.dataclass(frozen=True)
class HistoryRecord:
    """What the history table keeps of an audit run (its summary row and findings); a run that could not audit
    has its times and exit code only."""

    started_at: dt.datetime
    finished_at: dt.datetime
    exit_code: int
    commitlog_max_offset: int | None = None
    segments_audited: tuple[str, ...] | None = None
    skipped: tuple[str, ...] | None = None
    base_run_id: str | None = None
    findings: tuple[Finding, ...] = ()


@dataclasses.dataclass(frozen=True)
class HistoryEntry:
    """report.json's ``run.history``: the run's rows in the history table (its Delta version), or why they could
    not be written."""

    table: str
    run_id: str | None
    version: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, object]:
        """``table`` and ``run_id``, then ``version`` or ``error``."""
        return {"table": self.table, "run_id": self.run_id} | (
            {"error": self.error} if self.error is not None else {"version": self.version}
        )


def audit_summary(findings: list[Finding], exit_code: int, counts: dict[str, Any]) -> dict[str, Any]:
    """report.json's ``summary``: the exit code, counts per severity and kind, and whether the run saw everything."""
    severities = collections.Counter(f.severity for f in findings)
    return {
        "exit_code": exit_code,
        "findings": len(findings),
        **{s: severities[s] for s in SEVERITIES},
        "kinds": dict(sorted(collections.Counter(f.kind for f in findings).items())),
        "complete": not any(KINDS[f.kind].incomplete for f in findings),
        **counts,
    }


def sorted_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=finding_order)
