"""DLedger stages on the driver: the rebuild writes each node's index/ from the parse's entry units; the audit
compares the live index/ with it and the node's checkpoint with the entries (formats: storelib.formats.dledger)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from jobs.pipeline.context import Found, Run, numbered_tasks, spark_schema
from storelib.audit.scope import repair
from storelib.broker.segments import Segment, SegmentSummary
from storelib.constants import DLEDGER_INDEX_UNIT_SIZE
from storelib.findings import Finding, finding
from storelib.formats.dledger import checkpoint_findings, index_plans, parse_checkpoint
from storelib.layout import DLEDGER_CHECKPOINT, dledger_file
from storelib.reports.report import DLedgerIndexRecord
from udfs.dledger_index_tasks import index_auditor, index_builder
from udfs.fs import join, read_file, resolve
from udfs.schema import DLEDGER_INDEX_SCHEMA

if TYPE_CHECKING:
    from jobs.pipeline.audit_types import Audit


def write_index(
    run: Run, segments: list[Segment], summaries: dict[str, SegmentSummary], scratch: str, staging: str
) -> list[DLedgerIndexRecord]:
    """``dledger-<selfId>/index/`` of every DLedger node into ``staging``, one task per index file; rebuild.json's
    ``dledger_index_files``."""
    ranges = [
        (s.dir, s.name, summaries[s.name].first_entry_index, summaries[s.name].last_entry_index)
        for s in segments
        if summaries[s.name].first_entry_index >= 0
    ]
    plans = index_plans(ranges)
    if not plans:
        return []
    build = index_builder(staging, scratch, plans)
    rows = numbered_tasks(run, len(plans)).mapInArrow(build, spark_schema(DLEDGER_INDEX_SCHEMA)).collect()
    return sorted((DLedgerIndexRecord(r.file, r.units) for r in rows), key=lambda r: r.file)


def audit_dledger(a: Audit) -> Found:
    """Each live index file against the rebuilt one, each node's checkpoint against its last entry: the findings,
    and the index files recover writes."""
    files = [f.file for f in a.rebuild_report.dledger_index_files]
    found = Found()
    if files:
        compare = index_auditor(a.store, a.rebuilt, files)
        rows = numbered_tasks(a.run, len(files)).mapInArrow(compare, spark_schema(DLEDGER_INDEX_SCHEMA)).collect()
        for r in sorted(rows, key=lambda r: r.file):
            if r.bad:
                action = "create" if r.live_size < 0 else "replace"
                found += Found((index_finding(r),), (repair(action, r.file, r.file, "dledger-index-wrong"),))
    return found + Found(tuple(checkpoint_audit(a.store, list(a.segments), a.summaries)))


def index_finding(r: Any) -> Finding:
    """dledger-index-wrong of one compared index file (a DLEDGER_INDEX_SCHEMA row)."""
    if r.live_size < 0:
        message = "the index file is missing; the data holds entries for it"
    else:
        message = (
            f"{r.bad} of the {r.units} units differ from the entries in the data, the first at index {r.first_bad}"
        )
    where = {"file_offset": r.first_bad * DLEDGER_INDEX_UNIT_SIZE, "count": r.bad}
    return finding("dledger-index-wrong", r.file, message, **where)


def checkpoint_audit(store: str, segments: list[Segment], summaries: Mapping[str, SegmentSummary]) -> list[Finding]:
    """Each DLedger node's checkpoint against the last entry of its data."""
    fs, root = resolve(store)
    last: dict[str, int] = {}
    for s in segments:
        if summaries[s.name].last_entry_index >= 0:
            last[s.dir] = max(last.get(s.dir, -1), summaries[s.name].last_entry_index)
    out = []
    for data_dir, last_index in sorted(last.items()):
        rel = dledger_file(data_dir, DLEDGER_CHECKPOINT)
        if fs.get_file_info(join(root, rel)).type != pafs.FileType.File:
            continue
        checkpoint = parse_checkpoint(read_file(fs, join(root, rel)).decode("utf-8", "replace"))
        for kind, message, count in checkpoint_findings(checkpoint, last_index, rel):
            out.append(finding(kind, rel, message, count=count))
    return out
