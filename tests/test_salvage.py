"""Salvage records (storelib.broker.salvage): the filler and tombstone bytes, written out field by field here as
CommitLog's record layout has them (the oracle shares no code with the encoder), and the layout of a damaged range."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from storelib.broker.resync import sound_record
from storelib.broker.salvage import TOMBSTONE_TEXT, Unit, fill, layout, min_filler
from storelib.errors import Refused

TS = 1_700_000_000_123


def _record(
    total: int, body: bytes, topic: bytes, props: bytes, qid: int, qoff: int, phys: int, sys_flag: int
) -> bytes:
    """A v1 record with IPv4 hosts 0.0.0.0:0, field by field (CommitLog's layout, MessageExtEncoder's order)."""
    return b"".join(
        [
            struct.pack(">i", total),
            bytes.fromhex("daa320a7"),  # MESSAGE_MAGIC_CODE (v1)
            struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),  # BODYCRC
            struct.pack(">i", qid),  # QUEUEID
            struct.pack(">i", 0),  # FLAG
            struct.pack(">q", qoff),  # QUEUEOFFSET
            struct.pack(">q", phys),  # PHYSICALOFFSET
            struct.pack(">i", sys_flag),  # SYSFLAG
            struct.pack(">q", TS),  # BORNTIMESTAMP
            bytes(8),  # BORNHOST 0.0.0.0, port 0
            struct.pack(">q", TS),  # STORETIMESTAMP
            bytes(8),  # STOREHOST
            struct.pack(">i", 0),  # RECONSUMETIMES
            struct.pack(">q", 0),  # PREPARED TRANSACTION OFFSET
            struct.pack(">i", len(body)),
            body,
            struct.pack(">b", len(topic)),
            topic,
            struct.pack(">h", len(props)),
            props,
        ]
    )


def test_a_filler_is_a_rollback_record_of_the_salvage_topic_that_fills_its_range_exactly() -> None:
    """91 fixed bytes + topic %SALVAGE% (9) + SALVAGED\\x011000 (13) = 113; 120 bytes take a 7-byte body of
    spaces. SYSFLAG 0xC: TRANSACTION_ROLLBACK_TYPE, which no ConsumeQueue and no IndexFile takes."""
    assert min_filler(1000) == 113
    records, data = fill(1000, 1120, [], TS)
    assert [(r.offset, r.size, r.unit) for r in records] == [(1000, 120, None)]
    assert data == _record(120, b" " * 7, b"%SALVAGE%", b"SALVAGED\x011000", 0, 0, 1000, 0xC)
    assert data[:4] == b"\x00\x00\x00\x78" and data[36:40] == b"\x00\x00\x00\x0c"


def test_a_tombstone_takes_the_lost_records_place_in_its_queue_and_its_lmq_queues() -> None:
    """The tombstone of a record the live units put at TopicA/3 queue offset 17 and %LMQ%r/0 queue offset 5: that
    queue and queue offset, the LMQ ones as the dispatch reads them, no TAGS/KEYS/UNIQ_KEY, NOT_TYPE; its size the
    units' size, the body the salvage text padded with spaces."""
    units = [Unit("TopicA", 3, 17, 5000, 300), Unit("%LMQ%r", 0, 5, 5000, 300)]
    records, data = fill(5000, 5300, units, TS)
    (r,) = records
    assert (r.unit, r.lmq) == (units[0], (units[1],))
    props = b"INNER_MULTI_DISPATCH\x01%LMQ%r\x02INNER_MULTI_QUEUE_OFFSET\x015\x02SALVAGED\x015000"
    body_length = 300 - 91 - len(b"TopicA") - len(props)
    body = TOMBSTONE_TEXT[:body_length].ljust(body_length, b" ")
    assert data == _record(300, body, b"TopicA", props, 3, 17, 5000, 0)


def test_the_records_of_a_range_frame_back_to_back_and_pass_the_scan_past_damage_check() -> None:
    """A filler before, between and after two tombstones: each record starts where the previous ends, its
    PHYSICALOFFSET its own offset, and the check the scan past damage makes of a record start passes."""
    units = [Unit("T", 0, 1, 10_200, 400), Unit("T", 1, 9, 10_600, 250)]
    records, data = fill(10_000, 11_000, units, TS)
    assert [(r.offset, r.size, r.unit is None) for r in records] == [
        (10_000, 200, True),
        (10_200, 400, False),
        (10_600, 250, False),
        (10_850, 150, True),
    ]
    a = np.frombuffer(data, dtype=np.uint8)
    for r in records:
        q = r.offset - 10_000
        assert struct.unpack_from(">i", data, q)[0] == r.size
        assert struct.unpack_from(">q", data, q + 28)[0] == r.offset
        assert sound_record(a, q, TS)


@pytest.mark.parametrize(
    ("units", "said"),
    [
        ([Unit("T", 0, 1, 10_050, 100)], "fewer than a filler record takes"),  # a 50-byte gap before it
        ([Unit("T", 0, 1, 10_000, 900), Unit("T", 1, 2, 10_500, 100)], "overlaps another"),
        ([Unit("T", 0, 1, 10_900, 200)], "leaves the damaged range"),
        ([Unit("%LMQ%a", 0, 1, 10_000, 200)], "not one record's own queue"),
        ([Unit("rmq_sys_wheel_timer", 0, 1, 10_000, 1000)], "the broker's own state"),
        ([Unit("RMQ_SYS_TRANS_HALF_TOPIC", 0, 1, 10_000, 1000)], "the broker's own state"),
    ],
)
def test_a_range_that_cannot_be_filled_is_refused_and_said(units: list[Unit], said: str) -> None:
    with pytest.raises(Refused, match=said):
        layout(10_000, 11_000, units)


