"""`rmqstore recover --salvage --apply` judged by the real 5.5.0 broker: a copy of its store takes damage inside the
broker's recovery window (``abort`` present: crash recovery walks the segment), the broker alone truncates there;
after the salvage the broker serves every message whose record the damage did not touch at its queue offset, none
that it touched, and its recovery truncates nothing. What the broker alone served is recorded, not asserted beyond
its loss: it is the "before" column of docs/salvage.md."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from tests.broker.harness import read_properties, served, served_queues
from tests.reference import walk_commitlog
from tests.storecopy import run_cli

pytestmark = pytest.mark.broker

SECTOR = 4096


@dataclasses.dataclass
class Queue:
    """What the broker served of one queue: its min and max offset, then (commitLogOffset, msgId, msgTopic) of each
    message in pull order from minOffset: the i-th is the unit at queue offset minOffset + i."""

    bounds: tuple[int | None, int | None]
    messages: list[tuple[int, str, str]] = dataclasses.field(default_factory=list)


def _queues(lines: list[dict]) -> dict[tuple[str, int], Queue]:
    out: dict[tuple[str, int], Queue] = {}
    for m in lines:
        if m["kind"] == "queue":
            out[m["topic"], m["queueId"]] = Queue((m.get("minOffset"), m.get("maxOffset")))
        elif m["kind"] == "message":
            out[m["topic"], m["queueId"]].messages.append((m["commitLogOffset"], m["msgId"], m["msgTopic"]))
    return out


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

    sound = _queues(served("5.5.0", built / "store", settings, queues))
    alone = _queues(served("5.5.0", damaged, settings, queues))
    kept_alone = sum(m in set(alone[q].messages) for q, v in sound.items() for m in v.messages if m[0] not in touched)
    total = sum(len(v.messages) for v in sound.values())
    lost = sum(m[0] in touched for v in sound.values() for m in v.messages)
    assert kept_alone < total - lost  # the damage lies in the broker's recovery window: it truncates

    argv = ["recover", "--store", str(copy), "--broker-config", str(copy.parent / "broker.conf")]
    argv += ["--broker-version", "5.5.0", "--salvage", "--backup-dir", str(tmp_path / "backup")]
    assert run_cli(argv) == 0
    said = capsys.readouterr().out
    assert "dry run; nothing was changed" in said
    assert run_cli([*argv, "--apply"]) == 0
    said = capsys.readouterr().out
    assert "tombstone of" in said and "exit code 0" in said

    after = _queues(served("5.5.0", copy, settings, queues))
    assert after.keys() == sound.keys()
    for q, v in sound.items():
        assert after[q].bounds == v.bounds and len(after[q].messages) == len(v.messages), q
        for m, got in zip(v.messages, after[q].messages):
            if m[0] in touched:  # a tombstone at its queue offset, never the lost message
                assert got[0] == m[0] and got[1] != m[1] and got[2] == m[2], q
            else:
                assert got == m, q

    manifest = json.loads((tmp_path / "backup" / "salvage" / "manifest.json").read_text())
    (rng,) = manifest["ranges"]
    assert rng["start"] <= lo and hi <= rng["end"]
    assert {r["offset"] for r in rng["records"] if r["written"] == "tombstone"} == touched & {
        m[0] for v in sound.values() for m in v.messages
    }
    old = (tmp_path / "backup" / rng["bytes"]).read_bytes()
    assert old[lo - rng["start"] : hi - rng["start"]] == bytes(SECTOR) and len(old) == rng["end"] - rng["start"]
    with capsys.disabled():  # the figures of docs/salvage.md's table
        print(f"\nsalvage: {total} messages served, {lost} damaged, broker alone kept {kept_alone}, after all")


def test_a_filler_is_walked_over_by_the_recovery_and_dispatched_nowhere(tmp_path: Path) -> None:
    """5.5.0 store, ``abort`` present: a sound record of the last segment replaced in place by a filler of its size
    (what salvage writes where no unit points). The broker's crash recovery walks over it and keeps every record
    after it; no ConsumeQueue of the filler's topic is made (its queue serves nothing); the units that pointed at
    the replaced record are served the filler's bytes (topic %SALVAGE%), which is why salvage writes fillers only
    where no unit points."""
    from storelib.broker.salvage import FILLER_TOPIC, fill
    from tests.broker.fixtures import harness_store

    built = harness_store("5.5.0", "default")
    settings = read_properties(built / "broker.conf")
    queues = served_queues(built / "store")
    copy = tmp_path / "broker" / "store"
    shutil.copytree(built / "store", copy, ignore=shutil.ignore_patterns("lock"))
    last = sorted((copy / "commitlog").iterdir())[-1]
    records = [r for r in walk_commitlog(built / "store" / "commitlog") if r.offset >= int(last.name)]
    victim = next(r for r in records[len(records) // 2 :] if r.topic == "TopicOrders")
    (_, data) = fill(victim.offset, victim.offset + victim.total_size, [], victim.store_timestamp)
    with last.open("r+b") as f:
        f.seek(victim.offset - int(last.name))
        f.write(data)
    (copy / "abort").touch()

    sound = _queues(served("5.5.0", built / "store", settings, queues))
    after = _queues(served("5.5.0", copy, settings, [*queues, f"{FILLER_TOPIC}/0"]))
    assert not after.pop((FILLER_TOPIC, 0)).messages
    assert after.keys() == sound.keys()
    for q, v in sound.items():
        assert after[q].bounds == v.bounds and len(after[q].messages) == len(v.messages), q
        for m, got in zip(v.messages, after[q].messages):
            assert got == m if m[0] != victim.offset else got[0::2] == (victim.offset, FILLER_TOPIC), q
