"""ConsumeQueue: 20-byte units, file placement, pre-blank units, and the streaming file builder."""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storelib.formats import batchcq
from storelib.formats.consumequeue import (
    CONSUME_QUEUE,
    LooseEnds,
    Misplaced,
    QueueFiles,
    QueueFinding,
    build_queue_files,
    decode_units,
    encode_units,
    file_start,
    is_pre_blank,
    loose_ends,
    misplaced,
    strays,
)
from tests.roundtrip import assert_roundtrip

UNIT = bytes.fromhex(
    "0000000000000400"  # commitlog offset 1024
    "0000007a"  # size 122
    "ffffffffc847df78"  # tagsCode: hashCode("refund") = -934813832, sign-extended
)
PRE_BLANK = bytes.fromhex("0000000000000000 7fffffff 0000000000000000")  # offset 0, Integer.MAX_VALUE, tagsCode 0
ZERO_UNIT = bytes(20)


def unit(offset: int, size: int, tags_code: int) -> bytes:
    return struct.pack(">qiq", offset, size, tags_code)


def rows(data: bytes) -> list[tuple[int, int, int]]:
    return [tuple(int(x) for x in u) for u in decode_units(data)]


def encode_rows(units: list[tuple[int, int, int]]) -> bytes:
    a = np.array(units, dtype=np.int64).reshape(-1, 3)
    return encode_units(a[:, 0], a[:, 1].astype(np.int32), a[:, 2])


def test_hand_built_units() -> None:
    assert encode_units(np.array([1024]), np.array([122], dtype=np.int32), np.array([-934813832])) == UNIT
    assert rows(UNIT + PRE_BLANK + ZERO_UNIT) == [(1024, 122, -934813832), (0, 0x7FFFFFFF, 0), (0, 0, 0)]
    assert rows(UNIT + UNIT[:19]) == [(1024, 122, -934813832)]  # a partial unit is ignored
    assert decode_units(b"").shape == (0,)


int64s = st.integers(-(2**63), 2**63 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)


@given(st.lists(st.tuples(int64s, int32s, int64s), max_size=30))
def test_units_roundtrip(units: list[tuple[int, int, int]]) -> None:
    assert_roundtrip(encode_rows, rows, units)


@pytest.mark.parametrize(
    ("queue_offset", "file_size", "start"),
    [(0, 8000, 0), (399, 8000, 0), (400, 8000, 8000), (1613, 8000, 32000), (300_000, 6_000_000, 6_000_000)],
)
def test_file_start(queue_offset: int, file_size: int, start: int) -> None:
    assert file_start(queue_offset, file_size) == start


def test_file_name_rule() -> None:
    """Unit n of a queue is at byte n * unit size, in the file named by its start byte (hand-checked)."""
    cq, bcq = CONSUME_QUEUE, batchcq.BATCH_CONSUME_QUEUE
    assert cq.first_unit("00000000000000032000") == 1600
    assert cq.units_per_file(8000) == 400
    assert cq.file_name(1613, 8000) == "00000000000000032000"
    assert cq.file_offset(1613, 8000) == 260
    assert (cq.whole_units(8010), cq.partial_unit(8010)) == (400, 10)
    assert bcq.first_unit("00000000000000004600") == 100
    assert bcq.file_name(250, 4600) == "00000000000000009200"
    assert bcq.file_offset(250, 4600) == 2300


def test_valid_prefix_is_the_recover_rule() -> None:
    valid_prefix = CONSUME_QUEUE.valid_prefix
    data = UNIT + PRE_BLANK + unit(5, 1, 0) + unit(-1, 5, 0) + UNIT
    assert valid_prefix(decode_units(data)) == 3  # offset < 0 ends the queue
    assert valid_prefix(decode_units(UNIT + unit(5, 0, 9) + UNIT)) == 1  # size 0 ends it
    assert valid_prefix(decode_units(UNIT + unit(5, -3, 9))) == 1
    assert valid_prefix(decode_units(UNIT + ZERO_UNIT + UNIT)) == 1
    assert valid_prefix(decode_units(UNIT * 3)) == 3


def test_pre_blank_is_the_unit_fill_pre_blank_writes() -> None:
    units = decode_units(PRE_BLANK + UNIT + unit(0, 0x7FFFFFFF, 1) + ZERO_UNIT)
    assert is_pre_blank(units).tolist() == [True, False, False, False]
    assert CONSUME_QUEUE.valid(units).tolist() == [True, True, True, False]  # recover keeps pre-blank units


