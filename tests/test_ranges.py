"""A segment parsed in byte ranges (storelib.broker.segments.Piece, merge_pieces) gives exactly what its parse whole
gives: the same records, IndexFile entries and summary (ends, damage, counts, fingerprint), or, when the ranges do not
meet, None, and the whole parse decides. Property tests over generated segments cut at random points."""

from __future__ import annotations

import dataclasses
import itertools
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from storelib.broker.config import BrokerConfig
from storelib.broker.segments import Piece, PieceSummary, Segment, SegmentSummary, merge_pieces, plan_parse_tasks
from storelib.formats.scanner import find_record_start
from tests.builders import encode_segment, msg
from udfs.parse import cq_units_path, index_scratch_path, parse_piece, summary_path
from udfs.schema import INDEX_ENTRY_DTYPE

CFG = BrokerConfig(mappedFileSizeCommitLog=1 << 16)
T0 = 1_700_000_000_000
BASE = 3 << 16  # the segment's commitlog offset: not 0, so PHYSICALOFFSET != file position
DAMAGE = ("crc", "length", "magic", "physical-offset")
HOSTS = {"born_host": "10.0.0.1:1234", "store_host": "10.0.0.2:10911"}  # IPv4 hosts of ``messages``


@st.composite
def messages(draw: st.DrawFn) -> list:
    """Messages of every shape the scanner reads: v1 and v2 topics, IPv4 and IPv6 hosts, transactions, keys."""
    out = []
    for i in range(draw(st.integers(1, 40))):
        long_topic = draw(st.booleans()) and draw(st.booleans())
        topic = ("T" * 130 if long_topic else "Orders") + str(draw(st.integers(0, 2)))
        props = {"UNIQ_KEY": f"U{i}", "KEYS": draw(st.sampled_from(["", "k1", "k1 k2", "a  b "]))}
        if draw(st.booleans()):
            props["TAGS"] = draw(st.sampled_from(["x", "客户"]))
        v6 = draw(st.booleans()) and draw(st.booleans())
        m = msg(
            topic,
            props,
            body=b"b" * draw(st.integers(0, 300)),
            queue_id=draw(st.integers(0, 2)),
            queue_offset=i,
            sys_flag=draw(st.sampled_from([0, 0, 0, 0x4, 0x8, 0xC])),
            store_timestamp=T0 + 10 * i,
            v2=long_topic,
            born_host="fd00::1:1234" if v6 else HOSTS["born_host"],
            store_host="fd00::2:10911" if v6 and draw(st.booleans()) else HOSTS["store_host"],
        )
        out.append(m)
    return out


