"""What an audit hands back: report.json, built once from what the stages found (jobs.pipeline.context.Found),
their rows and counts, and written once (with report.html) when the run has a report directory."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from jobs.pipeline.audit_queues import stopping_queues
from jobs.pipeline.context import Found, Run, tool_version
from storelib.audit.scope import Scope
from storelib.broker.config import BrokerConfig
from storelib.broker.segments import messages_from
from storelib.findings import KINDS, Finding
from storelib.reports.plan import Step, recover_plan
from storelib.reports.report import (
    AuditReport,
    AuditRun,
    AuditSummary,
    HistoryEntry,
    HistoryRecord,
    IndexCounts,
    LogCounts,
    QueueCounts,
    QueueRow,
    SettingsRecord,
    audit_summary,
    sorted_findings,
)
from storelib.reports.verdict import verdict
from udfs.audit_tasks import IndexPosition

if TYPE_CHECKING:
    from jobs.pipeline.audit_log import LogStart
    from jobs.pipeline.audit_types import Audit


@dataclasses.dataclass(frozen=True)
class Counts:
    """report.json's ``summary`` counts (``commitlog``, ``queues``, ``index``), ``queues`` and ``index_files`` rows;
    empty when the audit stopped before the stages."""

    commitlog: LogCounts | None = None
    queues: QueueCounts | None = None
    index: IndexCounts | None = None
    queue_rows: tuple[QueueRow, ...] = ()
    index_rows: tuple[IndexPosition, ...] = ()
    timers: Mapping[str, int] | None = None


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """The audit's findings (in report order), exit code, report (report.json) and repairs."""

    findings: list[Finding]
    exit_code: int
    report: AuditReport
    repairs: list[Step]  # what ``rmqstore recover`` would change, file by file
    run: Run  # the run with the store's settings and rules, as the audit settled them


def finish(a: Audit, found: Found, log: LogStart | None, counts: Counts, code: int) -> AuditResult:
    """report.json of the run (its history row appended first, with ``a.record``), written with report.html."""
    from jobs.report.audit_report import write_reports

    findings = sorted_findings(list(found.findings))
    summary = audit_summary(findings, code, counts.commitlog, counts.queues, counts.index, counts.timers)
    finished = dt.datetime.now(dt.UTC)
    scope = dataclasses.replace(a.scope, skipped=a.scope.skipped + list(found.skipped))
    history = a.record(_history_record(a, scope, findings, summary, finished)) if a.record else None
    run = _run(a, log, scope, finished, history)
    # the plan of the command the verdict advises: a torn tail is zeroed (--truncate-torn-tail), its bytes backed up
    plan = recover_plan(findings, found.repairs, stopping_queues(a.rebuilt, found.repairs), truncate=True)
    index_files = tuple(r.to_json() for r in counts.index_rows)
    report = AuditReport(run, summary, tuple(findings), counts.queue_rows, index_files, found.repairs, plan)
    report = dataclasses.replace(report, verdict=verdict(report, _messages_lost(a, findings)))
    if a.report_dir is not None:
        write_reports(a.report_dir, report)
    return AuditResult(findings, code, report, list(found.repairs), a.run)


def _run(a: Audit, log: LogStart | None, scope: Scope, finished: dt.datetime, history: HistoryEntry | None) -> AuditRun:
    """report.json's ``run``: what was audited, when, the broker's next start, the scope, how the verdict was
    reached (the tool, the settings, Spark)."""
    return AuditRun(
        store=a.store,
        rebuilt=a.rebuilt,
        started_at=a.before.at.isoformat(),
        finished_at=finished.isoformat(),
        seconds=round(time.monotonic() - a.t0, 3),
        segments=log.facts if log else (),
        restart=log.restart if log else None,
        restart_by_release=log.restart_by_release if log else {},
        scope=scope.record(),
        broker_rules=a.rebuild_report.broker_rules,
        tool_version=tool_version(),
        spark_master=a.run.spark.sparkContext.master,
        rebuilt_temporary=a.rebuilt_temporary,
        broker_config=SettingsRecord(
            a.cfg.checkCRCOnRecover, a.cfg.mappedFileSizeCommitLog, a.broker_config, a.cfg == BrokerConfig()
        ),
        history=history,
    )


def _history_record(
    a: Audit, scope: Scope, findings: list[Finding], summary: AuditSummary, finished: dt.datetime
) -> HistoryRecord:
    """What the history table keeps of this run (``scope``: what it audited and skipped)."""
    return HistoryRecord(
        a.before.at,
        finished,
        summary.exit_code,
        summary.commitlog.max_offset if summary.commitlog else None,
        tuple(scope.segments),
        tuple(scope.skipped),
        scope.base_run_id,
        tuple(findings),
    )


def _messages_lost(a: Audit, findings: list[Finding]) -> int | None:
    """Messages at or past the commitlog offset where the broker's recovery would truncate (None: no truncation, or
    it lies before the audited segments)."""
    cut = next((f.commitlog_offset for f in findings if KINDS[f.kind].truncation), None)
    if cut is None or cut < a.scope.start:
        return None
    return messages_from(list(a.segments), a.summaries, cut)