@pytest.mark.parametrize(
    ("field", "value", "kept"),
    [(None, 0, 3), ("offset", -1, 1), ("size", 0, 1), ("msg_base_offset", -1, 1), ("batch_size", 0, 1)],
)
def test_batch_queue_recover_rule(field: str | None, value: int, kept: int) -> None:
    """``BatchConsumeQueue.recover`` keeps units while offset >= 0, size > 0, msgBaseOffset >= 0, batchSize > 0."""
    base = np.array([0, 3, 4])
    args = [np.array([100, 200, 300]), np.full(3, 50, np.int32), np.zeros(3), np.zeros(3), base, np.array([3, 1, 2])]
    units = batchcq.decode_units(batchcq.encode_units(*args)).copy()
    if field is not None:
        units[field][1] = value
    assert batchcq.BATCH_CONSUME_QUEUE.valid_prefix(units) == kept
    assert CONSUME_QUEUE.dir == "consumequeue" and batchcq.BATCH_CONSUME_QUEUE.dir == "batchconsumequeue"


# --- building a queue's files -------------------------------------------------------------------

FILE_SIZE = 100  # 5 units per file


def queue_files(
    entries: list[tuple[int, int, int, int]], splits: list[int] = (), file_size: int = FILE_SIZE, feed: str = "add"
):
    """QueueFiles fed the entries (queue offset, commitlog offset, size, tagsCode) in pieces cut at ``splits``.

    ``feed``: every piece through ``add``, through ``add_run`` (encoded units of consecutive
    queue offsets, as the rebuild ships them), or alternating ("mixed").
    """
    q = QueueFiles(file_size)
    a = np.array(entries, dtype=np.int64).reshape(-1, 4)
    out = []
    cuts = [0, *sorted({s for s in splits if 0 < s < len(a)}), len(a)]
    for i, (lo, hi) in enumerate(itertools.pairwise(cuts)):
        part = a[lo:hi]
        if feed == "add_run" or (feed == "mixed" and i % 2):
            out.extend(q.add_run(int(part[0, 0]), encode_rows([tuple(r) for r in part[:, 1:].tolist()])))
        else:
            out.extend(q.add(part[:, 0], part[:, 1], part[:, 2].astype(np.int32), part[:, 3]))
    out.extend(q.finish())
    return q, out


def test_hand_built_files_with_pre_blank_units() -> None:
    """A queue whose first entry is 7: its first file (logical offset 100) starts with 2 pre-blank units."""
    entries = [(n, 1000 + n, 100 + n, -n) for n in range(7, 13)]
    q, files = queue_files(entries)
    assert files == [
        (
            "00000000000000000100",
            PRE_BLANK + PRE_BLANK + unit(1007, 107, -7) + unit(1008, 108, -8) + unit(1009, 109, -9),
        ),
        ("00000000000000000200", unit(1010, 110, -10) + unit(1011, 111, -11) + unit(1012, 112, -12) + bytes(40)),
    ]
    assert (q.entries, q.min_offset, q.next_offset, q.files, q.findings) == (6, 7, 13, 2, [])


def test_queue_ending_on_a_file_boundary_has_no_extra_file() -> None:
    entries = [(n, 64 * n, 64, 0) for n in range(10)]
    _, files = queue_files(entries)
    assert [name for name, _ in files] == ["00000000000000000000", "00000000000000000100"]
    _, files = queue_files([*entries, (10, 640, 64, 0)])
    assert files[-1] == ("00000000000000000200", unit(640, 64, 0) + bytes(80))


def test_first_entry_on_a_file_boundary_has_no_pre_blank() -> None:
    _, files = queue_files([(5, 7, 8, 9)])
    assert files == [("00000000000000000100", unit(7, 8, 9) + bytes(80))]


def test_duplicate_queue_offsets_are_dropped_and_reported() -> None:
    entries = [(0, 10, 1, 0), (1, 20, 1, 0), (2, 30, 1, 0), (2, 99, 1, 0), (3, 40, 1, 0)]
    for splits in ([], [3], [4]):
        q, files = queue_files(entries, splits)
        assert q.findings == [QueueFinding("duplicate-queue-offset", 2, 1, 99)]
        kept = unit(10, 1, 0) + unit(20, 1, 0) + unit(30, 1, 0) + unit(40, 1, 0)
        assert files == [("00000000000000000000", kept + bytes(20))]