def test_a_tombstone_smaller_than_its_fields_is_refused() -> None:
    with pytest.raises(Refused, match="too few for a tombstone of T/0"):
        fill(10_000, 10_100, [Unit("T", 0, 1, 10_000, 100)], TS)


@pytest.mark.parametrize(
    ("kind", "hinted"), [("damaged-records", True), ("crc-mismatch", True), ("crc-property-mismatch", True)]
)
def test_the_plan_points_damaged_records_to_salvage(kind: str, hinted: bool) -> None:
    """recover's plan leaves damaged records alone and names the option that rewrites them."""
    from storelib.findings import finding
    from storelib.reports.plan import recover_plan

    f = finding(kind, "commitlog/00000000000000000000", "damage", commitlog_offset=10)
    (note,) = recover_plan([f], [], {}, truncate=False).notes
    assert ("recover --salvage" in note) == hinted and note.startswith(f"{kind} commitlog/")


@pytest.mark.parametrize(
    ("settings", "file", "said"),
    [
        ({"forceVerifyPropCRC": True}, "commitlog/00000000000000000000", "forceVerifyPropCRC"),
        ({"enableDLegerCommitLog": True}, "commitlog/00000000000000000000", "DLedger"),
        ({}, "dledger-n0/data/00000000000000000000", "DLedger"),
        ({"storeType": "defaultRocksDB"}, "commitlog/00000000000000000000", "RocksDB"),
    ],
)
def test_salvage_refuses_the_stores_it_was_not_proven_on(settings: dict, file: str, said: str) -> None:
    import dataclasses

    from jobs.pipeline.salvage_flow import check_salvageable
    from storelib.broker.config import BrokerConfig
    from storelib.findings import finding

    cfg = dataclasses.replace(BrokerConfig(), **settings)
    with pytest.raises(Refused, match=said):
        check_salvageable(cfg, [finding("damaged-records", file, "damage", commitlog_offset=0, count=200)])
    check_salvageable(BrokerConfig(), [finding("damaged-records", "commitlog/00000000000000000000", "damage")])


def test_a_range_to_the_segment_s_end_ends_with_a_blank_of_exactly_the_bytes_left() -> None:
    """Damage that runs to its segment's end: tombstones where units point, a filler between, and after the last
    tombstone the end-of-file BLANK the broker writes when a record does not fit (TOTALSIZE the bytes left,
    BLANK_MAGIC_CODE, zeros); no BLANK when the range stops before the segment's end."""
    units = [Unit("T", 0, 4, 65_000, 200), Unit("T", 2, 9, 65_400, 120)]
    records, data = fill(64_800, 65_536, units, TS, segment_end=True)
    assert [(r.offset, r.size, r.written) for r in records] == [
        (64_800, 200, "filler"),
        (65_000, 200, "tombstone"),
        (65_200, 200, "filler"),
        (65_400, 120, "tombstone"),
        (65_520, 16, "blank"),
    ]
    assert len(data) == 736 and data[-16:] == struct.pack(">ii", 16, -875286124) + bytes(8)
    assert [r.written for r in layout(64_800, 65_700, units)][-1] == "filler"


@pytest.mark.parametrize("left", [0, 7])
def test_fewer_bytes_after_the_last_unit_than_a_blank_takes_are_refused(left: int) -> None:
    """The broker appends a record only with 8 bytes left after it: fewer left after a unit is not its segment."""
    with pytest.raises(Refused, match="fewer than the broker leaves after its last record"):
        layout(65_000, 65_536, [Unit("T", 0, 4, 65_000, 536 - left)], segment_end=True)


def test_a_record_failing_both_its_crcs_is_one_range_to_salvage() -> None:
    """A flipped body byte in a store with ``enabledAppendPropCRC`` fails BODYCRC and ``__CRC32#``: two findings of
    one record, salvaged once; a record failing only its ``__CRC32#`` is salvaged as a BODYCRC mismatch is."""
    from types import SimpleNamespace

    from jobs.pipeline.salvage_flow import holes
    from storelib.findings import finding

    cl = "commitlog/00000000000000000000"
    found = [
        finding("crc-mismatch", cl, "body", commitlog_offset=700),
        finding("crc-property-mismatch", cl, "property", commitlog_offset=700),
        finding("crc-property-mismatch", cl, "property", commitlog_offset=900),
        finding("damaged-records", cl, "zeros", commitlog_offset=1200, count=300),
    ]
    got = holes(SimpleNamespace(findings=found))  # type: ignore[arg-type]
    assert [(f.kind, f.commitlog_offset) for f in got] == [
        ("crc-mismatch", 700),
        ("crc-property-mismatch", 900),
        ("damaged-records", 1200),
    ]


def test_a_record_put_in_a_queue_by_the_audit_is_salvaged_only_where_that_queue_s_live_unit_points_at_it() -> None:
    """``queue-header-contradicted`` puts the record at T/2 queue offset 5: the live unit written when it was
    appended must say so, else (a gap in damaged bytes, a sound record taken for it) nothing is salvaged."""
    from jobs.pipeline.salvage_flow import check_record_units
    from storelib.findings import finding

    where = {"topic": "T", "queue_id": 2, "queue_offset": 5, "commitlog_offset": 10_000}
    f = finding("queue-header-contradicted", "commitlog/00000000000000000000", "h", **where)
    check_record_units(f, {("T", 2)}, [Unit("T", 2, 5, 10_000, 300)])
    with pytest.raises(Refused, match="the live unit of T/2 queue offset 5 does not point at the record at 10000"):
        check_record_units(f, {("T", 2), ("U", 0)}, [Unit("U", 0, 7, 10_000, 300)])
    with pytest.raises(Refused, match="no live unit"):
        check_record_units(f, {("T", 2)}, [])
