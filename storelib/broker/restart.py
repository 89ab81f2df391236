"""What the broker does with a store at its next start (``DefaultMessageStore.load``), by its own rules per release.

``load`` judges the last shutdown by the ``abort`` file: absent, ``CommitLog.recoverNormally``; present,
``recoverAbnormally``, and ``IndexService.load`` deletes every IndexFile whose endTimestamp is after the
checkpoint's indexMsgTimestamp. Both recoveries pick a start segment (the rules below differ per release), walk
its records and the next segments' with ``checkMessageAndReturnSize`` to the first record that fails, truncate
the commitlog there (``truncateDirtyFiles``; ConsumeQueue units at or past it go too, ``truncateDirtyLogicFiles``)
and dispatch the records they walk into the ConsumeQueues and the IndexFile again (read from the 4.9.7, 5.3.3
and 5.5.0 jars, tests/broker/FACTS.md). A ConsumeQueue skips a unit it already holds, so a re-dispatch adds
only what a queue lacks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from storelib.broker.config import BrokerConfig
from storelib.broker.detection import Releases, intersect
from storelib.broker.versions import (
    CQ_OFFSET,
    DEFAULT_RELEASE,
    END,
    RULE_SETS,
    THIRD_LAST,
    TIMESTAMP,
    parse_version,
    version_text,
)
from storelib.findings import BODY_CRC, KINDS, PROPERTY_CRC, STOPS
from storelib.formats.checkpoint import Checkpoint

#: ``commitLogRecoverMaxNum`` of 0 or less means this many
DEFAULT_RECOVER_MAX_NUM = 10
#: RocketMQ's defaults
DEFAULTS = BrokerConfig()


@dataclasses.dataclass(frozen=True)
class RecoveryRules:
    """How a range of releases (from ``first``: the first release-table row with these rules) starts its
    commitlog recovery."""

    name: str
    first: tuple[int, int, int]
    normal: str  # the start rule of recoverNormally
    crash: str  # the start rule of recoverAbnormally
    max_recover_num: bool  # commitLogRecoverMaxNum bounds how many segments the start search looks at
    reput_after_normal: bool  # recoverNormally dispatches nothing; the reput service does, from the CQs' max


def _recovery_rules() -> tuple[RecoveryRules, ...]:
    """The recovery rules of the release table's rows, one per change."""
    out: list[RecoveryRules] = []
    for row in RULE_SETS:
        if (
            not out
            or (out[-1].normal, out[-1].crash, out[-1].max_recover_num, out[-1].reput_after_normal) != row.recovery
        ):
            out.append(RecoveryRules(row.name, row.first, *row.recovery))
    return tuple(out)


#: the recovery rules of the release table (storelib.broker.versions.RULE_SETS), one per change
RECOVERY_RULES = _recovery_rules()


def releases_by_rules(found: Releases) -> list[str]:
    """The lowest allowed release of each RECOVERY_RULES row that meets the releases ``found``."""
    firsts = [r.first for r in RECOVERY_RULES]
    rows = found.rows_meeting(firsts)
    ends = [*firsts[1:], END]
    return [version_text(intersect(((firsts[k], ends[k]),), found.spans)[0][0]) or "" for k in rows]


@dataclasses.dataclass(frozen=True)
class SegmentFacts:
    """What the audit needs of a segment (from rebuild.json and the parsed records)."""

    file: str
    start: int
    messages: int
    end_offset: int
    first_store_timestamp: int  # 0 when the segment has no message


@dataclasses.dataclass(frozen=True)
class Restart:
    """The broker's next start: which recovery, from where, where the commitlog ends, what is dispatched again."""

    crash: bool  # abort exists: recoverAbnormally
    rules: str  # the RecoveryRules name
    start: int  # index of the segment recovery starts at
    start_offset: int
    truncate_at: int  # the commitlog's max offset after recovery
    lost: int  # bytes of records the audit found valid that recovery cuts off
    stop: str | None  # the rebuild finding kind recovery stops at (None: the end of the valid records)
    dispatch_from: int  # records from here to truncate_at go to the ConsumeQueues and the IndexFile again

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def recovery_rules(version: str) -> RecoveryRules:
    """The recovery rules of a release (``""``: DEFAULT_RELEASE, as storelib.broker.versions assumes when nothing is
    known)."""
    v = parse_version(version or DEFAULT_RELEASE)
    return [r for r in RECOVERY_RULES if r.first <= v][-1]


