"""The reports the verbs write: rebuild.json (deterministic for the same input) and the audit's summary."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from storelib.broker.config import BrokerConfig
from storelib.broker.restart import Restart, SegmentFacts
from storelib.broker.rule_choice import BrokerRules
from storelib.broker.segments import Segment, SegmentSummary, max_offset
from storelib.findings import KINDS, SEVERITIES, Finding, finding_order, tie
from storelib.formats.checkpoint import Checkpoint
from storelib.formats.indexfile import IndexHeader
from storelib.reports.plan import Plan, Step

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

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
    """A store clue as rebuild.json names it (``storelib.broker.detection.Clue.to_dict``)."""

    clue: str
    detail: str
    releases: tuple[tuple[str, str], ...]  # [first, up to (not including)] of each span the clue allows
    weak: str | None  # why the clue is weak (a file the broker does not maintain in this mode), else None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ClueRecord:
        return cls(**{**d, "releases": tuple(tuple(span) for span in d["releases"])})


@dataclasses.dataclass(frozen=True)
class RulesRecord:
    """rebuild.json's ``broker_rules``: the rules the rebuild used and why (``BrokerRules.to_dict``)."""

    name: str
    first_release: str | None
    verified_by: tuple[str, ...]  # the real broker releases whose own files verified the rule set
    source: str  # "--broker-version" or "detected"
    why: str
    version: str | None  # the given release
    releases: str | None  # detected: the releases the clues allow
    clues: tuple[ClueRecord, ...]
    set_aside: tuple[ClueRecord, ...]  # weak clues a stronger one contradicts
    #: a store several releases wrote: each stretch's first commitlog offset and rules (``BrokerRules.to_dict``)
    stretches: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, rules: BrokerRules) -> RulesRecord:
        return cls.from_json(rules.to_dict())

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RulesRecord:
        clues = {k: tuple(ClueRecord.from_json(c) for c in d.get(k) or ()) for k in ("clues", "set_aside")}
        stretches = tuple(d.get("stretches") or ())
        return cls(**{**d, "verified_by": tuple(d.get("verified_by") or ()), **clues, "stretches": stretches})

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
    #: the timer store and delay offsets (jobs.pipeline.timers.TimerResult.to_dict): counts, findings, pending
    #: messages by real topic, the rebuilt files; empty for a store without them (or before 5.0 rules)
    timers: Mapping[str, object] = dataclasses.field(default_factory=dict)

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
            timers=d.get("timers", {}),
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
    return (f.file, f.commitlog_offset or -1, f.queue_offset or -1, f.kind, *tie(f))


@dataclasses.dataclass(frozen=True)
class QueueRow:
    """report.json's ``queues`` entry: one line of the per-queue table. ``live_max_physic_offset``: the queue's
    ``getMaxPhysicOffset`` after its recovery, the end of the record its last unit before ``live_end`` points at
    (-1 without one)."""

    topic: str
    queue_id: int
    status: str  # the worst severity of its findings, "ok" without one
    kinds: tuple[str, ...]
    live_entries: int
    live_end: int | None
    rebuilt_entries: int
    rebuilt_min: int | None
    rebuilt_end: int | None
    live_max_physic_offset: int
    first_bad_queue_offset: int | None
    bad_entries: int

    def to_json(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "kinds": list(self.kinds)}


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


@dataclasses.dataclass(frozen=True)
class ScopeRecord:
    """report.json's ``run.scope``: where the audit started, the segments it audited, the clean run it continues
    (``--since-last``), what it skipped and why, and a note when it audited everything instead."""

    from_offset: int = 0
    segments_audited: tuple[str, ...] = ()
    base_run_id: str | None = None
    skipped: tuple[str, ...] = ()
    note: str = ""


