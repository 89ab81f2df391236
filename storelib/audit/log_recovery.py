"""The CommitLog audit: what the broker's own recovery would make of the log (where it starts, where its CRC
check stops it) against the last valid record found by the rebuild, and the checkpoint against both."""

from __future__ import annotations

from storelib.broker.config import BrokerConfig
from storelib.broker.restart import Restart, SegmentFacts, next_start, stops_recovery
from storelib.findings import Finding, finding
from storelib.formats.checkpoint import Checkpoint
from storelib.layout import (
    ABORT,
    CHECKPOINT,
    commitlog_file,
)


def restart_of(
    segments: list[SegmentFacts],
    rebuild_findings: list[Finding],
    checkpoint: Checkpoint | None,
    abort: bool,
    cfg: BrokerConfig,
    commitlog_max: int,
    cq_max_physic_offset: int = -1,
) -> Restart | None:
    """The broker's next start (storelib.broker.restart.next_start), stopping at the records the rebuild found it
    rejects."""
    stops = [
        (f.commitlog_offset, f.kind)
        for f in rebuild_findings
        if f.commitlog_offset is not None and stops_recovery(f.kind, cfg)
    ]
    return next_start(segments, stops, checkpoint, abort, cfg, commitlog_max, cq_max_physic_offset)


def check_commitlog(
    segments: list[SegmentFacts],
    rebuild_findings: list[Finding],
    checkpoint: Checkpoint | None,
    abort: bool,
    cfg: BrokerConfig,
    commitlog_max: int,
    last_store_timestamp: int,
    last_cq_store_timestamp: int,
    cq_max_physic_offset: int = -1,
    after_recover: Checkpoint | None = None,
) -> list[Finding]:
    """Preallocated segments, the abort marker, the checkpoint, and whether recovery would truncate sound data
    (``cq_max_physic_offset``: the end of the last record a live ConsumeQueue points at, -1 when none does).

    ``after_recover``: the checkpoint recover would write; a truncation its new start does not get past is
    recovery-would-truncate-after-recover (None: not judged, recovery-would-truncate)."""
    out: list[Finding] = []
    with_messages = [i for i, s in enumerate(segments) if s.messages > 0]
    last = with_messages[-1] if with_messages else -1
    for s in segments[last + 1 :]:
        if s.end_offset == s.start:
            out.append(
                finding(
                    "commitlog-preallocated",
                    commitlog_file(s.file),
                    "zero-filled segment after the last record; the broker deletes it at start",
                    commitlog_offset=s.start,
                )
            )
    restart = restart_of(segments, rebuild_findings, checkpoint, abort, cfg, commitlog_max, cq_max_physic_offset)
    how = "crash recovery (abort exists)" if abort else "normal recovery"
    if abort:
        out.append(
            finding(
                "abort-marker",
                ABORT,
                f"the broker did not shut down cleanly; at start its {how} re-checks the commitlog from segment "
                f"{segments[restart.start].file if restart else '-'}",
            )
        )
    out += _checkpoint_findings(checkpoint, commitlog_max, last_store_timestamp, last_cq_store_timestamp)
    if restart and restart.lost:
        after = None
        if after_recover is not None:
            after = restart_of(
                segments, rebuild_findings, after_recover, abort, cfg, commitlog_max, cq_max_physic_offset
            )
        out.append(_truncate_finding(segments, restart, how, commitlog_max, after, after_recover is not None))
    return out


def _checkpoint_findings(
    checkpoint: Checkpoint | None, commitlog_max: int, last_store_timestamp: int, last_cq_store_timestamp: int
) -> list[Finding]:
    """An unreadable checkpoint, or one ahead of the records it can refer to."""
    if checkpoint is None:
        return [finding("checkpoint-unreadable", CHECKPOINT, "no readable 4096-byte checkpoint")]
    out = []
    for field, value, have in (
        ("physicMsgTimestamp", checkpoint.physic_msg_timestamp, last_store_timestamp),
        ("logicsMsgTimestamp", checkpoint.logics_msg_timestamp, last_cq_store_timestamp),
    ):
        if value > have:
            out.append(
                finding(
                    "checkpoint-ahead",
                    CHECKPOINT,
                    f"{field} {value} is after the last record it can refer to ({have}): "
                    "records the broker had flushed are missing",
                    expected=f"<= {have}",
                    actual=str(value),
                )
            )
    if checkpoint.confirm_phy_offset > commitlog_max:
        out.append(
            finding(
                "checkpoint-ahead",
                CHECKPOINT,
                f"confirmPhyOffset {checkpoint.confirm_phy_offset} is past the last valid record {commitlog_max}",
                commitlog_offset=commitlog_max,
                expected=f"<= {commitlog_max}",
                actual=str(checkpoint.confirm_phy_offset),
            )
        )
    return out


def _truncate_finding(
    segments: list[SegmentFacts],
    restart: Restart,
    how: str,
    commitlog_max: int,
    after: Restart | None,
    judged: bool,
) -> Finding:
    """Where the broker's recovery stops, and the bytes of valid records after it; recovery-would-truncate when the
    start recover's checkpoint gives it (``after``) lies past the damage (or that was not ``judged``), else
    recovery-would-truncate-after-recover."""
    at = restart.truncate_at
    seg = next(s for s in reversed(segments) if s.start <= at)
    total = commitlog_max - segments[0].start
    kind, then = "recovery-would-truncate", ""
    if after is not None and after.lost == 0:
        then = f"; with recover's new checkpoint it starts at segment {segments[after.start].file}, past the damage"
    elif judged:
        kind = "recovery-would-truncate-after-recover"
        start = segments[after.start].file if after is not None else "-"
        then = (
            f"; with recover's new checkpoint it starts at segment {start} and still stops at the damage: "
            "recover does not prevent this truncation"
        )
    return finding(
        kind,
        commitlog_file(seg.file),
        f"the broker's {how} starts at segment {segments[restart.start].file}, stops at the record at "
        f"commitlog offset {at} ({restart.stop}) and truncates the commitlog there: {restart.lost} bytes "
        f"({100 * restart.lost / max(1, total):.0f}% of the log) of records after it are lost to consumers{then}",
        commitlog_offset=at,
        file_offset=at - seg.start,
        count=restart.lost,
        expected=f"max offset {commitlog_max}",
        actual=f"max offset {at} after recovery",
    )