def stops_recovery(kind: str, cfg: BrokerConfig) -> bool:
    """Whether ``CommitLog.checkMessageAndReturnSize`` rejects such a record at recovery: with
    ``checkCRCOnRecover`` it checks BODYCRC, or instead the ``__CRC32#`` property when ``forceVerifyPropCRC``."""
    rule = KINDS[kind].recovery
    if rule == BODY_CRC:
        return cfg.checkCRCOnRecover and not cfg.forceVerifyPropCRC
    if rule == PROPERTY_CRC:
        return cfg.checkCRCOnRecover and cfg.forceVerifyPropCRC
    return rule == STOPS


def index_deleted(abort: bool, end_timestamp: int, checkpoint: Checkpoint | None) -> bool:
    """``IndexService.load(lastExitOK)``: after a crash an IndexFile ending after indexMsgTimestamp is destroyed."""
    return abort and end_timestamp > (checkpoint or Checkpoint()).index_msg_timestamp


def recovery_start(
    segments: list[SegmentFacts],
    checkpoint: Checkpoint | None,
    abort: bool,
    cfg: BrokerConfig = DEFAULTS,
    cq_max_physic_offset: int = -1,
    stop_offsets: Iterable[int] = (),
) -> int:
    """Index of the segment the broker's recovery starts from (0 when there is none).

    Walking back from the last segment, the first one the rule accepts; with ``max_recover_num`` (5.5.0) the
    walk gives up at the ``commitLogRecoverMaxNum``-th segment and starts there. ``cq_max_physic_offset``: the
    end of the last record any live ConsumeQueue points at; ``stop_offsets``: records recovery rejects.
    """
    rules = recovery_rules(cfg.brokerVersion)
    how = rules.crash if abort else rules.normal
    n = len(segments)
    if how == THIRD_LAST:
        return max(0, n - 3)
    accepts = _acceptor(how, checkpoint or Checkpoint(), abort, cfg, cq_max_physic_offset, set(stop_offsets))
    limit = n
    if rules.max_recover_num:
        limit = cfg.commitLogRecoverMaxNum if cfg.commitLogRecoverMaxNum > 0 else DEFAULT_RECOVER_MAX_NUM
    for looked, i in enumerate(range(n - 1, -1, -1), 1):
        if accepts(segments[i]) or looked >= limit:
            return i
    return 0


def _acceptor(
    how: str, cp: Checkpoint, abort: bool, cfg: BrokerConfig, cq_max: int, stops: set[int]
) -> Callable[[SegmentFacts], bool]:
    """``isMappedFileMatchedRecover`` of a rule, on a segment's first record."""
    index_safe = cfg.messageIndexEnable and cfg.messageIndexSafe
    if how == CQ_OFFSET:
        return lambda s: s.start <= cq_max
    if how == TIMESTAMP:  # StoreCheckpoint.getMinTimestamp, or getMinTimestampIndex
        limit = min(cp.min_timestamp(), cp.index_msg_timestamp) if index_safe else cp.min_timestamp()
        return lambda s: 0 < s.first_store_timestamp <= limit

    def matched(s: SegmentFacts) -> bool:  # ConsumeQueueStore and IndexService, each isMappedFileMatchedRecover
        ts = s.first_store_timestamp
        if ts <= 0 or s.start in stops:
            return False
        if not abort:
            queues = s.start <= cq_max
        elif cp.logics_physical_offset > 0:
            queues = s.start <= cp.logics_physical_offset
        else:
            queues = ts <= cp.logics_msg_timestamp
        return queues and (not index_safe or ts <= cp.index_msg_timestamp)

    return matched


def next_start(
    segments: list[SegmentFacts],
    stops: list[tuple[int, str]],
    checkpoint: Checkpoint | None,
    abort: bool,
    cfg: BrokerConfig,
    commitlog_max: int,
    cq_max_physic_offset: int = -1,
) -> Restart | None:
    """What ``DefaultMessageStore.load`` does with the commitlog (None: no segment).

    ``stops``: (commitlog offset, finding kind) of every record ``checkMessageAndReturnSize`` rejects;
    ``commitlog_max``: the end of the valid records.
    """
    if not segments:
        return None
    rules = recovery_rules(cfg.brokerVersion)
    start = recovery_start(segments, checkpoint, abort, cfg, cq_max_physic_offset, (at for at, _ in stops))
    begin = segments[start].start
    stop = min(((at, kind) for at, kind in stops if begin <= at < commitlog_max), default=None)
    end = stop[0] if stop else commitlog_max
    if abort:
        dispatch_from = begin
    else:
        walked_from = segments[0].start if rules.reput_after_normal else begin
        dispatch_from = min(end, max(cq_max_physic_offset, walked_from))
    return Restart(abort, rules.name, start, begin, end, commitlog_max - end, stop and stop[1], dispatch_from)
