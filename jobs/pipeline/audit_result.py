"""What an audit hands back: report.json, built once from what the stages found (jobs.pipeline.context.Found),
their rows and counts, and written once (with report.html) when the run has a report directory."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from jobs.pipeline.audit_queues import stopping_queues
from jobs.pipeline.context import Found
from storelib.audit import QueueRow, Scope
from storelib.config import BrokerConfig
from storelib.findings import Finding
from storelib.plan import Step, recover_plan
from storelib.report import AUDIT_FORMAT, HistoryEntry, HistoryRecord, audit_summary, sorted_findings
from storelib.segments import messages_from
from storelib.verdict import verdict
from udfs.audit import IndexPosition

if TYPE_CHECKING:
    from jobs.pipeline.audit import Audit
    from jobs.pipeline.audit_log import LogStart

#: the verb's history table: given what it keeps of the finished run, appends it, says where (report.json's
#: ``run.history``) before the report is written
Recorder = Callable[[HistoryRecord], HistoryEntry]


@dataclasses.dataclass(frozen=True)
class Counts:
    """report.json's ``summary`` counts (``commitlog``, ``queues``, ``index``), ``queues`` and ``index_files`` rows;
    empty when the audit stopped before the stages."""

    commitlog: Mapping[str, int] | None = None
    queues: Mapping[str, int] | None = None
    index: Mapping[str, int] | None = None
    queue_rows: tuple[QueueRow, ...] = ()
    index_rows: tuple[IndexPosition, ...] = ()

    def to_json(self) -> dict[str, object]:
        parts = {"commitlog": self.commitlog, "queues": self.queues, "index": self.index}
        return {k: dict(v) for k, v in parts.items() if v is not None}


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """The audit's findings (in report order), report.json's summary and exit code, the report, the repairs."""

    findings: list[Finding]
    summary: dict[str, Any]  # report.json's
    exit_code: int
    report: dict[str, Any]  # what report.json holds
    repairs: list[Step]  # what ``rmqstore recover`` would change, file by file


def finish(a: Audit, found: Found, log: LogStart | None, counts: Counts, code: int) -> AuditResult:
    """report.json of the run (its history row appended first, with ``a.record``), written with report.html."""
    from jobs.report.audit_report import write_reports

    findings = sorted_findings(list(found.findings))
    summary = audit_summary(findings, code, counts.to_json())
    finished = dt.datetime.now(dt.UTC)
    scope = dataclasses.replace(a.scope, skipped=a.scope.skipped + list(found.skipped))
    history = a.record(_history_record(a, scope, findings, summary, finished)) if a.record else None
    report = {
        "format": AUDIT_FORMAT,
        "run": {
            "store": a.store,
            "rebuilt": a.rebuilt,
            "started_at": a.before.at.isoformat(),
            "finished_at": finished.isoformat(),
            "seconds": round(time.monotonic() - a.t0, 3),
            "segments": [dataclasses.asdict(s) for s in log.facts] if log else [],
            "restart": log.restart.to_dict() if log and log.restart else None,
            "restart_by_release": {v: r.to_dict() for v, r in log.restart_by_release.items()} if log else {},
            "scope": scope.to_dict(),
            "broker_rules": dataclasses.asdict(rules) if (rules := a.rebuild_report.broker_rules) else None,
            **_provenance(a),
            **({"history": history.to_json()} if history else {}),
        },
        "summary": summary,
        "findings": [f.to_dict() for f in findings],
        "queues": [r.to_json() for r in counts.queue_rows],
        "index_files": [r.to_json() for r in counts.index_rows],
        "repairs": [r.to_repair() for r in found.repairs],
    }
    # the plan of the command the verdict advises: a torn tail is zeroed (--truncate-torn-tail), its bytes backed up
    stopping = stopping_queues(a.rebuilt, found.repairs)
    report["plan"] = recover_plan(findings, found.repairs, stopping, truncate=True).to_dict()
    report["verdict"] = verdict(report, _messages_lost(a, findings))
    if a.report_dir is not None:
        write_reports(a.report_dir, report)
    return AuditResult(findings, summary, code, report, list(found.repairs))


def _history_record(
    a: Audit, scope: Scope, findings: list[Finding], summary: dict[str, Any], finished: dt.datetime
) -> HistoryRecord:
    """What the history table keeps of this run (``scope``: what it audited and skipped)."""
    return HistoryRecord(
        a.before.at,
        finished,
        summary["exit_code"],
        summary.get("commitlog", {}).get("max_offset"),
        tuple(scope.segments),
        tuple(scope.skipped),
        scope.base_run_id,
        tuple(findings),
    )


def _provenance(a: Audit) -> dict[str, object]:
    """report.json's ``run`` fields that say how the verdict was reached: the tool, the settings, Spark."""
    from jobs.cli import tool_version

    return {
        "tool_version": tool_version(),
        "spark_master": a.run.spark.sparkContext.master,
        "rebuilt_temporary": a.rebuilt_temporary,
        "broker_config": {
            "path": a.broker_config,
            "defaults": a.cfg == BrokerConfig(),
            "checkCRCOnRecover": a.cfg.checkCRCOnRecover,
            "mappedFileSizeCommitLog": a.cfg.mappedFileSizeCommitLog,
        },
    }


def _messages_lost(a: Audit, findings: list[Finding]) -> int | None:
    """Messages at or past the commitlog offset where the broker's recovery would truncate (None: no truncation, or
    it lies before the audited segments)."""
    cut = next((f.commitlog_offset for f in findings if f.kind == "recovery-would-truncate"), None)
    if cut is None or cut < a.scope.start:
        return None
    return messages_from(list(a.segments), a.summaries, cut)
