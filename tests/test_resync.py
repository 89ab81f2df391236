"""Scanning past damage (storelib.broker.resync): hand-made damage in built segments, and a hypothesis round trip
in which every record wholly outside random damage is still found at its offset."""

from __future__ import annotations

import dataclasses
import shutil
import struct
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storelib.broker.resync import Resync
from storelib.formats.commitlog import Message, decode_message
from storelib.formats.scanner import DAMAGE_LENGTH, END_BAD_MAGIC, END_BLANK, END_ZERO_TAIL
from tests.builders import Scan, encode_segment, msg, scan

SIZE = 16 * 1024
BASE = 3 * SIZE  # a segment that is not the log's first: PHYSICALOFFSET = BASE + file position


def _messages(n: int, body: int = 40) -> list[Message]:
    """``n`` messages of three queues, stored one millisecond apart, each with a UNIQ_KEY and KEYS."""
    return [
        msg(
            f"Topic{i % 2}",
            {"UNIQ_KEY": f"UK{i:04d}", "KEYS": f"k{i}", "TAGS": "t"},
            body=bytes([i % 251]) * (body + i % 7),
            queue_id=i % 3,
            queue_offset=i // 3,
            store_timestamp=1_700_000_000_000 + i,
        )
        for i in range(n)
    ]


def _segment(n: int = 60) -> tuple[bytearray, list[int], list[int]]:
    """A segment of ``n`` records ending in a BLANK; its bytes, each record's file position and size."""
    data, offsets = encode_segment(_messages(n), base=BASE, size=SIZE, blank=True)
    starts = [o - BASE for o in offsets]
    ends = [*starts[1:], len(data.rstrip(b"\0")) - 8]  # the last record ends where the BLANK starts
    return bytearray(data), starts, [e - s for s, e in zip(starts, ends)]


def _scan(data: bytes | bytearray) -> tuple[Scan, Resync]:
    resync = Resync()
    return scan(bytes(data), base=BASE, resync=resync), resync


def test_a_flipped_magic_costs_that_record_only() -> None:
    data, starts, _ = _segment()
    data[starts[10] + 4] ^= 0xFF
    s, resync = _scan(data)
    assert s.end.reason == END_BLANK
    assert s.offsets() == [BASE + p for k, p in enumerate(starts) if k != 10]
    (hole,) = resync.holes
    assert (hole.start, hole.end, hole.reason) == (BASE + starts[10], BASE + starts[11], END_BAD_MAGIC)
    (lost,) = hole.messages  # its header is still readable apart from the magic
    assert (lost.topic, lost.queue_id, lost.queue_offset, lost.uniq_key, lost.keys) == ("Topic0", 1, 3, "UK0010", "k10")
    assert lost.store_timestamp == 1_700_000_000_010


def test_without_resync_the_walk_still_stops_there() -> None:
    data, starts, _ = _segment()
    data[starts[10] + 4] ^= 0xFF
    s = scan(bytes(data), base=BASE)
    assert (s.end.reason, s.end.offset, len(s.offsets())) == (END_BAD_MAGIC, BASE + starts[10], 10)


def test_a_zeroed_sector_across_records() -> None:
    data, starts, _ = _segment()
    lo, hi = starts[20] + 30, starts[20] + 30 + 1024
    data[lo:hi] = bytes(hi - lo)
    s, resync = _scan(data)
    whole = [BASE + p for p, size in zip(starts, _segment()[2]) if p + size <= lo or p >= hi]
    assert s.offsets() == whole and s.end.reason == END_BLANK
    (hole,) = resync.holes
    first_after = next(p for p in starts if p >= hi)
    assert (hole.start, hole.end) == (BASE + starts[20], BASE + first_after)
    first = hole.messages[0]  # where the walk got to: its header up to PHYSICALOFFSET kept, then zeros
    assert (first.commitlog_offset, first.queue_id, first.queue_offset) == (BASE + starts[20], 2, 6)
    assert first.uniq_key is None


def test_an_inflated_totalsize_is_searched_from_its_record() -> None:
    """A TOTALSIZE made larger walks the scan into the middle of a later record: the search starts right after the
    damaged record instead, so the records it jumped over are found; its length mismatch is the hole's."""
    data, starts, sizes = _segment()
    struct.pack_into(">i", data, starts[5], sizes[5] + 100)
    s, resync = _scan(data)
    assert s.offsets() == [BASE + p for k, p in enumerate(starts) if k != 5]
    assert [d for d in s.damage if d[1] == DAMAGE_LENGTH] == []
    assert [(h.start, h.end) for h in resync.holes] == [(BASE + starts[5], BASE + starts[6])]