def test_a_second_run_over_written_offsets_is_dropped_whole() -> None:
    """A later run from queue offset 0 over a queue already at 2: both of its units are repeats, not only the first."""
    q = QueueFiles(100)
    list(q.add_run(0, unit(10, 1, 0) + unit(20, 1, 0)))
    list(q.add_run(0, unit(70, 1, 0) + unit(80, 1, 0)))
    assert q.findings == [
        QueueFinding("duplicate-queue-offset", 0, 1, 70),
        QueueFinding("duplicate-queue-offset", 1, 1, 80),
    ]
    assert [rows(data) for _, data in q.finish()] == [[(10, 1, 0), (20, 1, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0)]]


@pytest.mark.parametrize("feed", ["add", "add_run"])
def test_queue_offset_gaps_are_reported(feed: str) -> None:
    entries = [(0, 10, 1, 0), (1, 20, 1, 0), (4, 50, 1, 0), (5, 60, 1, 0)]
    for splits in ([2], [2]) if feed == "add_run" else ([], [2]):
        q, files = queue_files(entries, splits, feed=feed)
        assert q.findings == [QueueFinding("queue-offset-gap", 2, 2, 50, 20)]
        # every entry sits at its own queue offset: entry n at logical byte offset n * 20
        assert files == [
            ("00000000000000000000", unit(10, 1, 0) + unit(20, 1, 0) + bytes(40) + unit(50, 1, 0)),
            ("00000000000000000100", unit(60, 1, 0) + bytes(80)),
        ]


