"""The reports the verbs write: rebuild.json (deterministic for the same input) and the audit's summary."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import Any

from storelib.checkpoint import Checkpoint
from storelib.config import BrokerConfig
from storelib.findings import KINDS, SEVERITIES, Finding, finding_order
from storelib.segments import Segment, SegmentSummary, max_offset

REBUILD_FORMAT = "rmq-store-rebuild/1"
REBUILD_REPORT = "rebuild.json"
AUDIT_FORMAT = "rmqstore-audit/1"


def segment_row(s: Segment, summary: SegmentSummary) -> dict[str, Any]:
    """rebuild.json's ``commitlog.segments`` entry of a segment."""
    return {
        "file": s.name,
        "start": s.start,
        "size": s.size,
        "messages": summary.messages,
        "end_reason": summary.end_reason,
        "end_offset": summary.end_offset,
        "detail": summary.detail or "",
        "first_store_timestamp": summary.first_store_timestamp,
        "fingerprint": summary.fingerprint,
    }


def build_rebuild_report(
    cfg: BrokerConfig,
    segments: list[Segment],
    summaries: Mapping[str, SegmentSummary],
    findings: list[Finding],
    queues: list[dict[str, Any]],
    index_files: list[dict[str, Any]],
    checkpoint: Checkpoint,
) -> dict[str, Any]:
    """rebuild.json: deterministic for the same input (no times, no run ids)."""
    return {
        "format": REBUILD_FORMAT,
        "broker_config": cfg.to_dict(),
        "commitlog": {
            "segments": [segment_row(s, summaries[s.name]) for s in segments],
            "min_offset": segments[0].start,
            "max_offset": max_offset(segments, summaries),
            "messages": sum(summaries[s.name].messages for s in segments),
        },
        "findings": [f.to_dict() for f in sorted(findings, key=_rebuild_order)],
        "consume_queues": queues,
        "index_files": index_files,
        "checkpoint": dataclasses.asdict(checkpoint),
    }


def _rebuild_order(f: Finding) -> tuple[Any, ...]:
    return (f.file, f.commitlog_offset or -1, f.queue_offset or -1, f.kind)


def audit_summary(findings: list[Finding], exit_code: int, counts: dict[str, Any]) -> dict[str, Any]:
    """report.json's ``summary``: the exit code, counts per severity and kind, and whether the run saw everything."""
    severities = collections.Counter(f.severity for f in findings)
    return {
        "exit_code": exit_code,
        "findings": len(findings),
        **{s: severities[s] for s in SEVERITIES},
        "kinds": dict(sorted(collections.Counter(f.kind for f in findings).items())),
        "complete": not any(KINDS[f.kind].incomplete for f in findings),
        **counts,
    }


def sorted_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=finding_order)
