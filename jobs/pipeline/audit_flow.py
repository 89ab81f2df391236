"""The audit on the driver: a live store against the index rebuilt from its commitlog.

1. the rebuilt index: ``--rebuilt OUT`` (its rebuild.json), or a rebuild into the work directory;
2. the commitlog as it is now, from the one parse (the audit's own rebuild, or a scan when ``--rebuilt`` is
   given): the rebuild's scan rules, whether the rebuilt index still describes these records (rebuilt-stale,
   by fingerprint), and what the broker's recovery would do with the log (jobs.pipeline.audit_log);
3. ConsumeQueue: one task per queue reads the live and rebuilt files and classifies the queue;
4. IndexFile: one task per file position (headers, bytes); then one task per commitlog range, or part of a big
   range's pairs: every live entry must be a rebuilt entry (keyHash, commitlog offset); every rebuilt entry must
   be found by the broker's lookup over the live files (sampled above ``index_sample``). Its jobs run on a second
   driver thread beside 2. and 3., which they do not depend on; only its findings about the log wait for 2.;
5. report.json and report.html (jobs.pipeline.audit_result, jobs.report.audit_report).

What every stage reads is resolved once into an ``Audit``; each stage returns what it ``Found``.
``--since-last`` audits only the tail: the segments from the one holding the commitlog max offset of the
store's last clean run, the queues their messages touch, the IndexFiles covering them.
Nothing is ever written into the live store.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time

from jobs.pipeline.audit_index import audit_index, compare_index
from jobs.pipeline.audit_log import LogStart, audit_log
from jobs.pipeline.audit_queues import audit_queues
from jobs.pipeline.audit_result import AuditResult, Counts, finish
from jobs.pipeline.audit_types import DEFAULT_INDEX_SAMPLE, Audit, Recorder
from jobs.pipeline.context import Found, Run
from jobs.pipeline.dledger_files import audit_dledger
from jobs.pipeline.listing import check_outside_store, in_use_finding, store_state
from jobs.pipeline.rebuild_flow import list_segments, rebuild, scan_segments, settle_rules, store_rules
from jobs.pipeline.tasks import submit_inheriting
from jobs.pipeline.timers import audit_timers
from storelib.audit.scope import CleanRun, audit_scope, stale_finding
from storelib.broker.rule_choice import BrokerRules
from storelib.broker.segments import Segment, SegmentSummary, damage_findings, judge_ends
from storelib.errors import EXIT_CANNOT, EXIT_FINDINGS, EXIT_OK, CannotAudit, DamageStop
from storelib.findings import KINDS, Finding, is_divergence
from storelib.reports.report import REBUILD_REPORT, LogCounts, QueueCounts, QueueRow, RebuildReport
from udfs.fs import join, read_file, resolve


def audit(
    run: Run,
    store: str,
    rebuilt: str | None,
    report_dir: str | None,
    index_sample: int = DEFAULT_INDEX_SAMPLE,
    since: CleanRun | None = None,
    broker_config: str | None = None,
    scope_note: str = "",
    record: Recorder | None = None,
) -> AuditResult:
    """Audit ``store`` against ``rebuilt`` (rebuilding into the work directory when None); write the report.

    ``since``: the store's last clean run (jobs.tables.history.last_clean_run); only the tail after
    it is audited (storelib.audit.scope.audit_scope), ``scope_note`` says why a full audit when there is none.
    ``broker_config``: the settings' file, named in the report. ``record``: the run into the history table.
    """
    t0 = time.monotonic()
    for option, uri in (("--report", report_dir), ("--work-dir", run.work_root)):
        if uri is not None:
            check_outside_store(store, uri, option)
    before = store_state(store)
    segments, listing = list_segments(store, run.cfg)
    scope = audit_scope(segments, run.cfg.mappedFileSizeCommitLog, since, scope_note)
    audited = [s for s in segments if s.start >= scope.start]
    with run.work_dir(report_dir or store) as work:
        if rebuilt is None:
            rebuilt = f"{work}/rebuilt"
            run, summaries = _rebuild(run, store, rebuilt, audited)
            given = None
        else:
            given = _rebuild_report(rebuilt)
            release = rebuilt_release(given, run.cfg.brokerVersion)
            run = dataclasses.replace(run, cfg=dataclasses.replace(run.cfg, brokerVersion=release))
            run = store_rules(run, store, segments)  # BatchCQ topics and the rules, as the rebuild resolves them
            summaries = scan_segments(run, audited, f"{work}/scratch")
            run = run.with_rules(store, settle_rules(run, store, summaries.values()))
            _check_same_rules(run.broker_rules[store], given)
        a = Audit(
            run,
            run.cfg,
            run.broker_rules.get(store),
            store,
            rebuilt,
            given is None,
            scope,
            given or _rebuild_report(rebuilt),
            tuple(audited),
            summaries,
            before,
            t0,
            index_sample,
            report_dir,
            broker_config,
            record,
            None if given is None else f"{work}/scratch",
        )
        return _audit(a, listing)


def _rebuild(run: Run, store: str, rebuilt: str, audited: list[Segment]) -> tuple[Run, dict[str, SegmentSummary]]:
    """The audit's own rebuild into ``rebuilt``: the run with the store's rules it settled, the audited segments'
    summaries."""
    try:
        result = rebuild(run, store, rebuilt, on_error="skip-segment")
    except DamageStop as exc:
        raise CannotAudit(f"the commitlog could not be rebuilt: {exc}") from None
    return result.run, {s.name: result.summaries[s.name] for s in audited}


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


def _queues_and_log(a: Audit, found: Found) -> tuple[list[QueueRow], Found, LogStart]:
    """The queues' rows, then what the broker's next start does with the log given the findings so far (``found``
    and the queues'); ``found`` with the queues', the log's and DLedger's findings."""
    queue_rows, found_queues = audit_queues(a)
    found += found_queues
    cq_max = max((r.live_max_physic_offset for r in queue_rows), default=-1)
    log, found_log = audit_log(a, list(found.findings), cq_max)
    return queue_rows, found + found_log + audit_dledger(a), log


def _audit(a: Audit, listing: list[Finding]) -> AuditResult:
    """The stages after the parse: the commitlog as it is now, then queues and IndexFiles."""
    segments = list(a.segments)
    found = Found(tuple(listing + judge_ends(segments, a.summaries) + damage_findings(segments, a.summaries)))
    found += Found(tuple(f for f in a.rebuild_report.findings if KINDS[f.kind].index_build))
    described = [s for s in a.rebuild_report.commitlog.segments if s.start >= a.scope.start]
    stale = stale_finding(described, a.summaries)
    if stale:
        return finish(a, found + Found((stale,)), None, Counts(), EXIT_CANNOT)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # the queues and the log on a second thread, beside the IndexFiles, which need neither; this thread's job is
        # most often submitted first, so the one long position task takes a core at once (the scheduler is FIFO)
        queued = submit_inheriting(pool, a.run.spark.sparkContext, _queues_and_log, a, found)
        compared = compare_index(a)
        queue_rows, found, log = queued.result()
    index_rows, keys, found_index = audit_index(compared, log)
    found += found_index
    timer_counts, found_timers = audit_timers(a)
    found += found_timers
    in_use = in_use_finding(a.before, store_state(a.store))
    found += Found((in_use,) if in_use else ())
    commitlog = a.rebuild_report.commitlog
    counts = Counts(
        LogCounts(commitlog.messages, commitlog.min_offset, commitlog.max_offset, len(commitlog.segments)),
        QueueCounts(len(queue_rows), sum(1 for r in queue_rows if r.status in ("ok", "info"))),
        dataclasses.replace(
            keys,
            live_files=sum(1 for r in index_rows if r.live),
            rebuilt_files=sum(1 for r in index_rows if r.rebuilt),
        ),
        tuple(queue_rows),
        tuple(index_rows),
        timer_counts,
    )
    exit_code = EXIT_FINDINGS if any(is_divergence(f) for f in found.findings) else EXIT_OK
    return finish(a, found, log, counts, exit_code)
