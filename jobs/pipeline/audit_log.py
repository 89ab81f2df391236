"""The audit's commitlog stage: what the broker's next start does with the log (storelib.broker.restart), from the live
checkpoint and abort marker, the damage found so far and where the live ConsumeQueues end."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from jobs.pipeline.context import Found
from storelib.audit.log_recovery import check_commitlog, restart_of
from storelib.broker.restart import Restart, SegmentFacts, releases_by_rules
from storelib.findings import Finding
from storelib.formats.checkpoint import Checkpoint
from udfs.audit_tasks import read_checkpoint

if TYPE_CHECKING:
    from jobs.pipeline.audit_types import Audit


@dataclasses.dataclass(frozen=True)
class LogStart:
    """The log as the broker's next start finds it: the segments, the live checkpoint and abort marker, where its
    recovery starts and truncates (``restart``), and, where detected releases recover differently, each one's
    (report.json's ``run.segments``, ``run.restart``, ``run.restart_by_release``)."""

    facts: tuple[SegmentFacts, ...]
    checkpoint: Checkpoint | None  # the live one
    abort: bool
    restart: Restart | None
    restart_by_release: Mapping[str, Restart]


def audit_log(a: Audit, found: list[Finding], cq_max_physic_offset: int) -> tuple[LogStart, Found]:
    """The broker's next start and the commitlog's findings (preallocated segments, the abort marker, the
    checkpoint, a truncation of sound data), given the findings so far (``found``) and the end of the last record a
    live ConsumeQueue points at (``cq_max_physic_offset``)."""
    commitlog = a.rebuild_report.commitlog
    facts = [
        SegmentFacts(s.file, s.start, s.messages, s.end_offset, s.first_store_timestamp) for s in commitlog.segments
    ]
    live, rebuilt = a.run.spark.sparkContext.parallelize([a.store, a.rebuilt], 2).map(read_checkpoint).collect()
    after_recover = rebuilt.checkpoint.with_5x_fields_of(live.checkpoint) if rebuilt.checkpoint else None
    cl_max = commitlog.max_offset
    restart = restart_of(facts, found, live.checkpoint, live.abort, a.cfg, cl_max, cq_max_physic_offset)
    log = LogStart(tuple(facts), live.checkpoint, live.abort, restart, {})
    log = dataclasses.replace(log, restart_by_release=_restarts_if_they_differ(a, log, found, cq_max_physic_offset))
    summaries = a.summaries.values()
    return log, Found(
        tuple(
            check_commitlog(
                facts,
                found,
                live.checkpoint,
                live.abort,
                a.cfg,
                cl_max,
                max((s.last_store_timestamp for s in summaries), default=0),
                max((s.last_cq_store_timestamp for s in summaries), default=0),
                cq_max_physic_offset,
                after_recover,
            )
        )
    )


def _restarts_if_they_differ(
    a: Audit, log: LogStart, found: list[Finding], cq_max_physic_offset: int
) -> dict[str, Restart]:
    """Where detected releases recover differently (storelib.broker.restart's rows), the next start by each of them (its
    lowest release the clues allow -> Restart); empty when the release is given or they all agree."""
    if a.rules is None or a.rules.releases is None:
        return {}
    facts, cl_max, found_by = list(log.facts), a.rebuild_report.commitlog.max_offset, {}
    for v in releases_by_rules(a.rules.releases):
        cfg = dataclasses.replace(a.cfg, brokerVersion=v)
        found_by[v] = restart_of(facts, found, log.checkpoint, log.abort, cfg, cl_max, cq_max_physic_offset)
    starts = {(r.start_offset, r.truncate_at, r.dispatch_from) for r in found_by.values() if r is not None}
    return {v: r for v, r in found_by.items() if r is not None} if len(starts) > 1 else {}
