"""`rmqstore recover --salvage --apply` judged by the real 5.5.0 broker: a copy of its store takes damage inside the
broker's recovery window (``abort`` present: crash recovery walks the segment), the broker alone truncates there;
after the salvage the broker serves every message whose record the damage did not touch at its queue offset, none
that it touched, and its recovery truncates nothing. What the broker alone served is recorded, not asserted beyond
its loss: it is the "before" column of docs/salvage.md."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.broker.harness import read_properties, served, served_queues
from tests.reference import walk_commitlog
from tests.storecopy import run_cli

pytestmark = pytest.mark.broker

SECTOR = 4096


def _messages(lines: list[dict]) -> dict[tuple[str, int, int], dict]:
    """(topic, queueId, queueOffset) -> the served message line."""
    return {(m["topic"], m["queueId"], m["queueOffset"]): m for m in lines if m["kind"] == "message"}


def _zero(root: Path, segment: int, at: int) -> tuple[int, int]:
    """4 KiB of zeros at file offset ``at`` of commitlog segment number ``segment``; the commitlog range zeroed."""
    seg = sorted((root / "commitlog").iterdir())[segment]
    with seg.open("r+b") as f:
        f.seek(at)
        f.write(bytes(SECTOR))
    return int(seg.name) + at, int(seg.name) + at + SECTOR


@pytest.mark.parametrize(("segment", "at"), [(-1, 24_576)])
def test_a_zeroed_sector_in_the_recovery_window_costs_only_its_messages(
    spark, tmp_path: Path, capsys, segment: int, at: int
) -> None:
    """5.5.0 store, 4 KiB zeroed at file offset 24,576 of the last segment, ``abort`` present. The broker alone
    truncates the log at the first damaged record and loses every message after it. ``recover --salvage --apply``
    writes a tombstone where each damaged message was (its queue, queue offset and size) and fillers elsewhere;
    then the broker serves every sound message at its queue offset (the same record: commitlog offset and msgId),
    a tombstone (no UNIQ_KEY, its SALVAGED property) at each damaged message's queue offset, and no damaged message.
    The damaged range's old bytes are in the backup with a manifest."""
    from tests.broker.fixtures import harness_store

    built = harness_store("5.5.0", "default")
    settings = read_properties(built / "broker.conf")
    queues = served_queues(built / "store")
    copy = tmp_path / "broker" / "store"
    shutil.copytree(built / "store", copy, ignore=shutil.ignore_patterns("lock"))
    shutil.copyfile(built / "broker.conf", copy.parent / "broker.conf")
    lo, hi = _zero(copy, segment, at)
    (copy / "abort").touch()
    touched = {
        r.offset
        for r in walk_commitlog(built / "store" / "commitlog")
        if r.offset < hi and r.offset + r.total_size > lo
    }
    damaged = tmp_path / "damaged" / "store"
    shutil.copytree(copy, damaged)

    sound = _messages(served("5.5.0", built / "store", settings, queues))
    lost = {k for k, m in sound.items() if m["commitLogOffset"] in touched}
    alone = _messages(served("5.5.0", damaged, settings, queues))
    kept_alone = sum(alone.get(k, {}).get("msgId") == m["msgId"] for k, m in sound.items() if k not in lost)
    assert kept_alone < len(sound) - len(lost)  # the damage lies in the broker's recovery window: it truncates

    argv = ["recover", "--store", str(copy), "--broker-config", str(copy.parent / "broker.conf")]
    argv += ["--broker-version", "5.5.0", "--salvage", "--backup-dir", str(tmp_path / "backup")]
    assert run_cli(argv) == 0
    said = capsys.readouterr().out
    assert "dry run; nothing was changed" in said
    assert run_cli([*argv, "--apply"]) == 0
    said = capsys.readouterr().out
    assert "tombstone of" in said and "exit code 0" in said

    after = _messages(served("5.5.0", copy, settings, queues))
    for k, m in sound.items():
        got = after.get(k)
        if k in lost:  # a tombstone at its queue offset, never the lost message
            assert got is not None and got["msgId"] != m["msgId"] and got["commitLogOffset"] == m["commitLogOffset"]
        else:
            assert got is not None and (got["msgId"], got["commitLogOffset"]) == (m["msgId"], m["commitLogOffset"]), k
    assert not set(after) - set(sound)

    manifest = json.loads((tmp_path / "backup" / "salvage" / "manifest.json").read_text())
    (rng,) = manifest["ranges"]
    assert rng["start"] <= lo and hi <= rng["end"]
    assert {r["offset"] for r in rng["records"] if r["written"] == "tombstone"} == touched & {
        m["commitLogOffset"] for m in sound.values()
    }
    old = (tmp_path / "backup" / rng["bytes"]).read_bytes()
    assert old[lo - rng["start"] : hi - rng["start"]] == bytes(SECTOR) and len(old) == rng["end"] - rng["start"]
    with capsys.disabled():  # the figures of docs/salvage.md's table
        print(f"\nsalvage: {len(sound)} served, {len(lost)} damaged, broker alone {kept_alone}, after {len(after)}")
