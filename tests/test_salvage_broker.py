"""`rmqstore recover --salvage --apply` judged by the real 5.5.0 broker: a copy of its store takes damage inside the
broker's recovery window (``abort`` present: crash recovery walks the segment), the broker alone truncates there;
after the salvage the broker serves every message whose record the damage did not touch at its queue offset, none
that it touched, and its recovery truncates nothing. What the broker alone served is recorded, not asserted beyond
its loss: it is the "before" column of docs/salvage.md."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from storelib.broker.detection import BROKER_TOPICS
from tests.broker.harness import read_properties, served, served_queues
from tests.reference import Record, store_files, walk_commitlog
from tests.storecopy import run_cli

pytestmark = pytest.mark.broker

SECTOR = 4096
#: the workload's BatchCQ topic (a plain topic on 4.9.7)
BATCH_TOPIC = "TopicBatchCQ"
#: what the undo must put back as the damage left it
UNDONE = ("commitlog", "consumequeue", "index", "config")


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


def _workload(r: Record) -> bool:
    """A record of a topic the workload sends (salvage refuses the broker's own: timers, delays, transactions)."""
    return r.topic not in BROKER_TOPICS and not r.topic.startswith("rmq_sys_")


def _sector(root: Path, segments: list[Path]) -> tuple[Path, int]:
    """Where 4 KiB are zeroed: from the BODYCRC of the first record at file offset 4,096 or later of the first of
    ``segments`` that has one such that the 4 KiB lie inside the segment and every record they touch is a workload
    record. Zeros that start inside a record's properties would leave it framing: neither the broker nor the scan
    could tell it damaged (without a ``__CRC32#`` to check), so the range starts inside a header."""
    records = list(walk_commitlog(root / "commitlog"))
    for seg in segments:
        base = int(seg.name)
        end = min(base + seg.stat().st_size, records[-1].offset) - SECTOR
        for r in (r for r in records if base + SECTOR <= r.offset < end):
            lo, hi = r.offset + 8, r.offset + 8 + SECTOR
            if all(_workload(x) for x in records if x.offset < hi and x.offset + x.total_size > lo):
                return seg, lo - base
    raise AssertionError(f"{root}: no 4 KiB of workload records in {[s.name for s in segments]}")


def _zero(seg: Path, at: int) -> tuple[int, int]:
    """4 KiB of zeros at file offset ``at`` of ``seg``: the commitlog range zeroed."""
    with seg.open("r+b") as f:
        f.seek(at)
        f.write(bytes(SECTOR))
    return int(seg.name) + at, int(seg.name) + at + SECTOR


def sector_in_window(root: Path) -> tuple[int, int]:
    """4 KiB of zeros inside the last segment (else the one before), ``abort`` left behind: crash recovery walks it."""
    (root / "abort").touch()
    return _zero(*_sector(root, sorted((root / "commitlog").iterdir())[::-1][:2]))


def sector_outside_window(root: Path) -> tuple[int, int]:
    """4 KiB of zeros inside segment 5, clean shutdown: no recovery walks it; the broker serves the units that point
    into it, and a pull that reaches one loses the sound messages after it in its result."""
    return _zero(*_sector(root, [sorted((root / "commitlog").iterdir())[5]]))


def across_segment_end(root: Path) -> tuple[int, int]:
    """Zeros from the BODYCRC of the third-to-last record of a segment to the BODYCRC of the third record of the
    next, ``abort`` left behind: the last such segment end whose touched records are all workload records of
    ConsumeQueue topics (a BatchCQ batch is refused), counted from the end of the log (crash recovery walks it). The
    segment's end-of-file BLANK is zeroed with it."""
    (root / "abort").touch()
    records = list(walk_commitlog(root / "commitlog"))
    segments = sorted((root / "commitlog").iterdir())
    for seg in segments[-2::-1]:
        end = int(seg.name) + seg.stat().st_size
        before = [r for r in records if int(seg.name) <= r.offset < end]
        after = [r for r in records if r.offset >= end]
        if len(before) < 4 or len(after) < 4:
            continue
        lo, hi = before[-3].offset + 8, after[2].offset + 8
        touched = [x for x in records if x.offset < hi and x.offset + x.total_size > lo]
        if all(_workload(x) and x.topic != BATCH_TOPIC for x in touched):
            with seg.open("r+b") as f:
                f.seek(lo - int(seg.name))
                f.write(bytes(end - lo))
            with (root / "commitlog" / f"{end:020d}").open("r+b") as f:
                f.write(bytes(hi - end))
            return lo, hi
    raise AssertionError(f"{root}: no segment end with workload records around it")


def _flip_a_byte(root: Path, segment: int, where: Callable[[Record, bytes], int | None]) -> tuple[int, int]:
    """A byte of the first workload record at file offset 4,096 or later of segment number ``segment`` for which
    ``where`` (given the record and its bytes) names one, flipped: the commitlog range of that byte."""
    seg = sorted((root / "commitlog").iterdir())[segment]
    base = int(seg.name)
    data = seg.read_bytes()
    for r in walk_commitlog(root / "commitlog"):
        if r.offset >= base + SECTOR and _workload(r):
            at = where(r, data[r.offset - base : r.offset - base + r.total_size])
            if at is not None:
                break
    with seg.open("r+b") as f:
        f.seek(r.offset + at - base)
        f.write(bytes([data[r.offset + at - base] ^ 0xFF]))
    return r.offset + at, r.offset + at + 1


def _body_byte(r: Record, _: bytes) -> int | None:
    """The first body byte (its BODYCRC no longer matches)."""
    hosts = (20 if r.sys_flag & 0x10 else 8) + (20 if r.sys_flag & 0x20 else 8)  # BORNHOST, STOREHOST (IPv6: 20)
    return 48 + hosts + 8 + 12 + 4 if r.body else None  # BORNTIMESTAMP's end, hosts, STORETIMESTAMP, 4+8, BODYLENGTH


def _property_byte(r: Record, raw: bytes) -> int | None:
    """The second letter of the property WAIT's value ``true``: BODYCRC still matches, ``__CRC32#`` no longer
    does, and nothing a consumer is served (topic, msgId, keys, tags) changes."""
    return raw.rindex(b"WAIT\x01true") + 6 if r.properties.get("WAIT") == "true" else None


def _queue_id_byte(r: Record, _: bytes) -> int | None:
    """The last byte of QUEUEID of a TopicOrders record (no CRC covers it): it claims another queue."""
    return 15 if r.topic == "TopicOrders" else None


def body_byte_in_window(root: Path) -> tuple[int, int]:
    """A flipped body byte in the last segment, ``abort`` left behind: crash recovery walks it."""
    (root / "abort").touch()
    return _flip_a_byte(root, -1, _body_byte)


def body_byte_outside_window(root: Path) -> tuple[int, int]:
    """A flipped body byte in segment 5, clean shutdown: no recovery walks it, the broker serves it as if sound."""
    return _flip_a_byte(root, 5, _body_byte)


def property_byte_in_window(root: Path) -> tuple[int, int]:
    """A flipped byte in a property value of a record in the last segment of a store written with
    ``enabledAppendPropCRC``, ``abort`` left behind: crash recovery walks it and (forceVerifyPropCRC off) checks
    its BODYCRC, not its ``__CRC32#``."""
    (root / "abort").touch()
    return _flip_a_byte(root, -1, _property_byte)


def queue_id_in_window(root: Path) -> tuple[int, int]:
    """A flipped QUEUEID byte of a record in the last segment, ``abort`` left behind: crash recovery walks it and
    dispatches it again, to the queue its header names; the unit of the queue it was sent to stays as it was."""
    (root / "abort").touch()
    return _flip_a_byte(root, -1, _queue_id_byte)


def _changed(built: Path, copy: Path, lo: int, hi: int) -> set[int]:
    """The commitlog offsets of the records of ``built`` that overlap [lo, hi) and whose bytes differ in ``copy``
    (zeros over zeros change nothing)."""
    out = set()
    for r in walk_commitlog(built / "commitlog"):
        if r.offset < hi and r.offset + r.total_size > lo:
            seg = max(p for p in (built / "commitlog").iterdir() if int(p.name) <= r.offset)
            at = r.offset - int(seg.name)
            old = seg.read_bytes()[at : at + r.total_size]
            if (copy / "commitlog" / seg.name).read_bytes()[at : at + r.total_size] != old:
                out.add(r.offset)
    return out


#: damage -> (what it does to a store copy, what the broker alone does: "truncates" the log, serves the damaged
#: records "as sound", or "breaks" the pulls that reach them)
DAMAGES = {
    "zeroed-sector": (sector_in_window, "truncates"),
    "zeroed-sector-outside-window": (sector_outside_window, "breaks"),
    "body-byte-in-window": (body_byte_in_window, "truncates"),
    "body-byte-outside-window": (body_byte_outside_window, "as sound"),
    "property-byte-in-window": (property_byte_in_window, "as sound"),
    "queue-id-in-window": (queue_id_in_window, "as sound"),
    "across-segment-end": (across_segment_end, "truncates"),
}
CASES = [
    ("5.5.0", "default", "zeroed-sector"),
    ("5.5.0", "crc", "zeroed-sector"),
    ("5.3.3", "default", "zeroed-sector"),
    ("4.9.7", "default", "zeroed-sector"),
    ("5.5.0", "default", "zeroed-sector-outside-window"),
    ("5.5.0", "default", "body-byte-in-window"),
    ("5.5.0", "default", "body-byte-outside-window"),
    ("5.5.0", "crc", "property-byte-in-window"),
    ("5.5.0", "default", "queue-id-in-window"),
    ("5.5.0", "default", "across-segment-end"),
    ("5.3.3", "default", "across-segment-end"),
    ("4.9.7", "default", "across-segment-end"),
]


@pytest.mark.parametrize(("version", "variant", "damage"), CASES)
def test_salvage_costs_only_the_damaged_messages(
    spark, tmp_path: Path, capsys, version: str, variant: str, damage: str
) -> None:
    """A store of the real broker takes the damage. Inside the broker's recovery window the broker alone truncates
    the log at the first damaged record and loses every message after it; outside it serves the damaged message as
    if sound. ``recover --salvage --apply`` writes a tombstone where each damaged message was (its queue, queue
    offset and size); then the broker serves every sound message at its queue offset (the same record: commitlog
    offset and msgId), a tombstone at each damaged message's queue offset (its topic, its offset, not its msgId),
    and no damaged message. The damaged range's old bytes are in the backup with a manifest; the undo puts the
    damaged store back."""
    from tests.broker.fixtures import harness_store

    built = harness_store(version, variant)
    settings = read_properties(built / "broker.conf")
    queues = served_queues(built / "store")
    copy = tmp_path / "broker" / "store"
    shutil.copytree(built / "store", copy, ignore=shutil.ignore_patterns("lock"))
    shutil.copyfile(built / "broker.conf", copy.parent / "broker.conf")
    make, alone_does = DAMAGES[damage]
    lo, hi = make(copy)
    touched = _changed(built / "store", copy, lo, hi)
    damaged = tmp_path / "damaged" / "store"
    shutil.copytree(copy, damaged)

    sound = _queues(served(version, built / "store", settings, queues))
    alone = _queues(served(version, damaged, settings, queues))
    kept_alone = sum(m in set(alone[q].messages) for q, v in sound.items() for m in v.messages if m[0] not in touched)
    served_lost = sum(m in set(alone[q].messages) for q, v in sound.items() for m in v.messages if m[0] in touched)
    total = sum(len(v.messages) for v in sound.values())
    lost = sum(m[0] in touched for v in sound.values() for m in v.messages)
    if alone_does == "as sound":
        assert (kept_alone, served_lost) == (total - lost, lost)
    else:  # the log truncated at the damage, or pulls that stop at a damaged unit
        assert kept_alone < total - lost

    argv = ["recover", "--store", str(copy), "--broker-config", str(copy.parent / "broker.conf")]
    argv += ["--broker-version", version, "--salvage", "--backup-dir", str(tmp_path / "backup")]
    assert run_cli(argv) == 0
    said = capsys.readouterr().out
    assert "dry run; nothing was changed" in said
    assert run_cli([*argv, "--apply"]) == 0
    said = capsys.readouterr().out
    assert "tombstone of" in said and "exit code 0" in said

    after = _queues(served(version, copy, settings, queues))
    assert after.keys() == sound.keys()
    for q, v in sound.items():
        assert after[q].bounds == v.bounds and len(after[q].messages) == len(v.messages), q
        for m, got in zip(v.messages, after[q].messages):
            if m[0] in touched:  # a tombstone at its queue offset, never the lost message
                assert got[0] == m[0] and got[1] != m[1] and got[2] == m[2], q
            else:
                assert got == m, q

    ranges = json.loads((tmp_path / "backup" / "salvage" / "manifest.json").read_text())["ranges"]
    assert ranges[0]["start"] <= lo and hi <= ranges[-1]["end"]  # one range, or one per segment back to back
    assert all(a["end"] == b["start"] for a, b in itertools.pairwise(ranges))
    tombstones = {r["offset"] for rng in ranges for r in rng["records"] if r["written"] == "tombstone"}
    assert tombstones == touched & {m[0] for v in sound.values() for m in v.messages}
    for rng in ranges:
        base = int(Path(rng["file"]).name)
        old = (damaged / rng["file"]).read_bytes()[rng["start"] - base : rng["end"] - base]
        assert (tmp_path / "backup" / rng["bytes"]).read_bytes() == old
    assert run_cli(["recover", "--store", str(copy), "--undo", str(tmp_path / "backup")]) == 0
    assert store_files(copy, "commitlog", "consumequeue", "index") == store_files(
        damaged, "commitlog", "consumequeue", "index"
    )
    assert (copy / "checkpoint").read_bytes() == (damaged / "checkpoint").read_bytes()
    with capsys.disabled():  # the figures of docs/salvage.md's table
        print(f"\nsalvage {version} {variant} {damage}: [{lo}, {hi}): {total} units served, {lost} damaged; ", end="")
        print(f"broker alone: {kept_alone} of {total - lost} sound, {served_lost} damaged; after salvage: all sound")


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


def test_a_batchcq_batch_in_a_damaged_range_is_refused_and_named(spark, tmp_path: Path, capsys) -> None:
    """5.5.0 store: 4 KiB zeroed from the BODYCRC of the last TopicBatchCQ batch record they fit after. Its one
    BatchCQ unit stands for the batch's messages; salvage builds no batch tombstone, so it refuses, naming the
    unit, instead of writing a filler or a BLANK the unit would point at (the real broker then served 160 units of
    TopicBatchCQ/1 where the store had 158)."""
    from tests.broker.fixtures import harness_store

    built = harness_store("5.5.0", "default")
    copy = tmp_path / "broker" / "store"
    shutil.copytree(built / "store", copy, ignore=shutil.ignore_patterns("lock"))
    records = list(walk_commitlog(copy / "commitlog"))
    segments = sorted((copy / "commitlog").iterdir())
    for batch in (r for r in records[::-1] if r.topic == BATCH_TOPIC and r.offset + 8 + SECTOR < records[-1].offset):
        seg = max(p for p in segments if int(p.name) <= batch.offset)
        if batch.offset + 8 + SECTOR < int(seg.name) + seg.stat().st_size:
            break
    _zero(seg, batch.offset + 8 - int(seg.name))
    (copy / "abort").touch()
    argv = ["recover", "--store", str(copy), "--broker-config", str(built / "broker.conf")]
    assert run_cli([*argv, "--broker-version", "5.5.0", "--salvage"]) != 0
    said = capsys.readouterr()
    assert "the BatchCQ unit of queue offset" in said.out + said.err and "not salvaged" in said.out + said.err
