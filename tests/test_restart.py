"""storelib.broker.restart: the broker's next start by its own rules per release, on hand-made segment facts (the rules
are read from the jars, tests/broker/FACTS.md; tests/broker/test_restart_broker.py compares with the real broker)."""

from __future__ import annotations

import dataclasses

import pytest

from storelib.broker.config import BrokerConfig
from storelib.broker.restart import (
    DEFAULT_RECOVER_MAX_NUM,
    SegmentFacts,
    index_deleted,
    next_start,
    recovery_rules,
    recovery_start,
    stops_recovery,
)
from storelib.formats.checkpoint import Checkpoint

SEG = 65_536
T0 = 1_700_000_000_000  # first storeTimestamp of segment 0; each segment's first record is 1 s later
N = 14  # more segments than 5.5.0's default commitLogRecoverMaxNum


def segments(n: int = N) -> list[SegmentFacts]:
    """n full segments, each starting with a record stored 1 s after the previous segment's first."""
    return [SegmentFacts(f"{i * SEG:020d}", i * SEG, 10, (i + 1) * SEG, T0 + 1000 * i) for i in range(n)]


def cfg(version: str, **settings: object) -> BrokerConfig:
    return dataclasses.replace(BrokerConfig(), brokerVersion=version, **settings)


def first_ts(i: int) -> int:
    return T0 + 1000 * i


@pytest.mark.parametrize(
    ("version", "name"),
    [
        ("", "4.0"),
        ("4.3.2", "4.0"),
        ("4.9.7", "4.0"),
        ("5.3.1", "5.0"),
        ("5.3.2", "5.3.2"),
        ("5.3.3", "5.3.2"),
        ("5.5.0", "5.5"),
    ],
)
def test_each_release_has_its_recovery_rules(version: str, name: str) -> None:
    assert recovery_rules(version).name == name


@pytest.mark.parametrize("version", ["4.9.7", "5.3.1"])
def test_normal_recovery_before_5_3_2_starts_at_the_third_last_segment(version: str) -> None:
    assert recovery_start(segments(), Checkpoint(), False, cfg(version), cq_max_physic_offset=SEG) == N - 3
    assert recovery_start(segments(2), Checkpoint(), False, cfg(version)) == 0


@pytest.mark.parametrize("version", ["5.3.3", "5.5.0"])
def test_normal_recovery_from_5_3_2_starts_at_the_last_segment_the_consume_queues_reach(version: str) -> None:
    cq_max = 9 * SEG + 100  # the queues end 100 bytes into segment 9
    assert recovery_start(segments(), Checkpoint(), False, cfg(version), cq_max) == 9
    assert recovery_start(segments(), Checkpoint(), False, cfg(version), 9 * SEG) == 9  # starts at or before it
    assert recovery_start(segments(), Checkpoint(), False, cfg(version), -1) == (
        0 if version == "5.3.3" else N - DEFAULT_RECOVER_MAX_NUM  # no queue at all: 5.5.0 gives up after 10
    )


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_crash_recovery_before_5_5_starts_at_the_last_segment_older_than_the_checkpoint(version: str) -> None:
    cp = Checkpoint(first_ts(7) + 3000, first_ts(9) + 3000)  # min(physic, logics) - 3 s = segment 7's first
    assert recovery_start(segments(), cp, True, cfg(version)) == 7
    assert recovery_start(segments(), Checkpoint(), True, cfg(version)) == 0  # none is: segment 0
    safe = cfg(version, messageIndexSafe=True)  # also waits for indexMsgTimestamp
    cp = Checkpoint(first_ts(7) + 3000, first_ts(9) + 3000, first_ts(4))
    assert recovery_start(segments(), cp, True, safe) == 4


def test_5_5_crash_recovery_gives_up_after_commit_log_recover_max_num_segments() -> None:
    """A 5.5.0 checkpoint holds logicsMsgTimestamp and logicsPhysicalOffset 0 until a thorough CQ flush: no
    segment matches, and the walk back stops at its commitLogRecoverMaxNum-th segment (<= 0 means 10)."""
    cp = Checkpoint(first_ts(N - 1) + 5000, 0, first_ts(N - 1))
    assert recovery_start(segments(), cp, True, cfg("5.5.0")) == N - DEFAULT_RECOVER_MAX_NUM
    assert recovery_start(segments(), cp, True, cfg("5.5.0", commitLogRecoverMaxNum=3)) == N - 3
    assert recovery_start(segments(), cp, True, cfg("5.5.0", commitLogRecoverMaxNum=0)) == N - DEFAULT_RECOVER_MAX_NUM
    assert recovery_start(segments(5), cp, True, cfg("5.5.0")) == 0
    # the timestamp rule of the releases before would start at the last segment, 3 s older than physicMsgTimestamp
    assert recovery_start(segments(), cp, True, cfg("5.3.3")) == 0


def test_5_5_crash_recovery_matches_on_logics_physical_offset_else_logics_timestamp() -> None:
    by_offset = Checkpoint(first_ts(N - 1), first_ts(2), first_ts(N - 1), logics_physical_offset=11 * SEG + 5)
    assert recovery_start(segments(), by_offset, True, cfg("5.5.0")) == 11
    by_time = Checkpoint(first_ts(N - 1), first_ts(12), first_ts(N - 1))
    assert recovery_start(segments(), by_time, True, cfg("5.5.0")) == 12
    safe = cfg("5.5.0", messageIndexSafe=True)  # the IndexService must accept it too
    assert recovery_start(segments(), dataclasses.replace(by_time, index_msg_timestamp=first_ts(10)), True, safe) == 10