def test_records_older_than_the_damage_are_not_taken_as_sound() -> None:
    """What a truncation leaves behind (older records past the new end) is not resynced to: the walk ends."""
    later = [dataclasses.replace(m, store_timestamp=m.store_timestamp + 1000) for m in _messages(10)]
    new, _ = encode_segment(later, base=BASE)
    data, _, _ = _segment()
    data[: len(new)] = new  # written after a truncation at the segment's start: older records after them
    data[len(new) : len(new) + 16] = b"\x11" * 16  # the end of a half-overwritten record
    s, resync = _scan(data)
    assert len(s.offsets()) == 10 and resync.holes == [] and s.end.reason == END_BAD_MAGIC


def test_one_older_header_in_the_damage_does_not_end_the_search() -> None:
    """A record's header zeroed, the next one's store time flipped (no CRC covers it): the next is damage, not
    what a truncation left behind, and every record after it is found (a hypothesis example of the round trip)."""
    data, starts, _ = _segment()
    data[starts[10] : starts[10] + 8] = bytes(8)
    data[starts[11] + 58] ^= 0x01  # STORETIMESTAMP's third byte: 2^40 ms earlier
    s, resync = _scan(data)
    assert s.offsets() == [BASE + p for k, p in enumerate(starts) if k != 10 and k != 11]
    assert [(h.start, h.end) for h in resync.holes] == [(BASE + starts[10], BASE + starts[12])]


def test_damage_then_zeros_ends_as_before() -> None:
    data, starts, _ = _segment(30)
    data[starts[29] :] = bytes(len(data) - starts[29])
    data[starts[28] + 4] ^= 1
    s, resync = _scan(data)
    assert (s.end.reason, s.end.offset) == (END_BAD_MAGIC, BASE + starts[28]) and resync.holes == []


def test_a_hole_in_a_range_scan_ends_where_the_next_range_starts() -> None:
    data, starts, _ = _segment()
    data[starts[10] : starts[10] + 8] = bytes(8)  # TOTALSIZE and magic zeroed
    s, _ = _scan(data)
    assert s.end.reason == END_BLANK
    stop = starts[30]
    r = scan(bytes(data), base=BASE, resync=Resync(), stop=stop)
    assert r.offsets() == [BASE + p for k, p in enumerate(starts[:30]) if k != 10]
    assert r.end.offset == BASE + stop


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(0, SIZE - 1), st.integers(1, 600), st.booleans(), st.integers(1, 255)),
        min_size=1,
        max_size=4,
    )
)
def test_every_record_outside_the_damage_is_found(damage: list[tuple[int, int, bool, int]]) -> None:
    """Random ranges zeroed or XORed with a byte: every record wholly outside them is found at its offset, and
    nothing is found where no record was written."""
    data, starts, sizes = _segment()
    hit = []
    for at, length, zero, byte in damage:
        end = min(SIZE, at + length)
        data[at:end] = bytes(end - at) if zero else bytes(b ^ byte for b in data[at:end])
        hit.append((at, end))
    s, resync = _scan(data)
    found = set(s.offsets())
    sound = {BASE + p for p, n in zip(starts, sizes) if all(p + n <= lo or p >= hi for lo, hi in hit)}
    assert sound <= found
    assert found <= {BASE + p for p in starts}
    for h in resync.holes:
        assert not any(h.start <= o < h.end for o in sound)
    assert s.end.reason in (END_BLANK, END_ZERO_TAIL) or any(hi > starts[-1] + sizes[-1] for _, hi in hit)


