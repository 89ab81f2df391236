"""The audit on the driver: a live store against the index rebuilt from its commitlog.

1. the rebuilt index: ``--rebuilt OUT`` (its rebuild.json), or a rebuild into the work directory;
2. the commitlog as it is now, from the one parse (the audit's own rebuild, or a scan when ``--rebuilt`` is
   given): the rebuild's scan rules, whether the rebuilt index still describes these records (rebuilt-stale,
   by fingerprint), and what the broker's recovery would do with the log (storelib.audit.check_commitlog);
3. ConsumeQueue: one task per queue reads the live and rebuilt files and classifies the queue;
4. IndexFile: one task per file position (headers, bytes); then one task per commitlog range: every live
   entry must be a rebuilt entry (keyHash, commitlog offset); every rebuilt entry must be found by the broker's
   lookup over the live files (sampled above ``index_sample``);
5. report.json and report.html (jobs.report.audit_report).

``--since-last`` audits only the tail: the segments from the one holding the commitlog max offset of the
store's last clean run, the queues their messages touch, the IndexFiles covering them.
Nothing is ever written into the live store.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

from jobs.pipeline.audit_index import audit_index
from jobs.pipeline.audit_queues import audit_queues, stopping_queues
from jobs.pipeline.context import Run
from jobs.pipeline.dledger import audit_dledger
from jobs.pipeline.listing import check_outside_store, in_use_finding, store_state
from jobs.pipeline.rebuild import list_segments, rebuild, scan_segments, settle_rules, store_rules
from storelib.audit import Scope, audit_scope, check_commitlog, restart_of, stale_finding
from storelib.checkpoint import Checkpoint
from storelib.config import BrokerConfig
from storelib.errors import EXIT_CANNOT, EXIT_FINDINGS, EXIT_OK, CannotAudit, DamageStop
from storelib.findings import KINDS, Finding, is_divergence
from storelib.plan import recover_plan
from storelib.report import (
    AUDIT_FORMAT,
    REBUILD_REPORT,
    HistoryEntry,
    HistoryRecord,
    RebuildReport,
    audit_summary,
    sorted_findings,
)
from storelib.restart import Restart, SegmentFacts, releases_by_rules
from storelib.segments import Segment, SegmentSummary, damage_findings, judge_ends, messages_from
from storelib.verdict import verdict
from storelib.versions import BrokerRules
from udfs.audit import IndexPosition, read_checkpoint
from udfs.fs import join, read_file, resolve

DEFAULT_INDEX_SAMPLE = 200_000


@dataclasses.dataclass
class AuditResult:
    findings: list[Finding]
    summary: dict[str, Any]
    exit_code: int
    report: dict[str, Any]  # what report.json holds
    repairs: list[dict[str, Any]]  # what ``rmqstore recover`` would change, file by file


#: the verb's history table: given what it keeps of the finished run, appends it, says where (report.json's
#: ``run.history``) before the report is written
Recorder = Callable[[HistoryRecord], HistoryEntry]


@dataclasses.dataclass
class Audit:
    """One audit run's state, handed from stage to stage."""

    run: Run
    store: str
    rebuilt: str
    report_dir: str | None
    index_sample: int
    scope: Scope
    rebuild_report: RebuildReport
    started: dt.datetime
    t0: float
    broker_config: str | None = None  # the --broker-config path (None: RocketMQ's defaults)
    rebuilt_temporary: bool = False  # rebuilt into the work directory, removed when the audit ends
    record: Recorder | None = None  # --history
    findings: list[Finding] = dataclasses.field(default_factory=list)
    repairs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    facts: list[SegmentFacts] = dataclasses.field(default_factory=list)
    segments: list[Segment] = dataclasses.field(default_factory=list)  # the audited ones
    summaries: dict[str, SegmentSummary] = dataclasses.field(default_factory=dict)
    checkpoint: Checkpoint | None = None  # the live one
    abort: bool = False
    restart: Restart | None = None  # what the broker's next start does (storelib.restart)
    #: detected releases that recover differently: release -> its next start (report.json run.restart_by_release)
    restart_by_release: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def cfg(self) -> Any:
        return self.run.cfg


# --- the audit ----------------------------------------------------------------------------------


