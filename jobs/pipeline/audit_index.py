"""The audit's IndexFile stage: files by position, their entries against the records, the broker's key lookup."""

from __future__ import annotations

import collections
import dataclasses
import functools
import operator
from typing import TYPE_CHECKING

import numpy as np

from jobs.pipeline.context import Found
from jobs.pipeline.listing import list_index
from jobs.pipeline.tasks import run_packed, shares, task_slots
from storelib.audit.index_ranges import (
    BadEntries,
    EntryScope,
    PairPart,
    RangeComparison,
    index_range_bounds,
    range_of,
    sample_threshold,
)
from storelib.audit.scope import index_repairs
from storelib.broker.restart import index_deleted
from storelib.findings import Finding, finding
from storelib.formats.checkpoint import Checkpoint
from storelib.formats.indexfile import IndexLayout, index_file_size
from storelib.layout import index_file
from storelib.reports.report import IndexCounts
from udfs.audit_tasks import IndexPosition, IndexRangeTask, audit_index_file, audit_index_range

if TYPE_CHECKING:
    from jobs.pipeline.audit_log import LogStart
    from jobs.pipeline.audit_types import Audit


@dataclasses.dataclass(frozen=True)
class IndexCompared:
    """The IndexFiles compared, all that does not depend on the log (``compare_index``): the live files' names, the
    listing's findings and what a ``--since-last`` run skips, the first position audited, the per-position rows,
    the entries' findings and the lookup counts."""

    names: tuple[str, ...]
    listed: Found
    first: int = 0
    rows: tuple[IndexPosition, ...] = ()
    entries: tuple[Finding, ...] = ()
    keys: IndexCounts = dataclasses.field(default_factory=IndexCounts)  # the lookup counts (keys_*, entries_checked)


def compare_index(a: Audit) -> IndexCompared:
    """The live IndexFiles against the rebuilt ones: per position (headers, bytes), then their entries per commitlog
    range. It does not depend on the queues' or the log's stages: it runs beside them (jobs.pipeline.audit_flow).

    Everything is judged from IndexFile entries (keyHash, commitlog offset): the broker's lookup matches keys
    by keyHash alone, so the rebuilt files' entries are every key of every indexed message, and no second
    parse of the commitlog is needed.

    Entries pointing below the audited range are not checked. Since the base run: only the positions whose
    rebuilt file ends at or after the scope's start.
    """
    names, listing = list_index(a.store)
    listed = Found(tuple(listing))
    built, _ = list_index(a.rebuilt)
    pairs = [
        (i, names[i] if i < len(names) else None, built[i] if i < len(built) else None)
        for i in range(max(len(names), len(built)))
    ]
    if a.scope.base:
        ends = {f.name: f.end_phy_offset for f in a.rebuild_report.index_files}
        covering = [p for p in pairs if p[2] is None or ends.get(p[2], a.scope.start) >= a.scope.start]
        what = f"index files with no entry at or after offset {a.scope.start}"
        listed += Found(skipped=a.scope.skipping(len(pairs) - len(covering), what))
        pairs = covering
    if not a.cfg.messageIndexEnable or not pairs:
        return IndexCompared(tuple(names), listed)
    entries = _entry_scope(a, [p[2] for p in pairs if p[2]])
    store, rebuilt, cfg = a.store, a.rebuilt, a.cfg
    size = index_file_size(cfg.maxHashSlotNum, cfg.maxIndexNum)
    weights = [size * ((live is not None) + (built is not None)) for _, live, built in pairs]
    label = "index files (headers, bytes)"
    done = run_packed(a.run, label, pairs, weights, lambda p: audit_index_file(p, store, rebuilt, cfg, entries))
    rows = [row for _, row in done]
    compared, keys = _compare_entries(a, rows, entries)
    first = min(pairs[0][0], len(names))
    return IndexCompared(tuple(names), listed, first, tuple(rows), tuple(compared), keys)


def audit_index(c: IndexCompared, log: LogStart) -> tuple[list[IndexPosition], IndexCounts, Found]:
    """The per-position rows of the report, the lookup counts, and the IndexFiles' findings and repairs, given what
    the broker's next start does (``log``)."""
    index = c.listed
    for r in c.rows:
        index += Found(tuple(r.findings) + tuple(_deleted_on_recovery(log, r)))
    if not c.rows:
        return [], c.keys, index
    index += Found(c.entries)
    positions = [(r.live, r.rebuilt) for r in c.rows]
    repairs = index_repairs(positions, list(index.findings), c.names[c.first - 1] if c.first else None)
    return list(c.rows), c.keys, index + Found(repairs=tuple(repairs))


def _entry_scope(a: Audit, rebuilt_names: list[str]) -> EntryScope:
    """Entries from the rebuilt commitlog's start (or the scope's), compared per range: one per rebuilt file and
    audited segment, so no range spans more than one rebuilt file and one segment."""
    files = {f.name: f for f in a.rebuild_report.index_files}
    starts = [files[n].begin_phy_offset for n in rebuilt_names if files[n].index_count > 1]
    starts += [s.start for s in a.segments]
    from_offset = max(a.rebuild_report.commitlog.min_offset, a.scope.start)
    return EntryScope(from_offset, index_range_bounds(starts))