@pytest.mark.broker
def test_a_flipped_body_byte_in_a_real_5_5_store_is_named_and_the_rest_rebuilt_as_the_broker_wrote_it(
    spark, tmp_path: Path
) -> None:
    """A copy of the real 5.5.0 broker's store (clean shutdown), one body byte flipped in a record of segment 10: the
    audit names that message (crc-mismatch, its topic, queue, queue offset and UNIQ_KEY) and nothing else; the rebuild
    of the damaged copy is the broker's own consumequeue/, batchconsumequeue/ and index/ byte for byte (the record
    frames, so it is dispatched as the broker did); and the real broker started on the copy serves that message as
    if sound, at its queue offset: the finding is the only warning the operator gets."""
    from jobs.pipeline.audit_flow import audit
    from jobs.pipeline.context import Run
    from jobs.pipeline.rebuild_flow import rebuild
    from storelib.broker.config import load_broker_config
    from tests.broker.fixtures import harness_store
    from tests.broker.harness import served
    from tests.reference import assert_same_index

    built = harness_store("5.5.0", "default")
    copy = tmp_path / "broker" / "store"
    shutil.copytree(built / "store", copy, ignore=shutil.ignore_patterns("lock"))
    shutil.copyfile(built / "broker.conf", copy.parent / "broker.conf")
    cfg = load_broker_config(built / "broker.conf")
    seg = copy / "commitlog" / f"{10 * cfg.mappedFileSizeCommitLog:020d}"
    data = bytearray(seg.read_bytes())
    rows = scan(bytes(data), base=10 * cfg.mappedFileSizeCommitLog).rows()
    victim = next(r for r in rows[len(rows) // 2 :] if r["body_length"] > 0 and r["topic"].startswith("Topic"))
    at = victim["physical_offset"] - 10 * cfg.mappedFileSizeCommitLog
    body = at + 4 * 4 + 4 + 8 + 8 + 4 + 8 + (20 if victim["sys_flag"] & 0x10 else 8) + 8
    body += (20 if victim["sys_flag"] & 0x20 else 8) + 4 + 8 + 4
    assert decode_message(bytes(data), at).body == bytes(data[body : body + victim["body_length"]])
    data[body] ^= 0xFF
    seg.write_bytes(bytes(data))
    uniq = victim["properties"]["UNIQ_KEY"]

    result = audit(Run(spark, cfg), str(copy), None, str(tmp_path / "report"))
    assert [(f.kind, f.commitlog_offset) for f in result.findings] == [("crc-mismatch", victim["physical_offset"])]
    (f,) = result.findings
    assert f"{victim['topic']}/{victim['queue_id']} queue offset {victim['queue_offset']} UNIQ_KEY {uniq}" in f.message
    rebuild(Run(spark, cfg), str(copy), str(tmp_path / "rebuilt"))
    assert_same_index(built / "store", tmp_path / "rebuilt")

    lines = served("5.5.0", copy)
    got = [m for m in lines if m["kind"] == "message" and m["commitLogOffset"] == victim["physical_offset"]]
    assert [(m["topic"], m["queueId"], m["queueOffset"], m["msgId"]) for m in got][:1] == [
        (victim["topic"], victim["queue_id"], victim["queue_offset"], uniq)
    ]
    assert not [q for q in lines if q["kind"] == "queue" and q.get("error")]


@pytest.mark.broker
def test_a_zeroed_sector_in_a_real_5_5_store_costs_its_messages_and_the_rest_is_rebuilt(spark, tmp_path: Path) -> None:
    """A copy of the real 5.5.0 broker's store (clean shutdown), 4 KiB zeroed at file offset 12,288 of segment 5: the
    audit names one damaged range (339,604 to 344,522: the record the zeros start inside, up to the next sound one)
    and the live units of its 8 messages in 7 queues; no segment is left out. The rebuild of the copy is the broker's
    queue files byte for byte, but for those 8 units (none: zeros). The real broker started on the copy serves every
    other queue as it serves the undamaged store; in those 7, every message before the first damaged one, the hole's
    first record decoded from what the zeros left (no topic, no UNIQ_KEY) and no other damaged one; the pulls that
    reach a damaged unit lose the sound messages after it in their result (96 here, with Served.java's pulls of 32)."""
    from jobs.pipeline.audit_flow import audit
    from jobs.pipeline.context import Run
    from jobs.pipeline.rebuild_flow import rebuild
    from storelib.broker.config import load_broker_config
    from tests.broker.fixtures import harness_store
    from tests.broker.harness import served
    from tests.reference import store_files

    built = harness_store("5.5.0", "default")
    copy = tmp_path / "broker" / "store"
    shutil.copytree(built / "store", copy, ignore=shutil.ignore_patterns("lock"))
    shutil.copyfile(built / "broker.conf", copy.parent / "broker.conf")
    cfg = load_broker_config(built / "broker.conf")
    seg = copy / "commitlog" / f"{5 * cfg.mappedFileSizeCommitLog:020d}"
    data = bytearray(seg.read_bytes())
    data[12288 : 12288 + 4096] = bytes(4096)
    seg.write_bytes(bytes(data))

    result = audit(Run(spark, cfg), str(copy), None, str(tmp_path / "report"))
    kinds = {f.kind for f in result.findings}
    assert "segments-skipped" not in kinds and not any(k.startswith("segment-") for k in kinds)
    (hole,) = [f for f in result.findings if f.kind == "damaged-records"]
    assert (hole.commitlog_offset, hole.count) == (339_604, 344_522 - 339_604)
    assert (hole.topic, hole.queue_id, hole.queue_offset) == (None, 1, 36)  # its topic is in the zeros
    units = {
        (f.topic, f.queue_id): (f.queue_offset, f.count) for f in result.findings if f.kind == "cq-damaged-entries"
    }
    assert sum(n for _, n in units.values()) == 8 and len(units) == 7
    assert units[("TopicPayments", 1)] == (36, 2)  # the hole's first record, read from what the zeros left

    rebuild(Run(spark, cfg), str(copy), str(tmp_path / "rebuilt"), on_error="skip-segment")
    want = store_files(built / "store", "consumequeue", "batchconsumequeue")
    got = store_files(tmp_path / "rebuilt", "consumequeue", "batchconsumequeue")
    assert sorted(got) == sorted(want)
    differ = {path for path in want if got[path] != want[path]}
    assert {tuple(p.split("/")[1:3]) for p in differ} == {(t, str(q)) for t, q in units}
    for path in differ:
        topic, queue_id = path.split("/")[1], int(path.split("/")[2])
        first, count = units[topic, queue_id]
        a, b = bytearray(want[path]), got[path]
        a[first * 20 : (first + count) * 20] = bytes(count * 20)  # the damaged messages' units: none in the rebuild
        assert bytes(a) == b, path

    def messages(lines: list[dict]) -> dict[tuple[str, int], list[tuple[int, int]]]:
        out: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for m in lines:
            if m["kind"] == "message":
                out.setdefault((m["topic"], m["queueId"]), []).append((m["queueOffset"], m["commitLogOffset"]))
        return out

    after_lines = served("5.5.0", copy)
    before, after = messages(served("5.5.0", built / "store")), messages(after_lines)
    assert {k: v for k, v in after.items() if k not in units} == {k: v for k, v in before.items() if k not in units}
    lost, handed_out = 0, []
    for queue, (first, count) in units.items():
        assert set(after[queue]) < set(before[queue])
        assert [m for m in before[queue] if m[0] < first] == [m for m in after[queue] if m[0] < first]
        handed_out += [m for m in after[queue] if first <= m[0] < first + count]
        lost += len({m for m in before[queue] if not first <= m[0] < first + count} - set(after[queue]))
    assert lost == 96
    # the hole's first record, its header before the zeros: served as a message of topic "" without its UNIQ_KEY
    assert handed_out == [(36, 339_604)]
    (line,) = [m for m in after_lines if m["kind"] == "message" and m["commitLogOffset"] == 339_604]
    assert (line["msgTopic"], line["keys"]) == ("", None) and line["msgId"] == line["offsetMsgId"]


def test_the_search_past_damage_keeps_memory_near_the_chunk_size(tmp_path: Path) -> None:
    """A 256 MiB segment (sparse): records, 4 KiB of garbage, more records, then zeros to its end. The search crosses
    the garbage and then reads the whole zero tail (no record could start there unseen) within the chunk size: peak
    memory does not follow the segment size."""
    from tests.test_commitlog import RecordingStream

    size, chunk = 256 << 20, 1 << 20
    records, offsets = encode_segment(_messages(400), base=BASE)
    hole_at = offsets[200] - BASE + 10  # inside record 200: it and 201.. up to the first after the garbage are lost
    head = bytearray(records)
    head[hole_at : hole_at + 4096] = b"\x11" * 4096
    path = tmp_path / "segment"
    with path.open("wb") as f:
        f.write(head)
        f.truncate(size)
    with path.open("rb", buffering=0) as f:
        stream = RecordingStream(f)
        resync = Resync()
        tracemalloc.start()
        s = scan(stream, base=BASE, file_size=size, chunk_size=chunk, batch_records=64, resync=resync)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    after = next(o - BASE for o in offsets if o - BASE >= hole_at + 4096)
    assert [(h.start, h.end) for h in resync.holes] == [(offsets[200], BASE + after)]
    assert s.offsets() == [o for o in offsets if o - BASE < offsets[200] - BASE or o - BASE >= after]
    assert (s.end.reason, s.end.offset) == (END_ZERO_TAIL, BASE + len(records))
    assert stream.delivered == size  # the zero tail is read to its end
    assert peak < 4 * len(records) + 8 * chunk, peak  # a few chunks (buffer, its refill, the magic masks)


def _sparse_segment(path: Path, size: int, pieces: list[tuple[int, bytes]]) -> None:
    """A file of ``size`` bytes holding each (file position, bytes) piece and holes elsewhere."""
    with path.open("wb") as f:
        for at, data in pieces:
            f.seek(at)
            f.write(data)
        f.truncate(size)


@pytest.mark.parametrize("gap", [0, 3 << 20, (5 << 20) + 1234])
def test_holes_are_jumped_over_not_read(tmp_path: Path, gap: int) -> None:
    """A 64 MiB sparse segment: records, then (``gap``) a hole and records again, then a hole to its end. With its
    extents the scan finds what it finds reading every byte, and reads the records and a page or two past each run
    of them, never the holes."""
    from tests.test_commitlog import RecordingStream
    from udfs.fs import LocalExtents

    size = 64 << 20
    records, offsets = encode_segment(_messages(300), base=BASE)
    cut = offsets[150] - BASE
    second = cut + gap  # where the records after the cut are written (no gap: one run)
    moved = records[cut:]
    if gap:  # the later records as a broker would have written them there: their PHYSICALOFFSETs follow
        moved, _ = encode_segment(_messages(300)[150:], base=BASE + second)
    path = tmp_path / "segment"
    _sparse_segment(path, size, [(0, records[:cut]), (second, moved)])
    runs = []
    for extents in (None, LocalExtents(str(path))):
        with path.open("rb", buffering=0) as f:
            stream = RecordingStream(f)
            resync = Resync()
            s = scan(stream, base=BASE, file_size=size, chunk_size=1 << 20, resync=resync, extents=extents)
        runs.append((s.offsets(), [(h.start, h.end) for h in resync.holes], s.end, stream.delivered))
    (plain, holes, end, read_all), (fast, fast_holes, fast_end, read_fast) = runs
    assert (fast, fast_holes, fast_end) == (plain, holes, end)
    assert read_all == size
    assert read_fast <= cut + len(moved) + 3 * 4096 * (2 if gap else 1), read_fast
    assert len(plain) == 300 and (holes == [] if not gap else len(holes) == 1)


@pytest.mark.parametrize("covered", [1, 2, 5])
def test_a_totalsize_inflated_onto_a_later_records_start_is_a_hole_and_the_records_it_covered_are_found(
    covered: int,
) -> None:
    """The broker's checkMessageAndReturnSize rejects a record whose TOTALSIZE differs from the length its fields
    give (calMsgLength), even when that TOTALSIZE lands exactly on a later record's start: the record is a hole
    named by its offset, and the ``covered`` records after it are found again at their offsets."""
    data, starts, sizes = _segment()
    k = 7
    struct.pack_into(">i", data, starts[k], starts[k + 1 + covered] - starts[k])
    s, resync = _scan(data)
    assert s.offsets() == [BASE + p for i, p in enumerate(starts) if i != k]
    (hole,) = resync.holes
    assert (hole.file, hole.start, hole.end) == (s.end.file, BASE + starts[k], BASE + starts[k + 1])
    assert f"the fields add up to {sizes[k]}" in hole.detail
    assert [m.uniq_key for m in hole.messages] == [f"UK{k:04d}"]
    assert s.end.reason == END_BLANK and [d for d in s.damage if d[1] == DAMAGE_LENGTH] == []


def test_a_record_whose_field_is_wrong_but_whose_totalsize_frames_is_skipped_by_its_length() -> None:
    """No record starts inside it (its TOTALSIZE is right, a length field is not): a length mismatch, and the walk
    goes on by its TOTALSIZE."""
    data, starts, sizes = _segment()
    struct.pack_into(">i", data, starts[7] + 84, sizes[7])  # BODYLENGTH now runs past the record
    s, resync = _scan(data)
    assert s.offsets() == [BASE + p for i, p in enumerate(starts) if i != 7] and resync.holes == []
    assert [(d[1], d[2]) for d in s.damage] == [(DAMAGE_LENGTH, BASE + starts[7])]


@pytest.mark.parametrize("last", [1, 8, 20, 35])
def test_bytes_within_a_header_of_the_files_end_after_damage_end_the_search(last: int) -> None:
    """Damage, zeros, then a few bytes that are not zero in the last ``last`` bytes of the file: no record fits
    there; the search ends (it looped, waiting for a whole header the file cannot hold)."""
    data = bytearray(1000)
    data[:8] = struct.pack(">ii", 425, 0x12345678)
    data[-last:] = b"\x07" * last
    s, resync = _scan(data)
    assert (s.end.reason, s.end.offset, s.offsets(), resync.holes) == (END_BAD_MAGIC, BASE, [], [])