def test_5_5_recovery_skips_a_segment_whose_first_record_fails_its_check() -> None:
    cp = Checkpoint(first_ts(N - 1), first_ts(12), first_ts(N - 1))
    assert recovery_start(segments(), cp, True, cfg("5.5.0"), stop_offsets=[12 * SEG]) == 11
    empty = [*segments(), SegmentFacts(f"{N * SEG:020d}", N * SEG, 0, N * SEG, 0)]  # preallocated: storeTimestamp 0
    assert recovery_start(empty, cp, True, cfg("5.5.0")) == 12


def test_next_start_truncates_at_the_first_rejected_record_it_walks_over() -> None:
    segs, end = segments(), N * SEG - 700
    cp = Checkpoint(first_ts(N - 1), first_ts(12), first_ts(N - 1))
    stops = [(3 * SEG + 40, "crc-mismatch"), (12 * SEG + 900, "length-mismatch"), (13 * SEG + 8, "crc-mismatch")]
    r = next_start(segs, stops, cp, True, cfg("5.5.0"), end)
    assert r is not None
    cut = stops[1][0]
    assert (r.crash, r.start, r.start_offset, r.truncate_at, r.stop) == (True, 12, 12 * SEG, cut, "length-mismatch")
    assert r.lost == end - (12 * SEG + 900)
    assert r.dispatch_from == 12 * SEG  # crash recovery dispatches every record it walks
    # a damaged record before the start segment is never read: nothing is cut
    r = next_start(segs, stops[:1], cp, True, cfg("5.5.0"), end)
    assert r is not None and (r.truncate_at, r.lost, r.stop) == (end, 0, None)
    # from segment 0 (4.9.7 with a zero checkpoint) the first one cuts the log
    r = next_start(segs, stops, Checkpoint(), True, cfg("4.9.7"), end)
    assert r is not None and (r.start, r.truncate_at, r.lost) == (0, stops[0][0], end - stops[0][0])
    assert next_start([], stops, cp, True, cfg("5.5.0"), 0) is None


def test_normal_recovery_dispatches_only_what_the_consume_queues_lack() -> None:
    segs, end, cq_max = segments(), N * SEG - 700, 12 * SEG + 300
    for version, start in (("5.3.3", 12), ("4.9.7", N - 3)):
        r = next_start(segs, [], Checkpoint(), False, cfg(version), end, cq_max)
        assert r is not None and (r.crash, r.start, r.truncate_at, r.lost) == (False, start, end, 0)
        assert r.dispatch_from == cq_max
    # 4.9.7's reput service starts at the queues' end even when they lag the third-last segment; 5.5.0's recovery
    # gives up its walk back at segment N - 10 and dispatches from there
    r = next_start(segs, [], Checkpoint(), False, cfg("4.9.7"), end, 2 * SEG)
    assert r is not None and r.dispatch_from == 2 * SEG
    r = next_start(segs, [], Checkpoint(), False, cfg("5.5.0"), end, 2 * SEG)
    assert r is not None and (r.start, r.dispatch_from) == (N - 10, (N - 10) * SEG)


def test_stops_follow_the_crc_settings() -> None:
    assert stops_recovery("crc-mismatch", BrokerConfig())
    assert not stops_recovery("crc-mismatch", BrokerConfig(checkCRCOnRecover=False))
    assert not stops_recovery("crc-mismatch", BrokerConfig(forceVerifyPropCRC=True))
    assert stops_recovery("crc-property-mismatch", BrokerConfig(forceVerifyPropCRC=True))
    assert stops_recovery("segment-bad-magic", BrokerConfig(checkCRCOnRecover=False))
    assert not stops_recovery("duplicate-queue-offset", BrokerConfig())


def test_crash_recovery_deletes_index_files_ending_after_index_msg_timestamp() -> None:
    cp = Checkpoint(0, 0, T0)
    assert index_deleted(True, T0 + 1, cp)
    assert not index_deleted(True, T0, cp)
    assert not index_deleted(False, T0 + 1, cp)
    assert index_deleted(True, 1, None)  # a missing checkpoint reads as zeros


def test_the_recovery_rows_a_release_range_meets() -> None:
    from storelib.broker.detection import Releases
    from storelib.broker.restart import releases_by_rules

    assert releases_by_rules(Releases.between((5, 2, 0), (5, 4, 0))) == ["5.2.0", "5.3.2"]  # a 5.3.3 store's clues
    assert releases_by_rules(Releases.between((5, 5, 0))) == ["5.5.0"]
    assert releases_by_rules(Releases.between((4, 9, 0), (5, 0, 0))) == ["4.9.0"]
    assert releases_by_rules(Releases.between((4, 9, 0))) == ["4.9.0", "5.0.0", "5.3.2", "5.5.0"]
    assert releases_by_rules(Releases((((4, 0, 0), (4, 9, 1)), ((5, 2, 0), (6, 0, 0))))) == [
        "4.0.0",
        "5.2.0",
        "5.3.2",
        "5.5.0",
    ]
