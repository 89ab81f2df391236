"""The audit's typed values, which its stages read: ``Audit``, what every stage of one audit reads, resolved once
(jobs.pipeline.audit_flow makes it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from jobs.pipeline.context import Run
from jobs.pipeline.listing import StoreState
from storelib.audit.scope import Scope
from storelib.broker.config import BrokerConfig
from storelib.broker.rule_choice import BrokerRules
from storelib.broker.segments import Segment, SegmentSummary
from storelib.reports.report import HistoryEntry, HistoryRecord, RebuildReport

#: the verb's history table: given what it keeps of the finished run, appends it, says where (report.json's
#: ``run.history``) before the report is written
Recorder = Callable[[HistoryRecord], HistoryEntry]

DEFAULT_INDEX_SAMPLE = 200_000


@dataclasses.dataclass(frozen=True)
class Audit:
    """What every stage of one audit reads, resolved once before the first: the store and its rebuilt index, the
    settings with the store's broker rules, the scope, the audited segments and their summaries."""

    run: Run
    cfg: BrokerConfig
    rules: BrokerRules | None  # the store's broker rules, settled by the parse
    store: str
    rebuilt: str
    rebuilt_temporary: bool  # rebuilt into the work directory, removed when the audit ends
    scope: Scope
    rebuild_report: RebuildReport
    segments: tuple[Segment, ...]  # the audited ones
    summaries: Mapping[str, SegmentSummary]
    before: StoreState  # the store when the audit started
    t0: float
    index_sample: int = DEFAULT_INDEX_SAMPLE
    report_dir: str | None = None
    broker_config: str | None = None  # the --broker-config path (None: RocketMQ's defaults)
    record: Recorder | None = None  # --history
    scratch: str | None = None  # the scan's timer records (--rebuilt); None: the audit's own rebuild judged the timers