def audit(
    run: Run,
    store: str,
    rebuilt: str | None,
    report_dir: str | None,
    index_sample: int = DEFAULT_INDEX_SAMPLE,
    since: dict[str, Any] | None = None,
    broker_config: str | None = None,
    scope_note: str = "",
    record: Recorder | None = None,
) -> AuditResult:
    """Audit ``store`` against ``rebuilt`` (rebuilding into the work directory when None); write the report.

    ``since``: the summary of the store's last clean run (jobs.tables.history.last_clean_run); only the tail after
    it is audited (storelib.audit.audit_scope), ``scope_note`` says why a full audit when there is none.
    ``broker_config``: the settings' file, named in the report. ``record``: the run into the history table.
    """
    t0 = time.monotonic()
    for option, uri in (("--report", report_dir), ("--work-dir", run.work_root)):
        if uri is not None:
            check_outside_store(store, uri, option)
    before = store_state(store)
    segments, listing = list_segments(store, run.cfg)
    given = _rebuild_report(rebuilt) if rebuilt is not None else None
    if given is not None:
        run.cfg = dataclasses.replace(run.cfg, brokerVersion=rebuilt_release(given, run.cfg.brokerVersion))
    store_rules(run, store, segments)  # BatchCQ topics and the broker's rules, as the rebuild resolves them
    scope = audit_scope(segments, run.cfg.mappedFileSizeCommitLog, since, scope_note)
    audited = [s for s in segments if s.start >= scope.start]
    temporary = rebuilt is None
    with run.work_dir(report_dir or store) as work:
        if rebuilt is None:
            rebuilt = f"{work}/rebuilt"
            try:
                summaries = rebuild(run, store, rebuilt, on_error="skip-segment").summaries
            except DamageStop as exc:
                raise CannotAudit(f"the commitlog could not be rebuilt: {exc}") from None
            summaries = {s.name: summaries[s.name] for s in audited}
        else:
            summaries = scan_segments(run, audited, f"{work}/scratch")
            _check_same_rules(settle_rules(run, store, summaries.values()), given)
        rebuild_report = given if given is not None else _rebuild_report(rebuilt)
        a = Audit(run, store, rebuilt, report_dir, index_sample, scope, rebuild_report, before["at"], t0)
        a.broker_config, a.rebuilt_temporary, a.record = broker_config, temporary, record
        return _audit(a, audited, listing, summaries, before)


def _rebuild_report(rebuilt: str) -> RebuildReport:
    """The rebuild's rebuild.json."""
    fs, root = resolve(rebuilt)
    return RebuildReport.from_json(read_file(fs, join(root, REBUILD_REPORT)))


def rebuilt_release(rebuild_report: RebuildReport, given: str) -> str:
    """The release to audit by: ``given`` (``--broker-version``), else the one the rebuild was given, if any."""
    return given or (rebuild_report.broker_rules.given_release if rebuild_report.broker_rules else "")


def _check_same_rules(rules: BrokerRules, rebuild_report: RebuildReport | None) -> None:
    """A rebuild made by other rules than the audit's would show their differences as damage: CannotAudit."""
    built = rebuild_report.broker_rules.name if rebuild_report and rebuild_report.broker_rules else None
    if built is not None and built != rules.rules.name:
        raise CannotAudit(
            f"the rebuild used the broker rules {built}, this audit {rules.rules.name} ({rules.why}): rebuild "
            "again, or give the --broker-version the rebuild was given"
        )


def _audit(
    a: Audit, audited: list[Segment], listing: list[Finding], summaries: dict[str, Any], before: dict[str, Any]
) -> AuditResult:
    """The stages after the parse: the commitlog as it is now, then queues and IndexFiles."""
    a.segments, a.summaries = audited, summaries
    a.findings = listing + judge_ends(audited, summaries) + damage_findings(audited, summaries)
    a.findings += [f for f in a.rebuild_report.findings if KINDS[f.kind].index_build]
    described = [s for s in a.rebuild_report.commitlog.segments if s.start >= a.scope.start]
    stale = stale_finding(described, summaries)
    if stale:
        a.findings.append(stale)
        return _finish(a, {}, [], [], EXIT_CANNOT)
    queue_rows = audit_queues(a)
    _audit_commitlog(a, summaries, max((r.get("live_max_physic_offset", -1) for r in queue_rows), default=-1))
    audit_dledger(a)
    index_rows, keys = audit_index(a)
    in_use = in_use_finding(before, store_state(a.store))
    if in_use:
        a.findings.append(in_use)
    commitlog = a.rebuild_report.commitlog
    counts = {
        "commitlog": {
            "messages": commitlog.messages,
            "min_offset": commitlog.min_offset,
            "max_offset": commitlog.max_offset,
            "segments": len(commitlog.segments),
        },
        "queues": {"audited": len(queue_rows), "ok": sum(1 for r in queue_rows if r["status"] in ("ok", "info"))},
        "index": {
            "live_files": sum(1 for r in index_rows if r.live),
            "rebuilt_files": sum(1 for r in index_rows if r.rebuilt),
            **keys,
        },
    }
    exit_code = EXIT_FINDINGS if any(is_divergence(f) for f in a.findings) else EXIT_OK
    return _finish(a, counts, queue_rows, index_rows, exit_code)


