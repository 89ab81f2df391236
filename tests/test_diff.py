"""``rmqstore diff`` on the real 4.9.8 sample store and copies of it cut where a slave stopped replicating: the
records past the cut are named, exactly, and read back with their bodies; exit codes 0, 1, 2."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import needs_sample
from tests.reference import Record, parse_message_properties, walk_commitlog
from tests.storecopy import copy_store, rmqstore_main

pytestmark = needs_sample


def records(store: Path) -> list[Record]:
    """Every message record of the store's commitlog, in offset order (tests.reference: a reader of its own)."""
    return list(walk_commitlog(store / "commitlog"))


def cut_copy(src: Path, dst: Path, at: int) -> Path:
    """A copy of ``src`` whose log ends at commitlog offset ``at``: zeros from there, later segments gone (what a
    slave that replicated up to ``at`` holds)."""
    copy_store(src, dst, without=("consumequeue", "index", "checkpoint"))
    for seg in sorted((dst / "commitlog").iterdir()):
        start = int(seg.name)
        if start >= at:
            seg.unlink()
        elif start + seg.stat().st_size > at:
            data = bytearray(seg.read_bytes())
            data[at - start :] = bytes(len(data) - (at - start))
            seg.write_bytes(bytes(data))
    return dst


def diff(first: Path, other: Path, tmp: Path, fixture_dir: Path, *more: str) -> tuple[int, dict]:
    report = tmp / "report"
    argv = [
        "diff",
        str(first),
        str(other),
        "--report",
        str(report),
        "--broker-config",
        str(fixture_dir / "broker.conf"),
    ]
    code = rmqstore_main([*argv, *more])
    path = report / "report.json"
    return code, json.loads(path.read_text()) if path.is_file() else {}


@pytest.mark.parametrize("seed", [1, 2])
def test_a_slave_cut_anywhere_lacks_exactly_the_records_past_the_cut(
    seed: int, fixture_dir: Path, tmp_path: Path
) -> None:
    clean = fixture_dir / "clean"
    every = records(clean)
    cut = random.Random(seed).randrange(len(every) // 2, len(every) - 1)
    slave = cut_copy(clean, tmp_path / "slave", every[cut].offset)
    code, report = diff(clean, slave, tmp_path, fixture_dir, "--out", str(tmp_path / "missing"))
    assert code == 1
    lost = every[cut:]
    assert report["counts"]["records"] == [len(every), cut]
    assert report["counts"]["missing"] == [len(lost), 0]
    assert report["counts"]["paired"] == [cut, cut]
    table = pq.read_table(tmp_path / "missing").sort_by("commitlog_offset").to_pylist()
    assert [r["commitlog_offset"] for r in table] == [m.offset for m in lost]
    for r, m in zip(table, lost, strict=True):
        assert (r["body"], parse_message_properties(r["properties"])) == (m.body, m.properties)
    assert {r["store"] for r in table} == {str(clean)}
    assert sum(g["records"] for g in report["groups"]) == len(lost)

    code, report = diff(slave, clean, tmp_path / "reverse", fixture_dir)  # the other way round: missing from the first
    assert code == 1
    assert report["counts"]["missing"] == [0, len(lost)]


def test_a_store_and_its_copy_are_the_same(fixture_dir: Path, tmp_path: Path) -> None:
    copy = copy_store(fixture_dir / "clean", tmp_path / "copy", without=("index",))
    code, report = diff(fixture_dir / "clean", copy, tmp_path, fixture_dir)
    assert code == 0
    assert report["same"] and report["groups"] == []


def test_a_hole_in_a_log_cannot_be_compared(fixture_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    clean = fixture_dir / "clean"
    every = records(clean)
    broken = copy_store(clean, tmp_path / "broken", without=("consumequeue", "index"))
    m = every[len(every) // 3]
    seg = max(p for p in (broken / "commitlog").iterdir() if int(p.name) <= m.offset)
    data = bytearray(seg.read_bytes())
    data[m.offset - int(seg.name) : m.offset - int(seg.name) + 4] = b"\x7f\xff\xff\xf0"  # TOTALSIZE
    seg.write_bytes(bytes(data))
    code, report = diff(clean, broken, tmp_path, fixture_dir)
    assert code == 2 and report == {}
    assert f"{seg.name} @ {m.offset}" in capsys.readouterr().err


def test_an_existing_out_is_refused(fixture_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    code, _ = diff(fixture_dir / "clean", fixture_dir / "clean", tmp_path, fixture_dir, "--out", str(tmp_path / "out"))
    assert code == 2