def _compare_entries(a: Audit, rows: list[IndexPosition], entries: EntryScope) -> tuple[list[Finding], IndexCounts]:
    """Every live entry in scope is a rebuilt entry (its keyHash is a key of the record it points at), and every
    rebuilt (keyHash, commitlog offset) is found by the broker's lookup over the live files, sampled above
    ``index_sample``: one task per commitlog range reading only the files with entries there. The findings and the
    lookup counts."""
    tasks, weights = _split(a, _range_tasks(a, rows, entries), entries)
    threshold = sample_threshold(a.index_sample, sum(r.rebuilt_entries for r in rows))
    store, rebuilt, cfg = a.store, a.rebuilt, a.cfg
    label = "index entries (live against rebuilt, key lookups)"

    def compare(task: IndexRangeTask) -> RangeComparison:
        return audit_index_range(task, store, rebuilt, cfg, entries, threshold)

    results = [result for _, result in run_packed(a.run, label, tasks, weights, compare)]
    missing, keys = _keys_not_found(a, results)
    return _bad_entries(a, results) + missing, keys


def _range_tasks(a: Audit, rows: list[IndexPosition], entries: EntryScope) -> list[IndexRangeTask]:
    """Per commitlog range with entries: the live files (readable) and rebuilt files holding some. A rebuilt
    file's entries are in commitlog order, so its header's begin and end offsets give its ranges."""
    files = {f.name: f for f in a.rebuild_report.index_files}
    live: dict[int, list[str]] = collections.defaultdict(list)
    built: dict[int, list[str]] = collections.defaultdict(list)
    for r in rows:
        for k in r.ranges if r.header else []:  # a header was read: the live file is there
            live[k].append(r.live or "")
        f = files.get(r.rebuilt) if r.rebuilt else None
        if f and f.index_count > 1:
            first, last = range_of(np.array([f.begin_phy_offset, f.end_phy_offset]), entries.bounds).tolist()
            for k in range(first, last + 1):
                built[k].append(f.name)
    return [IndexRangeTask(k, tuple(live[k]), tuple(built[k])) for k in sorted(set(live) | set(built))]


def _split(a: Audit, tasks: list[IndexRangeTask], entries: EntryScope) -> tuple[list[IndexRangeTask], list[int]]:
    """The range tasks with a range bigger than a core's share in parts of its pairs
    (storelib.audit.index_ranges.PairPart), so one big commitlog segment is compared on every core; each task's weight,
    its range's bytes over its parts."""
    weights = [entries.range_bytes(t.range, a.rebuild_report.commitlog.max_offset) for t in tasks]
    out = []
    for t, w, n in zip(tasks, weights, shares(weights, task_slots(a.run.spark.sparkContext))):
        out += [(dataclasses.replace(t, part=PairPart(g, n)), w // n) for g in range(n)]
    return [t for t, _ in out], [w for _, w in out]


def _deleted_on_recovery(log: LogStart, row: IndexPosition) -> list[Finding]:
    """Crash recovery deletes IndexFiles whose endTimestamp is after the checkpoint's indexMsgTimestamp."""
    header = row.header
    if not (header and index_deleted(log.abort, header.end_timestamp, log.checkpoint)):
        return []
    cp = log.checkpoint or Checkpoint()  # the broker reads a missing checkpoint as zeros
    fate, restart = "never rebuilds its keys", log.restart
    if restart and restart.dispatch_from <= header.begin_phy_offset:
        fate = f"indexes its records again (it re-dispatches from commitlog offset {restart.dispatch_from:,})"
    elif restart:
        fate = f"never indexes again its records before commitlog offset {restart.dispatch_from:,}"
    return [
        finding(
            "index-deleted-on-recovery",
            index_file(str(row.live)),
            f"endTimestamp {header.end_timestamp} is after the checkpoint's indexMsgTimestamp "
            f"{cp.index_msg_timestamp}: the broker's crash recovery deletes this file and {fate}",
            expected=f"indexMsgTimestamp >= {header.end_timestamp}",
            actual=str(cp.index_msg_timestamp),
        )
    ]


def _bad_entries(a: Audit, results: list[RangeComparison]) -> list[Finding]:
    """index-bad-entries per live file: the ranges' counts added, the lowest entry first."""
    bad: dict[str, BadEntries] = {}
    for r in results:
        for name, b in r.bad.items():
            bad[name] = bad[name] + b if name in bad else b
    layout = IndexLayout.of(a.cfg)
    return [
        finding(
            "index-bad-entries",
            index_file(name),
            f"{b.count} entries point at no record with a key of their keyHash, the first is entry {b.entry}",
            commitlog_offset=b.phy_offset,
            file_offset=layout.entry_at(b.entry),
            count=b.count,
            expected=f"a record at commitlog offset {b.phy_offset} with a key of keyHash {b.key_hash}",
            actual=f"keyHash {b.key_hash} -> no such record",
        )
        for name, b in sorted(bad.items())
    ]


def _keys_not_found(a: Audit, results: list[RangeComparison]) -> tuple[list[Finding], IndexCounts]:
    """index-keys-not-found: the distinct rebuilt pairs the broker's lookup over the live files misses, all of
    them up to ``index_sample`` pairs, else the sampled ones; the entries, pairs and checked pairs counted."""
    total = sum(r.keys_total for r in results)
    sampled = total > a.index_sample
    info = IndexCounts(
        keys_total=total,
        keys_checked=sum(r.keys_sampled for r in results) if sampled else total,
        entries_checked=sum(r.entries_checked for r in results),
    )
    missing = [m for r in results if (m := r.missing_sampled if sampled else r.missing)]
    if not missing:
        return [], info
    m = functools.reduce(operator.add, missing)
    count, phy, key_hash = m.count, m.phy_offset, m.key_hash
    not_found = finding(
        "index-keys-not-found",
        "index",
        f"{count} (key, message) pairs are not found by the broker's lookup over the live IndexFiles "
        f"({info.keys_checked} of {total} checked)",
        commitlog_offset=phy,
        count=count,
        expected=f"keyHash {key_hash} finds commitlog offset {phy}",
        actual="not found",
    )
    return [not_found], info
