"""What an audit covers (the whole commitlog, or what changed since the last clean run), the repairs it plans
for recover, and whether a rebuilt index still describes the store."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping

from storelib.audit.queues import QueueAudit
from storelib.broker.segments import Segment, SegmentSummary
from storelib.findings import KINDS, Finding, finding
from storelib.layout import (
    commitlog_file,
    index_file,
    index_name_after,
    index_name_ms,
    queue_dir,
)
from storelib.reports.plan import Step
from storelib.reports.report import ScopeRecord, SegmentRecord


@dataclasses.dataclass(frozen=True)
class CleanRun:
    """The store's last clean audit in the history table (exit code 0), what a ``--since-last`` run builds on: its
    run id, when it started (UTC), the commitlog max offset it saw and the segments it read."""

    run_id: str
    started_at: dt.datetime
    commitlog_max_offset: int | None = None
    segments_audited: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Scope:
    """What an audit covers: the commitlog segments from offset ``start`` on, and what it skips.

    A full audit starts at 0. A ``--since-last`` audit starts at the segment holding the commitlog max offset of
    ``base`` (the store's last clean run in the history table) and audits only what changed after it.
    """

    start: int
    segments: list[str]  # names of the commitlog segments audited
    base: CleanRun | None = None
    skipped: list[str] = dataclasses.field(default_factory=list)  # what was not audited, and why
    note: str = ""

    def skipping(self, count: int, what: str) -> tuple[str, ...]:
        """The note that ``count`` ``what`` were not audited, unchanged since the base run (none for a full audit)."""
        if not (count and self.base):
            return ()
        when = self.base.started_at.isoformat(timespec="seconds")
        return (f"{count} {what} unchanged since run {self.base.run_id} at {when}",)

    @property
    def base_run_id(self) -> str | None:
        return self.base.run_id if self.base else None

    def record(self) -> ScopeRecord:
        """report.json's ``run.scope``."""
        return ScopeRecord(self.start, tuple(self.segments), self.base_run_id, tuple(self.skipped), self.note)


def audit_scope(segments: list[Segment], segment_size: int, since: CleanRun | None, note: str = "") -> Scope:
    """The whole commitlog (``note`` says why); with ``since`` (a clean run's summary), the segments from the one
    holding its max offset."""
    if since is None:
        return Scope(0, [s.name for s in segments], note=note)
    base_max = since.commitlog_max_offset
    start = base_max - base_max % segment_size if base_max is not None else 0
    tail = [s for s in segments if s.start >= start]
    if base_max is None or not tail:
        why = f"the commitlog does not reach where run {since.run_id} ended ({base_max}): full audit"
        return Scope(0, [s.name for s in segments], note=why)
    scope = Scope(start, [s.name for s in tail], since)
    below = scope.skipping(len(segments) - len(tail), f"commitlog segments below offset {start}")
    return dataclasses.replace(scope, skipped=list(below))


def repair(action: str, file: str, source: str | None, reason: str) -> Step:
    """One step of recover's plan: ``file`` (store-relative) from ``source`` (relative to the rebuilt dir)."""
    return Step(action, file, reason, source)


def queue_repairs(qa: QueueAudit, live_files: Iterable[str]) -> list[Step]:
    """Replace or create the rebuilt files of a divergent queue, delete the live files it should not have."""
    rel = qa.rel_dir or queue_dir(qa.topic, qa.queue_id)
    why = ", ".join(k for k in (qa.row.kinds if qa.row else ()) if KINDS[k].repairable)
    present = set(live_files)
    out = [repair("replace" if n in present else "create", f"{rel}/{n}", f"{rel}/{n}", why) for n in qa.write]
    return out + [repair("delete", f"{rel}/{n}", None, why) for n in qa.delete]


def index_repairs(
    positions: list[tuple[str | None, str | None]], findings: list[Finding], previous: str | None
) -> list[Step]:
    """Replace differing files by position (keeping live names), create missing ones, delete extra ones.

    ``positions``: per position, the live and rebuilt file names; ``previous``: the live file before the first
    position (None when it is the first). A created file takes the rebuilt name, moved 1 ms past the file
    before it so the broker loads it in order.
    """
    differs = {f.file for f in findings if f.kind == "index-file-differs"}
    out = []
    for live, built in positions:
        if live and built:
            if index_file(live) in differs:
                out.append(repair("replace", index_file(live), index_file(built), "index-file-differs"))
            previous = live
        elif built:
            previous = index_name_after(index_name_ms(built), previous)
            out.append(repair("create", index_file(previous), index_file(built), "index-missing-file"))
        else:
            out.append(repair("delete", index_file(str(live)), None, "index-extra-file"))
    return out


def stale_finding(rebuilt: list[SegmentRecord], now: Mapping[str, SegmentSummary]) -> Finding | None:
    """A finding when rebuild.json describes other commitlog segments than the store now holds."""
    then = {s.file: s for s in rebuilt}
    for name in sorted(set(now) | set(then)):
        was, is_ = then.get(name), now.get(name)
        described = None if was is None else (was.end_offset, was.fingerprint)
        current = None if is_ is None else (is_.end_offset, is_.fingerprint)
        if described != current:
            return finding(
                "rebuilt-stale",
                commitlog_file(name),
                "the rebuilt index was made from other records than this segment holds now; rebuild it first",
                expected="no segment" if was is None else f"records end at {was.end_offset}, {was.fingerprint}",
                actual="no segment" if is_ is None else f"records end at {is_.end_offset}, {is_.fingerprint}",
            )
    return None