@dataclasses.dataclass(frozen=True)
class SettingsRecord:
    """report.json's ``run.broker_config``: the settings' file (None: RocketMQ's defaults), whether the settings are
    the defaults, and the two that drive the verdict most."""

    checkCRCOnRecover: bool
    mappedFileSizeCommitLog: int
    path: str | None = None
    defaults: bool = True  # not recorded before: taken as the defaults


@dataclasses.dataclass(frozen=True)
class AuditRun:
    """report.json's ``run``: what was audited against what, when, how (tool, Spark, settings, rules), the segments
    and the broker's next start, the scope, and the run's history rows (``--history``)."""

    store: str
    rebuilt: str = ""
    started_at: str = ""
    finished_at: str = ""
    seconds: float = 0.0
    segments: tuple[SegmentFacts, ...] = ()
    restart: Restart | None = None
    restart_by_release: Mapping[str, Restart] = dataclasses.field(default_factory=dict)
    scope: ScopeRecord | None = None
    broker_rules: RulesRecord | None = None
    tool_version: str | None = None
    spark_master: str | None = None
    rebuilt_temporary: bool = True
    broker_config: SettingsRecord | None = None
    history: HistoryEntry | None = None

    def to_json(self) -> dict[str, object]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "history"}
        out |= {
            "segments": [dataclasses.asdict(s) for s in self.segments],
            "restart": self.restart.to_dict() if self.restart else None,
            "restart_by_release": {v: r.to_dict() for v, r in self.restart_by_release.items()},
            "scope": _as_json(self.scope),
            "broker_rules": _as_json(self.broker_rules),
            "broker_config": _as_json(self.broker_config),
        }
        return out | ({"history": self.history.to_json()} if self.history else {})

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AuditRun:
        typed = ("segments", "restart", "restart_by_release", "scope", "broker_rules", "broker_config", "history")
        scope, rules, config, history = (d.get(k) for k in typed[3:])
        return cls(
            **_known(cls, {k: v for k, v in d.items() if k not in typed}),
            segments=tuple(SegmentFacts(**s) for s in d.get("segments", ())),
            restart=Restart(**d["restart"]) if d.get("restart") else None,
            restart_by_release={v: Restart(**r) for v, r in (d.get("restart_by_release") or {}).items()},
            scope=ScopeRecord(**_known(ScopeRecord, scope)) if scope else None,
            broker_rules=RulesRecord.from_json(rules) if rules else None,
            broker_config=SettingsRecord(**config) if config else None,
            history=HistoryEntry(**history) if history else None,
        )


@dataclasses.dataclass(frozen=True)
class LogCounts:
    """report.json's ``summary.commitlog``: the rebuilt commitlog's messages, first and end offsets and segments."""

    messages: int = 0
    min_offset: int = 0
    max_offset: int = 0
    segments: int = 0


@dataclasses.dataclass(frozen=True)
class QueueCounts:
    """report.json's ``summary.queues``: the queues audited, and of them those with nothing worse than info."""

    audited: int = 0
    ok: int = 0


@dataclasses.dataclass(frozen=True)
class IndexCounts:
    """report.json's ``summary.index``: the live and rebuilt IndexFiles, the rebuilt (keyHash, commitlog offset)
    pairs, of them those looked up in the live files (all, or a sample), and the live entries checked."""

    live_files: int = 0
    rebuilt_files: int = 0
    keys_total: int = 0
    keys_checked: int = 0
    entries_checked: int = 0


@dataclasses.dataclass(frozen=True)
class AuditSummary:
    """report.json's ``summary``: the exit code, findings per severity and kind, whether the run saw everything, and
    the counts of the commitlog, the queues and the IndexFiles (None when the audit stopped before them)."""

    exit_code: int
    findings: int = 0
    error: int = 0
    warning: int = 0
    info: int = 0
    kinds: Mapping[str, int] = dataclasses.field(default_factory=dict)
    complete: bool = True
    commitlog: LogCounts | None = None
    queues: QueueCounts | None = None
    index: IndexCounts | None = None
    timers: Mapping[str, int] | None = None  # the timer store's counts (timerlog units, pending timers, ...)

    def to_json(self) -> dict[str, object]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {k: _counts_json(v) for k, v in out.items() if v is not None}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AuditSummary:
        typed = {"commitlog": LogCounts, "queues": QueueCounts, "index": IndexCounts}
        counts = {k: t(**_known(t, d[k])) for k, t in typed.items() if d.get(k) is not None}
        return cls(**{**_known(cls, d), **counts})


