"""The IndexFile stage on the driver: as soon as every parse task has left its summary, the segments are judged
(stop, or leave damaged ones out) and every IndexFile is built from exactly its range of the parse's entries
(udfs.write.build_index_file), while the ConsumeQueue writers run.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np

from jobs.pipeline.context import Run
from jobs.pipeline.parse import wait_for_summaries
from jobs.pipeline.store_rules import settle_rules
from jobs.pipeline.tasks import run_packed
from jobs.pipeline.timers import TimerResult, judge_timers
from jobs.pipeline.timers import applies as timers_apply
from storelib.broker.rule_choice import BrokerRules
from storelib.broker.segments import (
    Piece,
    Segment,
    SegmentSummary,
    damage_findings,
    judge_ends,
    max_offset,
    segment_errors,
)
from storelib.errors import DamageStop
from storelib.findings import Finding, finding
from storelib.formats.indexfile import (
    IndexHeader,
    IndexLayout,
    IndexPlan,
    entries_per_file,
    index_file_plans,
    needs_empty_tail_file,
)
from storelib.layout import COMMITLOG, deterministic_index_names
from storelib.reports.report import IndexFileRecord
from udfs.fs import join, resolve
from udfs.schema import INDEX_ENTRY_DTYPE
from udfs.write import build_index_file, index_part_name, write_index_file


@dataclasses.dataclass
class Indexed:
    """What the index stage leaves: the segments' summaries as scanned, the store's rules settled by them, the
    segments left out, the IndexFiles built."""

    scanned: dict[str, SegmentSummary]
    rules: BrokerRules
    skipped: list[str]
    index_files: list[IndexFileRecord]
    timers: TimerResult | None = None  # 5.x: the timer store and delay offsets, rebuilt into the staging directory

    @property
    def summaries(self) -> dict[str, SegmentSummary]:
        """As scanned, the skipped segments without their messages (what the index and the report count)."""
        return {name: s.without_messages() if name in self.skipped else s for name, s in self.scanned.items()}


def index_stage(
    run: Run,
    store: str,
    staging: str,
    scratch: str,
    segments: list[Segment],
    tasks: list[list[Piece]],
    findings: list[Finding],
    on_error: str,
    parsed: threading.Event,
) -> Indexed:
    """Judge the segments, then build the IndexFiles and (5.x) the timer files as soon as every parse task has left
    its summary and timer records, while the ConsumeQueue writers run (a second driver thread: these jobs are not a
    tail after them)."""
    found = wait_for_summaries(scratch, tasks, parsed)
    scanned = found.summaries
    rules = settle_rules(run, store, scanned.values())
    skipped = judge(segments, scanned, findings, on_error)
    indexed = Indexed(scanned, rules, skipped, [])
    counts = [(piece, n) for piece, segment, n in found.entries if segment not in skipped]
    indexed.index_files = write_index_files(run, staging, scratch, segments, indexed.summaries, counts)
    settled = run.with_rules(store, rules)
    if timers_apply(settled, store):
        log_end = max_offset(segments, indexed.summaries)
        indexed.timers = judge_timers(settled, store, scratch, log_end, out=staging)
    return indexed


def judge(
    segments: list[Segment], summaries: dict[str, SegmentSummary], findings: list[Finding], on_error: str
) -> list[str]:
    """Add the segments' end and damage findings; the segments to leave out (skip-segment), or DamageStop.

    Damage to one record is reported and loses only that record: it never stops or skips a segment.
    """
    findings += judge_ends(segments, summaries) + damage_findings(segments, summaries)
    errors = segment_errors(findings)
    if not errors:
        return []
    if on_error == "stop":
        raise DamageStop(
            f"{len(errors)} error(s) in the commitlog; nothing was written "
            "(--on-error skip-segment leaves the damaged segments out)",
            findings,
        )
    bad = {f.file for f in errors}
    skipped = sorted(s.name for s in segments if s.rel in bad)
    message = f"--on-error skip-segment: {len(skipped)} damaged segment(s) left out of the index: " + ", ".join(skipped)
    findings.append(finding("segments-skipped", COMMITLOG, message, count=len(skipped)))
    return skipped


def write_index_files(
    run: Run,
    staging: str,
    scratch: str,
    segments: list[Segment],
    summaries: dict[str, SegmentSummary],
    counts: list[tuple[str, int]],
) -> list[IndexFileRecord]:
    """Every IndexFile built from the pieces' scratch files (``counts``: each piece's name and entries, in offset
    order) by tasks the files are packed into by their entries' bytes (run_packed), then named (see layout).

    A full last file followed by more messages gets the broker's empty successor file.
    """
    cfg = run.cfg
    last_message = max((summaries[s.name].last_message_offset for s in segments), default=-1)
    if not cfg.messageIndexEnable or last_message < 0:
        return []
    plans = index_file_plans(counts, entries_per_file(cfg.maxIndexNum))
    built: list[tuple[int, IndexHeader]] = []  # (first entry's store timestamp, header) by file number
    if plans:  # an RDD job: Spark plans it faster than a DataFrame's query, after the last summary
        weights = [IndexLayout.entries_bytes(sum(stop - first for _, first, stop in p.slices)) for p in plans]
        planned: list[tuple[int, IndexPlan]] = list(enumerate(plans))
        done = run_packed(run, "index files", planned, weights, lambda p: build_index_file(staging, scratch, cfg, *p))
        built = [result for _, result in done]
    fs, root = resolve(staging)
    total = sum(n for _, n in counts)
    last = built[-1][1] if built else IndexHeader(end_phy_offset=-1)
    if needs_empty_tail_file(total, cfg.maxIndexNum, last_message > last.end_phy_offset):
        inherited = (last.end_phy_offset, last.end_timestamp) if built else (0, 0)
        header = write_index_file(staging, len(plans), np.zeros(0, INDEX_ENTRY_DTYPE), inherited, cfg)
        built.append((header.end_timestamp, header))
    names = deterministic_index_names([first for first, _ in built])
    for file_no, name in enumerate(names):
        fs.move(join(root, "index", index_part_name(file_no)), join(root, "index", name))
    return [IndexFileRecord.of(name, header) for name, (_, header) in zip(names, built)]
