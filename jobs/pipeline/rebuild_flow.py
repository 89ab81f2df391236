"""The rebuild on the driver: CommitLog segments -> ConsumeQueue and IndexFile files, byte-exact.

0. the store's rules (jobs.pipeline.store_rules): BatchCQ topics and the broker release's rule set, in the Run
   the stages are given; with the listing, read while a session still starts (jobs.pipeline.context.Run);
1. list the segments (names, sizes; nothing read on the driver) and group them into parse tasks by bytes, a big
   segment cut into byte ranges (jobs.pipeline.parse);
2. one Spark job: parse the tasks on executors (udfs.parse) and, through a shuffle by queue, stream every
   queue's units into its ConsumeQueue files (jobs.pipeline.consume_queues); each piece leaves its summary and
   its IndexFile entries in the scratch directory;
3. judge the segments' ends and damage (storelib.broker.segments): stop, or leave damaged segments out;
4. one Spark job: every IndexFile built by its own task from exactly its range of entries
   (jobs.pipeline.index_files), then (5.x) the timer task (jobs.pipeline.timers), beside the ConsumeQueue writers;
5. checkpoint and rebuild.json, everything in a staging directory published at the end (jobs.pipeline.output).
A segment whose ranges do not meet is parsed whole, in a second run of the stages.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import threading
import time
from typing import TYPE_CHECKING

from jobs.pipeline import parse
from jobs.pipeline.consume_queues import without_segments, write_consume_queues
from jobs.pipeline.context import Run
from jobs.pipeline.dledger_files import write_index as write_dledger_index
from jobs.pipeline.index_files import index_stage, judge
from jobs.pipeline.listing import segment_files
from jobs.pipeline.output import check_output, in_place, live_checkpoint, publish, rebuilt_checkpoint
from jobs.pipeline.parse import RangesDisagree, parse_store, read_parsed, scan_segments, wait_for_summaries
from jobs.pipeline.store_rules import resolve_rules, settle_rules, store_facts, store_rules
from storelib.broker.config import BrokerConfig
from storelib.broker.segments import Segment, SegmentSummary, plan_segments
from storelib.errors import BadInput
from storelib.findings import Finding
from storelib.layout import CHECKPOINT
from storelib.reports.report import REBUILD_REPORT, RebuildReport, build_rebuild_report
from udfs.fs import is_object_store, join, resolve, write_file

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: what other modules import from here (the stages' modules hold the rest)
__all__ = [
    "ON_ERROR",
    "RebuildResult",
    "check_output",
    "judge",
    "list_segments",
    "parse_store",
    "publish",
    "read_parsed",
    "rebuild",
    "resolve_rules",
    "scan_segments",
    "settle_rules",
    "store_facts",
    "store_rules",
    "wait_for_summaries",
]

ON_ERROR = ("stop", "skip-segment")


@dataclasses.dataclass
class RebuildResult:
    report: RebuildReport  # also OUT/rebuild.json
    seconds: float
    out: str
    worker_peak_rss: int  # bytes: the largest Python worker seen by a parse task
    run: Run
    segments: list[Segment]
    summaries: dict[str, SegmentSummary]  # each segment as the parse found it (skipped ones included)
    whole: frozenset[str] = frozenset()  # segments parsed whole: their byte ranges did not meet

    @functools.cached_property
    def records(self) -> DataFrame:
        """One MESSAGE_SCHEMA row per message record (a second parse), persisted: unpersist it."""
        with self.run.work_dir(self.out) as scratch:
            records = parse.parse_store(self.run, self.segments, "messages", scratch, self.whole).persist()
            records.count()  # parsed now, while its scratch directory exists
        return records


def list_segments(store: str, cfg: BrokerConfig) -> tuple[list[Segment], list[Finding]]:
    """The log segments in offset order (``commitlog/``, DLedger data files), and findings about their names,
    sizes and gaps."""
    dirs, listed = segment_files(store)
    if not dirs:
        raise BadInput(f"{store}: no commitlog directory, nor a DLedger one (is this a store root?)")
    segments, findings = plan_segments(listed, cfg)
    if not segments:
        raise BadInput(f"{store}: {' and '.join(dirs)} hold no segments")
    return segments, findings


def rebuild(run: Run, store: str, out: str, on_error: str = "stop") -> RebuildResult:
    """Rebuild the index of ``store`` into ``out``; raises DamageStop (nothing published) on damage. A segment
    whose byte ranges do not meet (damage near a range's edge) is parsed whole, in a second run of the stages.
    The listing and the rules need no Spark: read while a session still starts (jobs.pipeline.context.Run)."""
    if on_error not in ON_ERROR:
        raise BadInput(f"on_error must be one of {ON_ERROR}")
    t0 = time.monotonic()
    check_output(store, out, run.work_root)
    segments, findings = list_segments(store, run.cfg)
    run = store_rules(run, store, segments)
    whole: frozenset[str] = frozenset()
    while True:
        try:
            result = _rebuild(run, store, out, on_error, segments, list(findings), whole)
        except RangesDisagree as exc:
            whole = exc.parse_whole(whole)
            continue
        result.seconds = time.monotonic() - t0 - run.waited  # the rebuild's own time
        return result


def _rebuild(
    run: Run,
    store: str,
    out: str,
    on_error: str,
    segments: list[Segment],
    findings: list[Finding],
    whole: frozenset[str],
) -> RebuildResult:
    with run.work_dir(out) as work, run.work_dir(out, same_filesystem=True) as near:
        staging = in_place(out) if is_object_store(out) else f"{near}/out"
        scratch = f"{work}/scratch"
        tasks = parse.parse_tasks(run, segments, whole)
        runs = parse.parse_store(run, segments, "dispatch", scratch, whole)
        parsed = threading.Event()  # set when the queue writers are done (every parse task was then too)
        with parse.parse_progress(run, segments, whole=whole), concurrent.futures.ThreadPoolExecutor(1) as pool:
            args = (run, store, staging, scratch, segments, tasks, findings, on_error, parsed)
            indexing = pool.submit(index_stage, *args)
            try:
                queues, queue_findings = write_consume_queues(run, runs, staging, scratch)
            finally:
                parsed.set()
        indexed = indexing.result()
        run = run.with_rules(store, indexed.rules)
        summaries, index_files = indexed.summaries, indexed.index_files
        dledger_index_files = write_dledger_index(run, segments, indexed.scanned, scratch, staging)
        if indexed.skipped:
            queues, queue_findings = without_segments(run, runs, staging, scratch, indexed.skipped)
        checkpoint = rebuilt_checkpoint(summaries.values(), index_files).with_5x_fields_of(live_checkpoint(store))
        report = build_rebuild_report(
            run.cfg,
            run.broker_rules[store],
            segments,
            summaries,
            findings + queue_findings,
            queues,
            index_files,
            dledger_index_files,
            checkpoint,
        )
        if indexed.timers is not None:  # the timer store and delay offsets (5.x): rebuilt files, rebuild.json's timers
            report = dataclasses.replace(report, timers=indexed.timers.to_dict())
        sfs, spath = resolve(staging)
        write_file(sfs, join(spath, CHECKPOINT), checkpoint.pack())
        write_file(sfs, join(spath, REBUILD_REPORT), report.to_json().encode())
        publish(staging, out)
    peak = max((s.worker_peak_rss for s in summaries.values()), default=0)
    return RebuildResult(report, 0.0, out, peak, run, segments, indexed.scanned, whole)
