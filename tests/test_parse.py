"""udfs.parse without Spark: parse_segment over small segments on disk, judged by tests.reference."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from storelib.broker.config import BrokerConfig
from storelib.broker.rule_choice import RuleInputs
from storelib.broker.segments import Piece, Segment, SegmentSummary
from tests.builders import encode_segment, msg
from tests.reference import delay_table_ms, index_key_hash, index_keys, tags_code, walk_commitlog
from udfs.parse import coalesce, cq_units_path, index_scratch_path, parse_segment, segment_parser, summary_path
from udfs.schema import INDEX_ENTRY_DTYPE

SEGMENT_SIZE = 4096
CFG = BrokerConfig(mappedFileSizeCommitLog=SEGMENT_SIZE)
T0 = 1_700_000_000_000
SCHEDULE = "SCHEDULE_TOPIC_XXXX"
#: every dispatch case: two runs in Orders/1 (queue offset 3 is in the next segment), a PREPARED record
#: (indexed, no ConsumeQueue entry), a COMMIT, a ROLLBACK (neither), a delay record (deliver time)
MESSAGES = [
    msg("Orders", {"TAGS": "paid", "KEYS": "k1 k2", "UNIQ_KEY": "U1"}, queue_id=1, queue_offset=0),
    msg("Orders", {"KEYS": "k3  k4 "}, queue_id=1, queue_offset=1),
    msg("Orders", {"TAGS": "x"}, queue_id=0, queue_offset=5),
    msg("Orders", {"UNIQ_KEY": "P"}, queue_id=1, sys_flag=0x4),
    msg(SCHEDULE, {"DELAY": "3", "TAGS": "t", "KEYS": "d"}, queue_id=2, queue_offset=0),
    msg("Orders", {"KEYS": "k5", "TAGS": "客户"}, queue_id=1, queue_offset=2, sys_flag=0x8),
    msg("Orders", {"KEYS": "k6"}, queue_id=1, queue_offset=4),
    msg("Orders", {"KEYS": "gone"}, queue_id=1, sys_flag=0xC),  # last: the last ConsumeQueue record is not
]
MESSAGES = [dataclasses.replace(m, store_timestamp=T0 + 10 * i) for i, m in enumerate(MESSAGES)]


def write_segment(store: Path, messages: list, start: int = 0, blank: bool = False) -> Segment:
    """``messages`` as the commitlog segment at ``start`` of ``store``, then zeros (or a BLANK: ``blank``)."""
    data, _ = encode_segment(messages, base=start, size=SEGMENT_SIZE, blank=blank)
    path = store / "commitlog" / f"{start:020d}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Segment(str(path), path.name, start, SEGMENT_SIZE)


def parse(seg: Segment, mode: str, scratch: Path) -> tuple[pa.Table, SegmentSummary, np.ndarray]:
    """The rows of one parse, and the summary and IndexFile entries it left in ``scratch``."""
    batches = list(parse_segment(seg, CFG, mode, str(scratch)))
    table = pa.Table.from_batches(batches) if batches else pa.table({})
    summary = SegmentSummary.from_json(Path(summary_path(str(scratch), seg.name)).read_text())
    entries = np.fromfile(index_scratch_path(str(scratch), seg.name), dtype=INDEX_ENTRY_DTYPE)
    return table, summary, entries


@pytest.fixture
def segment(tmp_path: Path) -> Segment:
    return write_segment(tmp_path / "store", MESSAGES)


def reference_units(store: Path) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """(queue offset, 20-byte unit) of every ConsumeQueue-dispatched record, per queue, in commitlog order."""
    delays = delay_table_ms(CFG.messageDelayLevel)
    out: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
    for r in walk_commitlog(store / "commitlog"):
        if r.sys_flag & 0xC in (0, 0x8):
            unit = r.offset.to_bytes(8, "big") + r.total_size.to_bytes(4, "big")
            unit += tags_code(r, delays).to_bytes(8, "big", signed=True)
            out.setdefault((r.topic, r.queue_id), []).append((r.queue_offset, unit))
    return out


def test_cq_runs_are_the_reference_units(segment: Segment, tmp_path: Path) -> None:
    runs, _, _ = parse(segment, "dispatch", tmp_path / "scratch")
    data = Path(cq_units_path(str(tmp_path / "scratch"), segment.name)).read_bytes()
    got = {}
    assert sum(run["count"] for run in runs.to_pylist()) * 20 == len(data)
    for run in runs.to_pylist():
        assert (run["segment"], run["piece"]) == (segment.name, segment.name)
        at = run["units_at"]
        units = [data[at + 20 * i : at + 20 * (i + 1)] for i in range(run["count"])]
        got.setdefault((run["topic"], run["queue_id"]), []).extend(
            (run["queue_offset"] + i, u) for i, u in enumerate(units)
        )
    assert got == reference_units(tmp_path / "store")
    # a run is consecutive queue offsets of one queue: Orders/1 holds 0, 1, 2 (the COMMIT) and then 4
    orders_1 = [
        (r["queue_offset"], r["count"]) for r in runs.to_pylist() if (r["topic"], r["queue_id"]) == ("Orders", 1)
    ]
    assert orders_1 == [(0, 3), (4, 1)]


def expected_entries(store: Path) -> list[tuple[int, int, int]]:
    """(keyHash, commitlog offset, store time) of every IndexFile key, in put order (ROLLBACK: none)."""
    return [
        (index_key_hash(key), r.offset, r.store_timestamp)
        for r in walk_commitlog(store / "commitlog")
        if r.sys_flag & 0xC != 0xC
        for key in index_keys(r.topic, r.properties.get("UNIQ_KEY"), r.properties.get("KEYS"))
    ]


def test_summary_and_index_entries_left_in_scratch(segment: Segment, tmp_path: Path) -> None:
    _, summary, entries = parse(segment, "dispatch", tmp_path / "scratch")
    records = list(walk_commitlog(tmp_path / "store" / "commitlog"))
    last_cq = [r for r in records if r.sys_flag & 0xC in (0, 0x8)][-1]
    assert entries.tolist() == expected_entries(tmp_path / "store")
    assert len(entries) == 9  # U1 k1 k2 | k3 k4 | P | d | k5 | k6: the empty KEYS tokens are not keys
    assert dataclasses.replace(summary, worker_peak_rss=0, fingerprint="") == SegmentSummary(
        segment=segment.name,
        end_reason="zero-tail",
        end_offset=records[-1].offset + records[-1].total_size,
        detail=summary.detail,
        messages=len(MESSAGES),
        index_entries=9,
        first_store_timestamp=T0,
        last_store_timestamp=T0 + 70,
        last_cq_store_timestamp=last_cq.store_timestamp,
        last_message_offset=records[-1].offset,
        worker_peak_rss=0,
        fingerprint="",
        damage=(),
        rule_inputs=RuleInputs(
            tagged_index_records=sum(1 for r in records if r.sys_flag & 0xC != 0xC and r.properties.get("TAGS")),
            index_records=sum(1 for r in records if r.sys_flag & 0xC != 0xC),
        ),
    )
    assert summary.worker_peak_rss > 10 << 20 and summary.fingerprint.endswith(f":{len(MESSAGES)}")


def test_a_task_that_runs_twice_leaves_the_same_files(segment: Segment, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    first_rows, first, _ = parse(segment, "dispatch", scratch)
    files = {p.name: p.read_bytes() for p in scratch.iterdir()}
    again_rows, again, _ = parse(segment, "dispatch", scratch)
    assert {p.name: p.read_bytes() for p in scratch.iterdir() if not p.name.startswith("summary-")} == {
        name: data for name, data in files.items() if not name.startswith("summary-")
    }
    assert (
        sorted(p.name for p in scratch.iterdir() if not p.name.startswith("timer-records-"))  # (5.x timers, delays)
        == sorted(name for name in files if not name.startswith("timer-records-"))
        == [
            f"cq-units-{segment.name}",
            f"index-entries-{segment.name}",
            f"summary-{segment.name}.json",
        ]
    )
    assert dataclasses.replace(again, worker_peak_rss=0) == dataclasses.replace(first, worker_peak_rss=0)
    assert again_rows.equals(first_rows)


def test_message_rows_carry_the_dispatch_of_each_record(segment: Segment, tmp_path: Path) -> None:
    rows, _, _ = parse(segment, "messages", tmp_path / "scratch")
    delays = delay_table_ms(CFG.messageDelayLevel)
    expected = []
    for r in walk_commitlog(tmp_path / "store" / "commitlog"):
        p, tran = r.properties, r.sys_flag & 0xC
        keys = index_keys(r.topic, p.get("UNIQ_KEY"), p.get("KEYS")) if tran != 0xC else []
        expected.append(
            {
                "segment": segment.name,
                "commitlog_offset": r.offset,
                "size": r.total_size,
                "topic": r.topic,
                "queue_id": r.queue_id,
                "queue_offset": r.queue_offset,
                "sys_flag": r.sys_flag,
                "tags_code": tags_code(r, delays),
                "tags": p.get("TAGS"),
                "keys": p.get("KEYS"),
                "uniq_key": p.get("UNIQ_KEY"),
                "store_timestamp": r.store_timestamp,
                "to_consume_queue": tran in (0, 0x8),
                "crc_ok": True,
                "key_hashes": [index_key_hash(k) for k in keys],
                "body_crc": r.body_crc,
            }
        )
    assert rows.drop_columns(["born_timestamp"]).to_pylist() == expected


def test_damage_is_in_the_summary_and_the_record_still_dispatched(tmp_path: Path) -> None:
    messages = [
        msg("Orders", {"KEYS": "a"}, body=b"payload", body_crc=12345, store_timestamp=T0),
        msg(SCHEDULE, {"DELAY": "soon"}, queue_id=1, store_timestamp=T0 + 1),
    ]
    seg = write_segment(tmp_path / "store", messages)
    runs, summary, entries = parse(seg, "dispatch", tmp_path / "scratch")
    offsets = [r.offset for r in walk_commitlog(tmp_path / "store" / "commitlog")]
    assert [(d.kind, d.commitlog_offset) for d in summary.damage] == [
        ("crc-mismatch", offsets[0]),
        ("bad-delay-level", offsets[1]),
    ]
    assert "'soon'" in summary.damage[1].detail
    assert runs.num_rows == 2 and entries["commitlog_offset"].tolist() == [offsets[0]]


def test_an_unreadable_segment_ends_there_without_failing_the_task(tmp_path: Path) -> None:
    seg = Segment(str(tmp_path / "store" / "commitlog" / f"{0:020d}"), f"{0:020d}", 0, SEGMENT_SIZE)
    runs, summary, entries = parse(seg, "dispatch", tmp_path / "scratch")
    assert runs.num_rows == 0 and len(entries) == 0
    assert (summary.end_reason, summary.end_offset, summary.messages) == ("unreadable", 0, 0)
    assert summary.detail.startswith(f"cannot read {seg.uri}: ")


def test_segment_parser_parses_each_task_segment_in_turn(tmp_path: Path) -> None:
    """The mapInArrow function: task 1 of the plan is two consecutive segments (task 0 is not this task's)."""
    store = tmp_path / "store"
    first = write_segment(store, MESSAGES[:4], blank=True)
    second = write_segment(store, MESSAGES[4:], start=SEGMENT_SIZE)
    elsewhere = Segment(str(tmp_path / "none"), f"{0:020d}", 0, SEGMENT_SIZE)
    batch = pa.RecordBatch.from_pydict({"id": pa.array([1], pa.int64())})
    tasks = [[Piece(elsewhere, 0, SEGMENT_SIZE)], [Piece(first, 0, SEGMENT_SIZE), Piece(second, 0, SEGMENT_SIZE)]]
    parser = segment_parser(CFG, "dispatch", str(tmp_path / "scratch"), tasks)
    runs = pa.Table.from_batches(parser(iter([batch])))
    assert sorted(set(runs.column("segment").to_pylist())) == [first.name, second.name]
    assert sum(runs.column("count").to_pylist()) == sum(len(u) for u in reference_units(store).values())
    kinds = ("cq-units-{}", "index-entries-{}", "summary-{}.json")
    assert sorted(p.name for p in (tmp_path / "scratch").iterdir() if not p.name.startswith("timer-")) == sorted(
        kind.format(s.name) for kind in kinds for s in (first, second)
    )
    with pytest.raises(ValueError, match="mode must be one of"):
        segment_parser(CFG, "rows", str(tmp_path), [])


@given(st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40), max_size=12), st.integers(1, 400))
def test_coalesce_keeps_the_rows_in_order_in_fewer_batches(sizes: list[list[int]], max_bytes: int) -> None:
    """Joined batches hold the same rows in the same order; a batch is only closed once it holds max_bytes, so
    every batch but the last holds at least that much and none holds more than max_bytes plus one input batch."""
    batches = [pa.RecordBatch.from_pydict({"v": pa.array(v, pa.int64())}) for v in sizes]
    out = list(coalesce(iter(batches), max_bytes))
    assert [x for b in out for x in b.column("v").to_pylist()] == [x for v in sizes for x in v]
    assert all(b.nbytes >= max_bytes for b in out[:-1])
    assert all(b.nbytes < max_bytes + 8 * 40 for b in out)
    assert bool(out) == bool(batches)