def _audit_commitlog(a: Audit, summaries: dict[str, Any], cq_max_physic_offset: int) -> None:
    """What the broker's recovery would do with the log, from the checkpoint, abort, the damage found and where the
    live ConsumeQueues end (``cq_max_physic_offset``)."""
    commitlog = a.rebuild_report.commitlog
    a.facts = [
        SegmentFacts(s.file, s.start, s.messages, s.end_offset, s.first_store_timestamp) for s in commitlog.segments
    ]
    live = a.run.spark.sparkContext.parallelize([a.store], 1).map(read_checkpoint).collect()[0]
    a.checkpoint, a.abort = live.checkpoint, live.abort
    cl_max = commitlog.max_offset
    a.restart = restart_of(a.facts, a.findings, a.checkpoint, a.abort, a.cfg, cl_max, cq_max_physic_offset)
    a.restart_by_release = _restarts_if_they_differ(a, cl_max, cq_max_physic_offset)
    a.findings += check_commitlog(
        a.facts,
        a.findings,
        a.checkpoint,
        a.abort,
        a.cfg,
        cl_max,
        max((s.last_store_timestamp for s in summaries.values()), default=0),
        max((s.last_cq_store_timestamp for s in summaries.values()), default=0),
        cq_max_physic_offset,
    )


def _restarts_if_they_differ(a: Audit, cl_max: int, cq_max_physic_offset: int) -> dict[str, dict[str, Any]]:
    """Where detected releases recover differently (storelib.restart's rows), the next start by each of them (its
    lowest release the clues allow -> Restart); empty when the release is given or they all agree."""
    rules = a.run.broker_rules.get(a.store)
    if rules is None or rules.releases is None:
        return {}
    found = {}
    for v in releases_by_rules(rules.releases.low, rules.releases.high):
        cfg = dataclasses.replace(a.cfg, brokerVersion=v)
        found[v] = restart_of(a.facts, a.findings, a.checkpoint, a.abort, cfg, cl_max, cq_max_physic_offset)
    starts = {(r.start_offset, r.truncate_at, r.dispatch_from) for r in found.values() if r is not None}
    return {v: r.to_dict() for v, r in found.items() if r is not None} if len(starts) > 1 else {}


def _finish(
    a: Audit, counts: dict[str, Any], queue_rows: list[dict[str, Any]], index_rows: list[IndexPosition], code: int
) -> AuditResult:
    from jobs.report.audit_report import write_reports

    findings = sorted_findings(a.findings)
    summary = audit_summary(findings, code, counts)
    finished = dt.datetime.now(dt.UTC)
    history = a.record(_history_record(a, findings, summary, finished)) if a.record else None
    report = {
        "format": AUDIT_FORMAT,
        "run": {
            "store": a.store,
            "rebuilt": a.rebuilt,
            "started_at": a.started.isoformat(),
            "finished_at": finished.isoformat(),
            "seconds": round(time.monotonic() - a.t0, 3),
            "segments": [dataclasses.asdict(s) for s in a.facts],
            "restart": a.restart.to_dict() if a.restart else None,
            "restart_by_release": a.restart_by_release,
            "scope": a.scope.to_dict(),
            "broker_rules": dataclasses.asdict(rules) if (rules := a.rebuild_report.broker_rules) else None,
            **_provenance(a),
            **({"history": history.to_json()} if history else {}),
        },
        "summary": summary,
        "findings": [f.to_dict() for f in findings],
        "queues": queue_rows,
        "index_files": [r.to_json() for r in index_rows],
        "repairs": a.repairs,
    }
    # the plan of the command the verdict advises: a torn tail is zeroed (--truncate-torn-tail), its bytes backed up
    report["plan"] = recover_plan(findings, a.repairs, stopping_queues(a.rebuilt, a.repairs), truncate=True).to_dict()
    report["verdict"] = verdict(report, _messages_lost(a, findings))
    if a.report_dir is not None:
        write_reports(a.report_dir, report)
    return AuditResult(findings, summary, code, report, a.repairs)


def _history_record(a: Audit, findings: list[Finding], summary: dict[str, Any], finished: dt.datetime) -> HistoryRecord:
    """What the history table keeps of this run."""
    return HistoryRecord(
        a.started,
        finished,
        summary["exit_code"],
        summary.get("commitlog", {}).get("max_offset"),
        tuple(a.scope.segments),
        tuple(a.scope.skipped),
        a.scope.base_run_id,
        tuple(findings),
    )


def _provenance(a: Audit) -> dict[str, Any]:
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
    return messages_from(a.segments, a.summaries, cut)
