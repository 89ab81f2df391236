"""udfs.write without Spark: the mapInArrow writers driven with pyarrow batches, files checked byte by byte."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from storelib.broker.config import BrokerConfig
from storelib.formats.indexfile import IndexHeader, IndexPlan
from tests.reference import ReferenceIndexFile, index_key_hash
from udfs.parse import cq_units_path, index_scratch_path
from udfs.schema import CQ_RUN_SCHEMA, INDEX_ENTRY_DTYPE
from udfs.write import build_index_file, consume_queue_writer, planned_entries

#: ConsumeQueue files of 3 units (60 bytes); IndexFiles of 5 slots and 3 entries
CFG = BrokerConfig(mappedFileSizeConsumeQueue=60, maxHashSlotNum=5, maxIndexNum=4)
BLANK = struct.pack(">qiq", 0, 0x7FFFFFFF, 0)
EMPTY = bytes(20)


def unit(i: int) -> bytes:
    """A recognizable unit: commitlog offset 1000*i, size 100+i, tagsCode i."""
    return struct.pack(">qiq", 1000 * i, 100 + i, i)


def runs(scratch: Path, piece: str, *rows: tuple[str, int, int, list[int]]) -> pa.RecordBatch:
    """CQ_RUN_SCHEMA rows (topic, queue_id, first queue offset, the units' numbers), their units in ``piece``'s
    scratch file, as a parse leaves them (udfs.parse.PieceUnits)."""
    data = [b"".join(map(unit, u)) for _, _, _, u in rows]
    at = [sum(map(len, data[:k])) for k in range(len(rows))]
    scratch.mkdir(parents=True, exist_ok=True)
    Path(cq_units_path(str(scratch), piece)).write_bytes(b"".join(data))
    return pa.RecordBatch.from_pylist(
        [
            {"segment": "s", "piece": piece, "topic": t, "queue_id": q, "queue_offset": qo, "count": len(u)}
            | {"units_at": a, "commitlog_offset": 1000 * u[0]}
            for (t, q, qo, u), a in zip(rows, at)
        ],
        schema=CQ_RUN_SCHEMA,
    )


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_consume_queue_writer_writes_each_queue_and_summarizes_it(tmp_path: Path) -> None:
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    write = consume_queue_writer(str(out), str(scratch), CFG)
    batches = [
        runs(scratch, "p0", ("Orders", 1, 4, [4, 5]), ("Orders", 1, 6, [6, 7])),  # head expired: from queue offset 4
        runs(scratch, "p1", ("Orders", 1, 8, [8, 9]), ("Orders", 2, 0, [0]), ("Orders", 2, 3, [3])),  # 1, 2 missing
        runs(scratch, "p2", ("Orders", 3, 0, [0, 1]), ("Orders", 3, 1, [1]), ("../x", 0, 0, [0])),  # a repeat, ../x
    ]
    (summary,) = list(write(iter(batches)))
    # entry n lives at byte n*20 of the file named floor(n*20/60)*60; the first file of a queue that starts
    # at n > 0 holds BLANK units before n
    assert files_under(out) == {
        "consumequeue/Orders/1/00000000000000000060": BLANK + unit(4) + unit(5),
        "consumequeue/Orders/1/00000000000000000120": unit(6) + unit(7) + unit(8),
        "consumequeue/Orders/1/00000000000000000180": unit(9) + EMPTY + EMPTY,
        "consumequeue/Orders/2/00000000000000000000": unit(0) + EMPTY + EMPTY,
        "consumequeue/Orders/2/00000000000000000060": unit(3) + EMPTY + EMPTY,
        "consumequeue/Orders/3/00000000000000000000": unit(0) + unit(1) + EMPTY,
    }
    rows = summary.to_pylist()
    findings = {(r["topic"], r["queue_id"]): json.loads(r["findings"]) for r in rows}
    assert [(r["topic"], r["queue_id"], r["entries"], r["min_offset"], r["max_offset"], r["files"]) for r in rows] == [
        ("Orders", 1, 6, 4, 10, [f"{n:020d}" for n in (60, 120, 180)]),
        ("Orders", 2, 2, 0, 4, [f"{n:020d}" for n in (0, 60)]),
        ("Orders", 3, 2, 0, 2, [f"{0:020d}"]),
        ("../x", 0, 0, 0, 0, []),
    ]
    assert findings["Orders", 1] == []

    def where(f: dict) -> tuple:
        return f["kind"], f["file"], f["queue_offset"], f["commitlog_offset"], f["count"]

    assert [where(f) for f in findings["Orders", 2]] == [("queue-offset-gap", "consumequeue/Orders/2", 1, 3000, 2)]
    assert [where(f) for f in findings["Orders", 3]] == [
        ("duplicate-queue-offset", "consumequeue/Orders/3", 1, 1000, 1)
    ]
    assert [(f["kind"], f["file"], f["topic"]) for f in findings["../x", 0]] == [
        ("hostile-topic-name", "commitlog", "../x")
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "scratch"]  # nothing written outside OUT


def test_a_record_whose_queue_offset_its_neighbours_contradict_is_named_in_its_segment(tmp_path: Path) -> None:
    """Records 0..3 of Orders/4 in commitlog order, record 2 claiming queue offset 0 (runs as the parse sorts them:
    by queue offset, ties in commitlog order): besides the repeat and the gap, the record is named in its commitlog
    segment, at the queue offset its neighbours leave free, with what it claims."""
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    write = consume_queue_writer(str(out), str(scratch), CFG)
    (summary,) = list(
        write(iter([runs(scratch, "p0", ("Orders", 4, 0, [0]), ("Orders", 4, 0, [2, 1]), ("Orders", 4, 3, [3]))]))
    )
    found = json.loads(summary.to_pylist()[0]["findings"])
    assert [(f["kind"], f["queue_offset"]) for f in found][:2] == [
        ("duplicate-queue-offset", 0),
        ("queue-offset-gap", 2),
    ]
    (m,) = [f for f in found if f["kind"] == "queue-header-contradicted"]
    assert (m["file"], m["commitlog_offset"], m["file_offset"]) == ("commitlog/00000000000000000000", 2000, 2000)
    assert (m["topic"], m["queue_id"], m["queue_offset"]) == ("Orders", 4, 2)
    assert (m["expected"], m["actual"]) == ("Orders/4 queue offset 2", "Orders/4 queue offset 0")
    assert "holds QUEUEOFFSET 0, but" in m["message"]


def test_consume_queue_writer_without_runs_yields_nothing(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    assert list(consume_queue_writer(str(tmp_path / "out"), str(scratch), CFG)(iter([runs(scratch, "p")]))) == []
    assert not (tmp_path / "out").exists()


TS = 1_700_000_000_000
#: (key, commitlog offset, store time) in put order; segment A holds the first two, segment B the rest
KEYS = [("T#a", 100, TS), ("T#b", 100, TS), ("T#a", 300, TS + 2500), ("T#c", 400, TS + 4500), ("T#f", 500, TS + 9000)]


def write_scratch(scratch: Path, segment: str, keys: list[tuple[str, int, int]]) -> None:
    entries = np.array([(index_key_hash(k), o, t) for k, o, t in keys], dtype=INDEX_ENTRY_DTYPE)
    Path(index_scratch_path(str(scratch), segment)).write_bytes(entries.tobytes())


def test_planned_entries_are_the_slices_in_plan_order_and_a_short_file_is_an_error(tmp_path: Path) -> None:
    write_scratch(tmp_path, "A", KEYS[:2])
    write_scratch(tmp_path, "B", KEYS[2:])
    got = planned_entries(str(tmp_path), IndexPlan((("A", 1, 2), ("B", 0, 2)), None))
    assert got["commitlog_offset"].tolist() == [o for _, o, _ in [KEYS[1], *KEYS[2:4]]]
    with pytest.raises(EOFError, match="index-entries-A: 20 bytes of IndexFile entries missing"):
        planned_entries(str(tmp_path), IndexPlan((("A", 1, 3),), None))


def test_build_index_file_builds_each_planned_file_like_the_broker(tmp_path: Path) -> None:
    scratch, out = tmp_path / "scratch", tmp_path / "out"
    scratch.mkdir()
    write_scratch(scratch, "A", KEYS[:2])
    write_scratch(scratch, "B", KEYS[2:])
    plans = [IndexPlan((("A", 0, 2), ("B", 0, 1)), None), IndexPlan((("B", 1, 3),), ("B", 0))]
    built = [build_index_file(str(out), str(scratch), CFG, k, plan) for k, plan in enumerate(plans)]
    # the broker: three puts fill file 0; file 1 starts from file 0's end values, so its first entry's
    # timeDiff is 2 s (against file 0's end time), not 0
    first = ReferenceIndexFile(CFG, 0, 0)
    for key in KEYS[:3]:
        assert first.put_key(*key)
    second = ReferenceIndexFile(CFG, first.end_phy, first.end_ts)
    for key in KEYS[3:]:
        assert second.put_key(*key)
    assert files_under(out) == {"index/.part-00000000": first.to_bytes(), "index/.part-00000001": second.to_bytes()}
    assert built == [
        (TS, IndexHeader(TS, TS + 2500, 100, 300, first.hash_slot_count, 4)),
        (TS + 4500, IndexHeader(TS + 4500, TS + 9000, 400, 500, second.hash_slot_count, 3)),
    ]