def _counts_json(value: object) -> object:
    """A summary value as report.json holds it: counts as objects."""
    if isinstance(value, LogCounts | QueueCounts | IndexCounts):
        return dataclasses.asdict(value)
    return dict(value) if isinstance(value, Mapping) else value


def audit_summary(
    findings: Sequence[Finding],
    exit_code: int,
    commitlog: LogCounts | None,
    queues: QueueCounts | None,
    index: IndexCounts | None,
    timers: Mapping[str, int] | None = None,
) -> AuditSummary:
    """The summary of an audit's findings (in report order) and counts."""
    severities = collections.Counter(f.severity for f in findings)
    return AuditSummary(
        exit_code,
        len(findings),
        **{s: severities[s] for s in SEVERITIES},
        kinds=dict(sorted(collections.Counter(f.kind for f in findings).items())),
        complete=not any(KINDS[f.kind].incomplete for f in findings),
        commitlog=commitlog,
        queues=queues,
        index=index,
        timers=timers,
    )


@dataclasses.dataclass(frozen=True)
class AuditReport:
    """report.json: the run, the summary, the findings in report order, the per-queue and per-IndexFile rows
    (``index_files`` as udfs.audit_tasks.IndexPosition.to_json wrote them), the repairs, recover's plan and the verdict
    (storelib.reports.verdict; None until it is computed from the rest). Built once, written once."""

    run: AuditRun
    summary: AuditSummary
    findings: tuple[Finding, ...] = ()
    queues: tuple[QueueRow, ...] = ()
    index_files: tuple[Mapping[str, object], ...] = ()
    repairs: tuple[Step, ...] = ()
    plan: Plan = dataclasses.field(default_factory=lambda: Plan((), {}, ()))
    verdict: Mapping[str, Any] | None = None

    def to_json(self) -> str:
        """The file's text: sorted keys, one-space indent, a final newline."""
        d = {
            "format": AUDIT_FORMAT,
            "run": self.run.to_json(),
            "summary": self.summary.to_json(),
            "findings": [f.to_dict() for f in self.findings],
            "queues": [q.to_json() for q in self.queues],
            "index_files": [dict(f) for f in self.index_files],
            "repairs": [r.to_repair() for r in self.repairs],
            "plan": self.plan.to_dict(),
            "verdict": self.verdict,
        }
        return json.dumps(d, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> AuditReport:
        """A report.json; what an older or smaller one lacks takes the defaults (no verdict: computed when read)."""
        d = json.loads(text)
        older = {"live_max_physic_offset": -1}  # not recorded before
        queues = [QueueRow(**{**older, **q, "kinds": tuple(q["kinds"])}) for q in d.get("queues", ())]
        return cls(
            AuditRun.from_json(d["run"]),
            AuditSummary.from_json(d["summary"]),
            tuple(Finding.from_dict(f) for f in d.get("findings", ())),
            tuple(queues),
            tuple(d.get("index_files", ())),
            tuple(Step(**{k: v for k, v in r.items() if k != "offset"}) for r in d.get("repairs", ())),
            Plan.from_dict(d["plan"]) if d.get("plan") else Plan((), {}, ()),
            d.get("verdict"),
        )


def _as_json(record: DataclassInstance | None) -> dict[str, Any] | None:
    return dataclasses.asdict(record) if record is not None else None


def sorted_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=finding_order)