def reference_queue_files(entries: list[tuple[int, int, int, int]], file_size: int) -> list[tuple[str, bytes]]:
    """Entry by entry: entry n at byte n*20 of the queue; the first file's units before it are pre-blank."""
    files: dict[int, bytearray] = {}
    for n, offset, size, tags_code in entries:
        start = n * 20 // file_size * file_size
        if start not in files:
            files[start] = bytearray(file_size)
            if len(files) == 1:
                files[start][: n * 20 - start] = PRE_BLANK * ((n * 20 - start) // 20)
        files[start][n * 20 - start : n * 20 - start + 20] = unit(offset, size, tags_code)
    return [(f"{start:020d}", bytes(data)) for start, data in sorted(files.items())]


@st.composite
def queues(draw: st.DrawFn) -> tuple[list[tuple[int, int, int, int]], int]:
    """Dense queue offsets from a random first one, with random entries, and a file size of whole units."""
    units_per_file = draw(st.integers(1, 7))
    first = draw(st.integers(0, 30))
    n = draw(st.integers(1, 40))
    entries = [(first + i, draw(int64s), draw(int32s), draw(int64s)) for i in range(n)]
    return entries, units_per_file * 20


@pytest.mark.parametrize("feed", ["add", "add_run", "mixed"])
@settings(deadline=None)
@given(queue=queues(), splits=st.lists(st.integers(1, 40), max_size=5))
def test_queue_files_match_the_reference(queue, splits: list[int], feed: str) -> None:
    entries, file_size = queue
    expected = reference_queue_files(entries, file_size)
    q, files = queue_files(entries, splits, file_size, feed)
    assert files == expected
    assert q.findings == []
    assert build_queue_files(entries, file_size) == expected


# --- names that become paths -----------------------------------------------------------------------


def _queue_of(claims: list[int], offsets: list[int]) -> QueueFiles:
    """A queue built as the rebuild's writer builds it: records at commitlog ``offsets`` (ascending) claiming
    ``claims``, sorted by queue offset (ties: commitlog order) and fed as runs of consecutive queue offsets."""
    sizes = [100] * len(offsets)
    order = sorted(range(len(claims)), key=lambda i: (claims[i], i))
    q = QueueFiles(600)
    runs: list[list[int]] = []
    for i in order:
        if runs and claims[i] == claims[runs[-1][-1]] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    for run in runs:
        at, size = np.array(offsets)[run], np.array(sizes, np.int32)[run]
        units = encode_units(at, size, np.zeros(len(run), np.int64))
        list(q.add_run(claims[run[0]], units))
    list(q.finish())
    return q


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_record_whose_queue_offset_was_changed_is_told_by_its_neighbours(data: st.DataObject) -> None:
    """Round trip: a dense queue in commitlog order, one record (not the first or last) made to claim any other
    queue offset; ``misplaced`` names exactly that record, at the queue offset its neighbours leave free. The
    undamaged queue names none."""
    n = data.draw(st.integers(3, 40))
    first = data.draw(st.integers(0, 1000))
    sizes = data.draw(st.lists(st.integers(100, 400), min_size=n, max_size=n))
    k = data.draw(st.integers(1, n - 2))
    claimed = data.draw(st.integers(0, first + n + 300).filter(lambda c: c != first + k))
    claims = list(range(first, first + n))
    offsets = [4096 + sum(sizes[:i]) for i in range(n)]
    sound = _queue_of(claims, offsets)
    assert misplaced(sound.findings, sound.out_of_place) == []
    claims[k] = claimed
    q = _queue_of(claims, offsets)
    offset = offsets[k]
    assert [(m.queue_offset, m.commitlog_offset, m.claimed) for m in misplaced(q.findings, q.out_of_place)] == [
        (first + k, offset, claimed)
    ]


def test_a_gap_that_two_records_could_fill_names_neither() -> None:
    """Two records between the units around a gap are out of place: which one belongs there cannot be told."""
    gap = QueueFinding("queue-offset-gap", 5, 1, 9000, 8000)
    out_of_place = [(40, 8100), (41, 8200)]
    assert misplaced([gap], out_of_place) == []
    assert [m.commitlog_offset for m in misplaced([gap], out_of_place[:1])] == [8100]


def _ends(claims: list[int], offsets: list[int]) -> LooseEnds:
    q = _queue_of(claims, offsets)
    return loose_ends(q, misplaced(q.findings, q.out_of_place))


def test_a_record_whose_queue_id_or_topic_was_changed_is_told_by_the_queue_it_left() -> None:
    """T/2's records at 1000, 2000, 4000 claim 0, 1, 3: the record between 2000 and 4000 went elsewhere. The one record
    out of place in another queue that lies there is it: a repeat in T/3 (QUEUEID), or the only record of a queue
    (topic). Two such records: neither can be told from the other."""
    t2 = _ends([0, 1, 3], [1000, 2000, 4000])
    t3 = _ends([0, 1, 1, 2], [1500, 2500, 3000, 3500])  # the record at 3000 repeats queue offset 1
    alone = _ends([2], [3000])
    sound = _ends([0, 1, 2], [1200, 2200, 3200])
    (found,) = strays({("T", 2): t2, ("T", 3): t3, ("U", 0): sound})
    assert found == (("T", 2), Misplaced(2, 3000, 1), ("T", 3))
    (found,) = strays({("T", 2): t2, ("Tx", 2): alone, ("U", 0): sound})
    assert found == (("T", 2), Misplaced(2, 3000, 2), ("Tx", 2))
    assert strays({("T", 2): t2, ("T", 3): t3, ("Tx", 2): _ends([2], [3100])}) == []
    assert strays({("T", 2): _ends([0, 1, 2], [1000, 2000, 4000]), ("Tx", 2): alone}) == []
    lmq = _queue_of([2], [3000])  # an LMQ queue's only record is in its own topic's queue too: no suspect
    assert loose_ends(lmq, [], lone=False).records == () and strays({("T", 2): t2, ("%LMQ%x", 0): LooseEnds()}) == []


def test_at_the_write_position_a_unit_below_it_is_skipped_and_one_past_it_written_there() -> None:
    """Runs in commitlog order, as the 5.1.1 broker's racing LMQ offsets come (tests/test_lmq_race.py): a repeat
    below the write position is skipped, a unit past it is written there (the skipped offset is not a hole), and a
    repeat that is no longer below it (after a skip) is written; the first unit stays at its own offset."""
    q = QueueFiles(100, at_write_position=True)
    runs = [(3, "ABC"), (5, "D"), (7, "EF"), (8, "G"), (7, "HI"), (8, "JKL")]
    named = {c: unit(1000 + i, 10, i) for i, c in enumerate("ABCDEFGHIJKL")}
    files = [f for first, cs in runs for f in q.add_run(first, b"".join(named[c] for c in cs))]
    files += q.finish()
    assert files == [
        ("00000000000000000000", PRE_BLANK * 3 + named["A"] + named["B"]),
        ("00000000000000000100", b"".join(named[c] for c in "CEFGK")),
        ("00000000000000000200", named["L"] + bytes(80)),
    ]
    assert (q.entries, q.min_offset, q.next_offset, q.findings) == (8, 3, 11, [])