@st.composite
def segments(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A segment's bytes: records, then zeros, a BLANK, a torn record or nothing (records to the very end), with
    some records damaged; and whether ranges may fail to meet on it (a bad magic stops the walk before records, a
    wrong PHYSICALOFFSET or a torn header cannot start a range)."""
    msgs = draw(messages())
    records, offsets = encode_segment(msgs, base=BASE)
    data = bytearray(records)
    tail = draw(st.sampled_from(["zeros", "blank", "torn", "eof"]))
    size = len(data) if tail == "eof" else len(data) + draw(st.integers(8, 3000))
    if tail == "blank":
        data += struct.pack(">ii", size - len(data), -875286124)
    elif tail == "torn":  # the first bytes of one more record, then the preallocated zeros
        more, _ = encode_segment(msgs[:1], base=BASE + len(data))
        data += more[: draw(st.integers(8, len(more) - 1))]
    data = data.ljust(size, b"\0")[:size]
    risky = tail == "torn"
    for i in draw(st.lists(st.integers(0, len(offsets) - 1), max_size=3, unique=True)):
        at = offsets[i] - BASE
        kind = draw(st.sampled_from(DAMAGE))
        risky |= kind in ("magic", "physical-offset")
        if kind == "crc":
            data[at + 8] ^= 0x01
        elif kind == "length":  # BODYLENGTH one more: the fields no longer add up to TOTALSIZE
            body_at = at + 84 + (12 if data[at + 39] & 0x10 else 0) + (12 if data[at + 39] & 0x20 else 0)
            body = struct.unpack_from(">i", data, body_at)[0]
            struct.pack_into(">i", data, body_at, body + 1)
        elif kind == "magic":  # the walk stops here; records follow
            struct.pack_into(">i", data, at + 4, 0x12345678)
        else:  # a record that does not know where it is: no range can start at it
            struct.pack_into(">q", data, at + 28, 7)
    return bytes(data), risky


def write(tmp: Path, data: bytes) -> Segment:
    path = tmp / "commitlog" / f"{BASE:020d}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Segment(str(path), path.name, BASE, len(data))


@dataclasses.dataclass
class Parsed:
    rows: pa.Table
    entries: np.ndarray
    summaries: list[PieceSummary]


def parse(pieces: list[Piece], scratch: Path, mode: str) -> Parsed:
    batches = [b for p in pieces for b in parse_piece(p, CFG, mode, str(scratch))]
    entries = [np.fromfile(index_scratch_path(str(scratch), p.name), dtype=INDEX_ENTRY_DTYPE) for p in pieces]
    summaries = [PieceSummary.from_json(Path(summary_path(str(scratch), p.name)).read_text()) for p in pieces]
    rows = pa.Table.from_batches(batches) if batches else pa.table({})
    return Parsed(rows, np.concatenate(entries), summaries)


def cut(seg: Segment, points: list[int]) -> list[Piece]:
    bounds = [0, *sorted({p for p in points if 0 < p < seg.size}), seg.size]
    n = len(bounds) - 1
    return [Piece(seg, lo, hi, k, n) for k, (lo, hi) in enumerate(itertools.pairwise(bounds))]


def units(rows: pa.Table, scratch: Path) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """ConsumeQueue units as (queue offset, 20-byte unit) per queue, read from the pieces' scratch files, in queue
    offset order, then commitlog order (a unit starts with its record's offset): runs cut at other piece boundaries
    compare equal. The order of the rows is no part of what a parse gives: the writers sort the runs by queue offset
    (jobs.pipeline.consume_queues), and where two records claim one queue offset the runs holding them come in either
    order (whole or in ranges), a duplicate-queue-offset finding either way."""
    out: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
    for run in rows.to_pylist():
        data = Path(cq_units_path(str(scratch), run["piece"])).read_bytes()
        at = run["units_at"]
        out.setdefault((run["topic"], run["queue_id"]), []).extend(
            (run["queue_offset"] + i, data[at + 20 * i : at + 20 * (i + 1)]) for i in range(run["count"])
        )
    return {queue: sorted(found) for queue, found in out.items()}


def torn_copy_of_record_0() -> tuple[bytes, bool]:
    """A stored failing example of ``segments``: 16 records of one queue, then a copy of record 0 torn in its
    properties (the bytes to its end are zeros, so it frames): queue offset 0 twice. Parsed whole, the runs of that
    queue are [0] and [0 (the torn copy), 1 .. 15]; in ranges cut at 116, [0, 1], then [0 (the torn copy)] and
    [2 .. 15]: the same units in another order."""
    msgs = [
        msg("Orders0", {"UNIQ_KEY": f"U{i}", "KEYS": ""}, queue_offset=i, store_timestamp=T0 + 10 * i, **HOSTS)
        for i in range(16)
    ]
    records, _ = encode_segment(msgs, base=BASE)
    torn, _ = encode_segment(msgs[:1], base=BASE + len(records))
    return (records + torn[:98]).ljust(len(records) + len(torn), b"\0"), True


def without_rss(s: SegmentSummary) -> SegmentSummary:
    return dataclasses.replace(s, worker_peak_rss=0)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(segments(), st.lists(st.integers(1, 20_000), max_size=6), st.sampled_from(["dispatch", "messages"]))
@example(torn_copy_of_record_0(), [116], "dispatch")
@example(torn_copy_of_record_0(), [116], "messages")
def test_ranges_give_the_whole_parse_or_say_they_do_not_meet(tmp_path_factory, segment, points, mode) -> None:
    data, risky = segment
    tmp = tmp_path_factory.mktemp("ranges")
    seg = write(tmp, data)
    whole = parse([Piece(seg, 0, seg.size)], tmp / "whole", mode)
    (serial,) = whole.summaries
    pieces = cut(seg, [p % seg.size for p in points])
    ranged = parse(pieces, tmp / "ranged", mode)
    merged = merge_pieces(seg, ranged.summaries)
    if merged is None:  # the whole parse decides
        assert risky, (serial.summary, [(p.start, p.handoff) for p in ranged.summaries])
        return
    assert without_rss(merged) == without_rss(serial.summary)
    assert ranged.entries.tobytes() == whole.entries.tobytes()
    if mode == "dispatch":
        assert units(ranged.rows, tmp / "ranged") == units(whole.rows, tmp / "whole")
    else:
        assert ranged.rows.equals(whole.rows)


@pytest.mark.parametrize("tail", ["zeros", "blank"])
def test_a_clean_segment_cut_anywhere_meets(tmp_path: Path, tail: str) -> None:
    msgs = [
        msg("Orders", {"KEYS": f"k{i}", "UNIQ_KEY": f"U{i}"}, body=b"x" * (i % 97), queue_offset=i) for i in range(300)
    ]
    msgs = [dataclasses.replace(m, store_timestamp=T0 + i) for i, m in enumerate(msgs)]
    data, _ = encode_segment(msgs, base=BASE, size=1 << 16, blank=tail == "blank")
    seg = write(tmp_path, data)
    whole = parse([Piece(seg, 0, seg.size)], tmp_path / "whole", "dispatch")
    for n, at in enumerate(range(1, 1 << 16, 4093)):
        pieces = cut(seg, [at, at + 7000, 50_000])
        ranged = parse(pieces, tmp_path / f"ranged-{n}", "dispatch")
        merged = merge_pieces(seg, ranged.summaries)
        assert merged is not None and without_rss(merged) == without_rss(whole.summaries[0].summary)
        assert ranged.entries.tobytes() == whole.entries.tobytes()


def test_find_record_start_is_the_next_record_and_none_in_zeros() -> None:
    msgs = [msg("Orders", {"UNIQ_KEY": f"U{i}"}, body=b"\xda\xa3\x20\xa7" * 20) for i in range(20)]
    data, offsets = encode_segment(msgs, base=BASE, size=8192)

    def read_at(n: int, at: int) -> bytes:
        return data[at : at + n]

    for at in range(1, offsets[-1] - BASE + 1, 37):
        assert find_record_start(read_at, BASE, len(data), at) == min(o - BASE for o in offsets if o - BASE >= at)
    assert find_record_start(read_at, BASE, len(data), offsets[-1] - BASE + 1) is None


def test_find_record_start_reads_no_hole(tmp_path: Path) -> None:
    """Records 1 MiB into a sparse file: from anywhere in the hole before them, the first of them, read from 3 bytes
    before the data; from the hole after them, None with nothing read."""
    from udfs.fs import LocalExtents

    at = 1 << 20
    msgs = [msg("Orders", {"UNIQ_KEY": f"U{i}"}, body=b"\0" * 30) for i in range(20)]
    data, offsets = encode_segment(msgs, base=BASE + at)
    path = tmp_path / "segment"
    with path.open("wb") as f:
        f.seek(at)
        f.write(data)
        f.truncate(4 << 20)
    reads: list[tuple[int, int]] = []

    def read_at(n: int, pos: int) -> bytes:
        reads.append((pos, n))
        with path.open("rb") as f:
            f.seek(pos)
            return f.read(n)

    extents = LocalExtents(str(path))
    for start in (1, 4096, at - 4):
        assert find_record_start(read_at, BASE, 4 << 20, start, extents=extents) == offsets[0] - BASE
        assert reads.pop()[0] == at - 3
    assert find_record_start(read_at, BASE, 4 << 20, at + (1 << 20), extents=extents) is None
    assert reads == []


def test_a_big_commitlog_segment_is_cut_into_ranges_a_dledger_file_or_a_whole_one_is_not() -> None:
    gib = 1 << 30
    segs = [Segment(f"file:///s/commitlog/{k * gib:020d}", f"{k * gib:020d}", k * gib, gib) for k in range(2)]
    tasks = plan_parse_tasks(segs, 256 << 20, whole={segs[1].name})
    assert [[(p.segment.start, p.lo, p.hi, p.number, p.count) for p in t] for t in tasks] == [
        *([(0, k << 28, (k + 1) << 28, k, 4)] for k in range(4)),
        [(gib, 0, gib, 0, 1)],
    ]
    assert [p.name for t in tasks for p in t] == [f"{0:020d}.{k:03d}" for k in range(4)] + [segs[1].name]
    dledger = Segment(f"file:///s/dledger-n0/data/{0:020d}", f"{0:020d}", 0, gib, "dledger-n0/data")
    assert [[(p.lo, p.hi, p.count) for p in t] for t in plan_parse_tasks([dledger], 256 << 20)] == [[(0, gib, 1)]]


def test_unreadable_ranges_do_not_meet_and_the_whole_parse_reports_it(tmp_path: Path) -> None:
    seg = Segment(str(tmp_path / "commitlog" / f"{BASE:020d}"), f"{BASE:020d}", BASE, 1 << 16)  # no such file
    ranged = parse(cut(seg, [20_000, 40_000]), tmp_path / "ranged", "dispatch")
    assert merge_pieces(seg, ranged.summaries) is None
    whole = parse([Piece(seg, 0, seg.size)], tmp_path / "whole", "dispatch")
    merged = merge_pieces(seg, whole.summaries)
    assert merged is not None and (merged.end_reason, merged.messages) == ("unreadable", 0)
