"""Audit: the reliability matrix of ConsumeQueue damage (pure, on fixture files), commitlog and IndexFile
rules, and the crashed/ fixture classified in Spark exactly as its DAMAGE.md says."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from storelib.audit.index_headers import check_index_header, index_entries
from storelib.audit.log_recovery import check_commitlog
from storelib.audit.queues import classify_queue
from storelib.broker.config import load_broker_config
from storelib.broker.restart import SegmentFacts, recovery_start
from storelib.findings import KINDS, finding, is_divergence
from storelib.formats.batchcq import BATCH_CONSUME_QUEUE
from storelib.formats.checkpoint import Checkpoint
from storelib.formats.consumequeue import CONSUME_QUEUE, QueueFormat, encode_units
from storelib.formats.indexfile import IndexFileReader, lookup_reachable, query_offsets
from storelib.formats.javahash import index_key_hash, java_hash
from tests.conftest import FIXTURE_DIR
from tests.storecopy import copy_store, hold_lock, run_cli, tree_digest

CFG = load_broker_config(FIXTURE_DIR / "broker.conf")
CLEAN, CRASHED, EXPIRED = FIXTURE_DIR / "clean", FIXTURE_DIR / "crashed", FIXTURE_DIR / "expired"
MAX_OFFSET = 3_444_995  # end of clean/'s last record
LAST_TS = 1_795_312_760_863  # store time of clean/'s (and crashed/'s) last record
EXPIRED_MIN = 1_441_792


def queue_files(store: Path, topic: str, queue_id: int) -> dict[str, bytes]:
    d = store / "consumequeue" / topic / str(queue_id)
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())} if d.is_dir() else {}


def put_unit(data: bytes, position: int, unit: tuple[int, int, int]) -> bytes:
    at = position * 20
    raw = encode_units(np.array([unit[0]]), np.array([unit[1]]), np.array([unit[2]]))
    return data[:at] + raw + data[at + 20 :]


def repaired(live: dict[str, bytes], rebuilt: dict[str, bytes], write: list[str], delete: list[str]) -> dict:
    """The queue as recover leaves it: rebuilt files written, listed files deleted."""
    out = {k: v for k, v in live.items() if k not in delete}
    out.update({name: rebuilt[name] for name in write})
    return out


def schedule_tags(topic_queue: tuple[str, int]) -> dict[int, int]:
    """commitlog offset -> TAGS hash of clean/'s SCHEDULE_TOPIC_XXXX records (from the broker's dump)."""
    import gzip

    out = {}
    with gzip.open(FIXTURE_DIR / "expected" / "commitlog_records.jsonl.gz", "rt") as f:
        for line in f:
            r = json.loads(line)
            if (r.get("topic"), r.get("queueId")) == topic_queue:
                out[r["offset"]] = java_hash(r["tags"]) if r.get("tags") else 0
    return out


def _missing_tail():
    live = queue_files(CLEAN, "OrderCreated", 0)
    del live["00000000000000032000"]
    return "OrderCreated", 0, live, queue_files(CLEAN, "OrderCreated", 0), {}


def _dirty_tail():
    live = queue_files(CLEAN, "Metrics", 5)
    live["00000000000000000000"] = put_unit(live["00000000000000000000"], 399, (MAX_OFFSET, 200, 0))
    return "Metrics", 5, live, queue_files(CLEAN, "Metrics", 5), {}


def _wrong_entries():
    return "Audit-Log", 0, queue_files(CRASHED, "Audit-Log", 0), queue_files(CLEAN, "Audit-Log", 0), {}


def _zeroed_entries():
    return "Metrics", 0, queue_files(CRASHED, "Metrics", 0), queue_files(CLEAN, "Metrics", 0), {}


def _torn_file():
    live = queue_files(CLEAN, "Billing_v1", 1)
    live["00000000000000000000"] = live["00000000000000000000"][:3990]
    return "Billing_v1", 1, live, queue_files(CLEAN, "Billing_v1", 1), {}


def _missing_file():
    live = queue_files(CLEAN, "Metrics", 0)
    del live["00000000000000008000"]
    return "Metrics", 0, live, queue_files(CLEAN, "Metrics", 0), {}


def _expired_head():
    return "Metrics", 0, queue_files(CLEAN, "Metrics", 0), queue_files(EXPIRED, "Metrics", 0), {}


def _wrong_pre_blank():
    live = queue_files(EXPIRED, "Metrics", 0)
    first = live["00000000000000008000"]
    live["00000000000000008000"] = bytes(20 * 10) + first[200:]
    return "Metrics", 0, live, queue_files(EXPIRED, "Metrics", 0), {}


def _no_messages():
    return "Metrics", 0, queue_files(CLEAN, "Metrics", 0), {}, {}


def _missing_queue():
    return "Metrics", 3, {}, queue_files(CLEAN, "Metrics", 3), {}


def _extra_file():
    live = queue_files(CLEAN, "OrderCreated", 1)
    live["00000000000000016000"] = bytes(8000)
    return "OrderCreated", 1, live, queue_files(CLEAN, "OrderCreated", 1), {}


def _stale_bytes():
    live = queue_files(CLEAN, "OrderCreated", 0)
    live["00000000000000032000"] = put_unit(live["00000000000000032000"], 16, (12345, 99, 7))
    return "OrderCreated", 0, live, queue_files(CLEAN, "OrderCreated", 0), {}


def _schedule_quirk():
    key = ("SCHEDULE_TOPIC_XXXX", 16)
    tags = schedule_tags(key)
    live = queue_files(CLEAN, *key)
    data = live["00000000000000000000"]
    for pos in (3, 4, 5):
        unit = np.frombuffer(data[pos * 20 : pos * 20 + 20], dtype=">i8", count=1)[0]
        size = int.from_bytes(data[pos * 20 + 8 : pos * 20 + 12], "big")
        data = put_unit(data, pos, (int(unit), size, tags[int(unit)]))
    live["00000000000000000000"] = data
    return *key, live, queue_files(CLEAN, *key), tags


#: damage -> (kind, severity, queue offset, count, commitlog offset of the first expected entry or None)
MATRIX = {
    "missing-tail": (_missing_tail, "cq-missing-tail", "error", 1600, 14),
    "dirty-tail": (_dirty_tail, "cq-dirty-tail", "warning", 399, 1),
    "wrong-entries": (_wrong_entries, "cq-wrong-entries", "error", 517, 1),
    "zeroed-entries": (_zeroed_entries, "cq-zeroed-entries", "error", 1000, 200),
    "torn-file": (_torn_file, "cq-torn-file", "error", 199, 201),
    "missing-file": (_missing_file, "cq-missing-file", "error", 400, 400),
    "expired-head": (_expired_head, "cq-expired-head", "info", 0, 611),
    "wrong-pre-blank": (_wrong_pre_blank, "cq-wrong-pre-blank", "error", 400, 10),
    "no-messages": (_no_messages, "cq-no-messages", "warning", 0, 1400),
    "missing-queue": (_missing_queue, "cq-missing-queue", "error", 0, 760),
    "extra-file": (_extra_file, "cq-extra-file", "warning", 800, 0),
    "stale-bytes": (_stale_bytes, "cq-stale-bytes", "info", 1616, 1),
    "schedule-quirk": (_schedule_quirk, "cq-schedule-tagscode-quirk", "warning", 3, 3),
}


@pytest.mark.parametrize("damage", sorted(MATRIX))
def test_queue_damage_is_classified_and_repaired(damage: str) -> None:
    make, kind, severity, queue_offset, count = MATRIX[damage]
    topic, queue_id, live, rebuilt, tags = make()
    cl_min = EXPIRED_MIN if damage in ("expired-head", "wrong-pre-blank") else 0
    qa = classify_queue(topic, queue_id, live, rebuilt, CFG, cl_min, MAX_OFFSET, lambda offset, _size: tags.get(offset))
    assert [(f.kind, f.severity, f.queue_offset, f.count) for f in qa.findings] == [
        (kind, severity, queue_offset, count)
    ]
    f = qa.findings[0]
    assert (f.topic, f.queue_id) == (topic, queue_id)
    assert f.file.startswith(f"consumequeue/{topic}/{queue_id}")
    if severity == "info":
        assert (qa.write, qa.delete) == ([], []), "info findings are never repaired"
        return
    assert qa.write or qa.delete
    after = classify_queue(topic, queue_id, repaired(live, rebuilt, qa.write, qa.delete), rebuilt, CFG, 0, MAX_OFFSET)
    assert not [f for f in after.findings if is_divergence(f)]


def test_zeroed_entries_name_the_file_and_offsets_of_damage_md() -> None:
    topic, queue_id, live, rebuilt, _ = _zeroed_entries()
    (f,) = classify_queue(topic, queue_id, live, rebuilt, CFG, 0, MAX_OFFSET).findings
    assert f.file == "consumequeue/Metrics/0/00000000000000016000"
    assert (f.file_offset, f.commitlog_offset) == (4000, 2_382_986)
    assert f.expected == "commitlog offset 2382986, size 176, tagsCode 108957"


def test_wrong_entry_gives_expected_and_actual_of_damage_md() -> None:
    topic, queue_id, live, rebuilt, _ = _wrong_entries()
    qa = classify_queue(topic, queue_id, live, rebuilt, CFG, 0, MAX_OFFSET)
    (f,) = qa.findings
    assert (f.file, f.file_offset) == ("consumequeue/Audit-Log/0/00000000000000008000", 2340)
    assert "1751594" in f.expected and "1771341" in f.actual
    assert qa.write == ["00000000000000008000"], "only the damaged file is replaced"


def test_unchanged_queue_is_ok() -> None:
    live = queue_files(CLEAN, "OrderCreated", 0)
    qa = classify_queue("OrderCreated", 0, live, dict(live), CFG, 0, MAX_OFFSET)
    assert qa.findings == [] and qa.row.status == "ok" and qa.row.live_entries == 1614


# --- commitlog -------------------------------------------------------------------------------


def crashed_segments() -> list[SegmentFacts]:
    import gzip

    first: dict[int, int] = {}
    with gzip.open(FIXTURE_DIR / "expected" / "commitlog_records.jsonl.gz", "rt") as f:
        for line in f:
            r = json.loads(line)
            if "storeTimestamp" in r:
                first.setdefault(r["offset"] // CFG.mappedFileSizeCommitLog, r["storeTimestamp"])
    seg = CFG.mappedFileSizeCommitLog
    facts = [SegmentFacts(f"{i * seg:020d}", i * seg, 1, (i + 1) * seg, ts) for i, ts in sorted(first.items())]
    facts[-1] = SegmentFacts(facts[-1].file, facts[-1].start, 1, MAX_OFFSET, facts[-1].first_store_timestamp)
    return [*facts, SegmentFacts(f"{27 * seg:020d}", 27 * seg, 0, 27 * seg, 0)]


CRC = [
    finding("crc-mismatch", "commitlog/00000000000001835008", "BODYCRC", commitlog_offset=1_965_519),
    finding("crc-mismatch", "commitlog/00000000000001835008", "BODYCRC", commitlog_offset=1_965_763),
]


def test_crash_recovery_from_a_lagging_checkpoint_would_truncate_at_the_crc_failure() -> None:
    ckpt = Checkpoint.unpack((CRASHED / "checkpoint").read_bytes())
    segments = crashed_segments()
    assert recovery_start(segments, ckpt, abort=True) == 0
    out = check_commitlog(segments, CRC, ckpt, True, CFG, MAX_OFFSET, LAST_TS, LAST_TS)
    kinds = {f.kind: f for f in out}
    assert set(kinds) == {"recovery-would-truncate", "abort-marker", "commitlog-preallocated"}
    f = kinds["recovery-would-truncate"]
    assert (f.commitlog_offset, f.count) == (1_965_519, MAX_OFFSET - 1_965_519)
    assert "43%" in f.message
    assert kinds["commitlog-preallocated"].file == "commitlog/00000000000003538944"
    # with the checkpoint recover writes, recovery starts past the damage
    fixed = Checkpoint(LAST_TS, LAST_TS, LAST_TS)
    out = check_commitlog(segments, CRC, fixed, True, CFG, MAX_OFFSET, LAST_TS, LAST_TS)
    assert "recovery-would-truncate" not in {f.kind for f in out}


@pytest.mark.parametrize(
    ("ckpt", "expected"),
    [
        (Checkpoint(LAST_TS, LAST_TS - 5), []),  # a checkpoint at the data's end vouches for nothing missing
        (Checkpoint(LAST_TS + 1, 0), [(None, "physicMsgTimestamp", f"<= {LAST_TS}", str(LAST_TS + 1))]),
        (Checkpoint(0, LAST_TS - 4), [(None, "logicsMsgTimestamp", f"<= {LAST_TS - 5}", str(LAST_TS - 4))]),
        (
            Checkpoint(0, 0, confirm_phy_offset=MAX_OFFSET + 1),
            [(MAX_OFFSET, "confirmPhyOffset", f"<= {MAX_OFFSET}", str(MAX_OFFSET + 1))],
        ),
    ],
)
def test_checkpoint_ahead_of_the_data_is_an_error(ckpt: Checkpoint, expected: list[tuple]) -> None:
    """physicMsgTimestamp past the last record, logicsMsgTimestamp past the last dispatched one, or
    confirmPhyOffset past the last valid record: each one error on the checkpoint file, with both values."""
    out = check_commitlog(crashed_segments(), [], ckpt, False, CFG, MAX_OFFSET, LAST_TS, LAST_TS - 5)
    ahead = [f for f in out if f.kind == "checkpoint-ahead"]
    assert [(f.commitlog_offset, f.message.split()[0], f.expected, f.actual) for f in ahead] == expected
    assert all((f.severity, f.file) == ("error", "checkpoint") for f in ahead)


# --- IndexFile ---------------------------------------------------------------------------------


def test_lowered_index_count_is_inconsistent_with_slots_and_entries() -> None:
    name = "20261122015838886"
    reader = IndexFileReader((CRASHED / "index" / name).read_bytes(), CFG, name)
    (f,) = check_index_header(f"index/{name}", reader, CFG)
    assert f.kind == "index-header-inconsistent" and f.file_offset == 36
    assert "100 non-empty entries lie past indexCount" in f.message
    assert (f.expected, f.actual) == ("indexCount 3000", "2900")
    assert check_index_header(name, IndexFileReader((CLEAN / "index" / name).read_bytes(), CFG), CFG) == []


def _reachable_pairs(readers: list[IndexFileReader]) -> set[tuple[int, int]]:
    out = set()
    for r in readers:
        key_hash, phy = index_entries(r)
        reach = lookup_reachable(r)
        out |= set(zip(key_hash[reach].tolist(), phy[reach].tolist()))
    return out


def test_reachable_entries_are_what_the_broker_found() -> None:
    """Every offset the broker's own queryMessage returned is reachable under its keyHash (the oracle: the
    broker's dump), and the statement-by-statement lookup (query_offsets) finds exactly the reachable ones."""
    readers = [IndexFileReader(p.read_bytes(), CFG) for p in sorted((CLEAN / "index").iterdir())]
    found = _reachable_pairs(readers)
    queries = [json.loads(line) for line in (FIXTURE_DIR / "expected" / "index_queries.jsonl").open()]
    for q in queries:
        h = int(index_key_hash(np.array([java_hash(q["indexKey"])]))[0])
        assert {(h, o) for o in q["queryMessageOffsets"]} <= found, q["indexKey"]
        by_lookup = query_offsets(readers, q["indexKey"], 1 << 31, 0, 1 << 62)
        assert {(h, o) for o in by_lookup} == {(kh, o) for kh, o in found if kh == h}, q["indexKey"]


def _clean_index_chains() -> tuple[bytearray, list[list[int]]]:
    """The clean fixture's first IndexFile and its slots' chains (entry numbers, newest first), by prevIndex."""
    data = bytearray(next((CLEAN / "index").iterdir()).read_bytes())
    reader = IndexFileReader(bytes(data), CFG)
    assert lookup_reachable(reader).all()  # a file the broker wrote: every entry is on its slot's chain
    chains = []
    for newest in reader.slots[reader.slots > 0].tolist():
        chains.append([newest])
        while int(reader.entries[chains[-1][-1]]["prev_index"]) > 0:
            chains[-1].append(int(reader.entries[chains[-1][-1]]["prev_index"]))
    return data, chains


def _set_prev_index(data: bytearray, entry: int, prev: int) -> None:
    struct.pack_into(">i", data, 40 + CFG.maxHashSlotNum * 4 + entry * 20 + 16, prev)


def test_a_broken_chain_hides_the_older_entries_and_a_cycle_stops() -> None:
    data, chains = _clean_index_chains()
    chain = max(chains, key=len)
    assert len(chain) >= 3
    _set_prev_index(data, chain[0], chain[0])  # prevIndex = itself: the walk ends
    broken = lookup_reachable(IndexFileReader(bytes(data), CFG))
    assert not broken[chain[1] - 1] and broken[chain[0] - 1]
    _set_prev_index(data, chain[1], chain[0])  # a two-entry cycle
    _set_prev_index(data, chain[0], chain[1])
    cyclic = lookup_reachable(IndexFileReader(bytes(data), CFG))  # returns: the walk stops at a revisited entry
    assert cyclic[chain[0] - 1] and cyclic[chain[1] - 1] and not cyclic[chain[2] - 1]


def test_entries_only_another_slots_walk_passes_are_not_found() -> None:
    """The chain of one slot cut after its newest entry, and another slot's chain led on into the cut-off
    entries: the broker's lookup of their keys walks only their own slot, so they are not found."""
    data, chains = _clean_index_chains()
    cut, led = sorted(chains, key=len)[-1], sorted(chains, key=len)[0]
    _set_prev_index(data, cut[0], 0)
    _set_prev_index(data, led[-1], cut[1])
    reach = lookup_reachable(IndexFileReader(bytes(data), CFG))
    assert reach[cut[0] - 1] and reach[[e - 1 for e in led]].all()
    assert not reach[[e - 1 for e in cut[1:]]].any()


# --- in Spark ----------------------------------------------------------------------------------


def test_crashed_fixture_is_classified_as_damage_md_says(spark, crashed_rebuilt, tmp_path) -> None:
    """Each of DAMAGE.md's six changes, with its consequences, and nothing else; the store is in use meanwhile."""
    from jobs.pipeline.audit_flow import audit
    from jobs.pipeline.context import Run

    store = copy_store(CRASHED, tmp_path / "crashed")
    before = tree_digest(store)
    broker = hold_lock(store)
    try:
        result = audit(Run(spark, CFG), str(store), str(crashed_rebuilt), str(tmp_path / "report"))
    finally:
        broker.kill()
        broker.wait()
    got = {(f.kind, f.file, f.queue_offset, f.commitlog_offset, f.count) for f in result.findings}
    cq, idx, cl = "consumequeue", "index/20261122015838886", "commitlog/00000000000001835008"
    assert got == {
        # 1. Metrics/0 file zero-filled from file offset 4000: queue offsets 1000..1199
        ("cq-zeroed-entries", f"{cq}/Metrics/0/00000000000000016000", 1000, 2_382_986, 200),
        # 2. Audit-Log/0 entry 517 redirected
        ("cq-wrong-entries", f"{cq}/Audit-Log/0/00000000000000008000", 517, 1_751_594, 1),
        # 3. indexCount lowered by 100: the header, the file, and the keys the lookup loses
        ("index-header-inconsistent", idx, None, None, 3),
        ("index-file-differs", idx, None, None, 1),
        ("index-keys-not-found", "index", None, 1_666_043, 623),  # distinct (keyHash, commitlog offset) pairs
        # 4. two CRC failures, and crash recovery from the lagging checkpoint truncating at the first
        ("crc-mismatch", cl, None, 1_965_519, None),
        ("crc-mismatch", cl, None, 1_965_763, None),
        ("recovery-would-truncate", cl, None, 1_965_519, MAX_OFFSET - 1_965_519),
        # 5. the zero-filled preallocated segment
        ("commitlog-preallocated", "commitlog/00000000000003538944", None, 3_538_944, None),
        # 6. abort: crash recovery, which deletes the IndexFile newer than indexMsgTimestamp
        ("abort-marker", "abort", None, None, None),
        ("index-deleted-on-recovery", "index/20261122015839765", None, None, None),
        # the lock held by another process while the audit ran
        ("store-in-use", "lock", None, None, 0),
    }
    assert result.exit_code == 1
    assert tree_digest(store) == before, "the audit wrote into the store"
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["format"] == "rmqstore-audit/1"
    assert set(report) == {
        "format",
        "run",
        "summary",
        "findings",
        "queues",
        "index_files",
        "repairs",
        "plan",
        "verdict",
    }
    assert (
        report["summary"]["index"]["keys_checked"] == report["summary"]["index"]["keys_total"] == 24670
    )  # the broker's entries
    assert len(report["queues"]) == 25
    assert {r["file"] for r in report["repairs"]} == {
        f"{cq}/Metrics/0/00000000000000016000",
        f"{cq}/Audit-Log/0/00000000000000008000",
        idx,
    }
    html = (tmp_path / "report" / "report.html").read_text()
    assert "<svg" in html and "Metrics" in html
    assert "http://" not in html and "https://" not in html and "<script" not in html, "not self-contained"


def test_unreadable_or_vanished_queue_file_is_reported(tmp_path) -> None:
    from udfs.audit_tasks import QueueTask, audit_queue

    store = tmp_path / "s"
    (store / "consumequeue" / "T" / "0").mkdir(parents=True)
    qa = audit_queue(QueueTask("T", 0, ("00000000000000000000",), ()), str(store), str(tmp_path / "r"), CFG, 0, 0)
    assert qa.row is None and qa.findings[0].kind == "unreadable-file"


@pytest.mark.parametrize("fmt", [CONSUME_QUEUE, BATCH_CONSUME_QUEUE], ids=lambda f: f.name)
def test_hostile_topic_directory_names_are_reported_not_read(tmp_path, fmt: QueueFormat) -> None:
    """One lister for both kinds of queue: hostile names, names that are not UTF-8 and links are reported."""
    import os

    from jobs.pipeline.listing import list_queues

    cq = tmp_path / fmt.dir
    (cq / "Good" / "0").mkdir(parents=True)
    (cq / "Good" / "0" / "00000000000000000000").write_bytes(bytes(8000))
    (cq / "bad topic; rm -rf").mkdir()
    (cq / "Good" / "..x").mkdir()
    os.mkdir(bytes(cq) + b"/\xff\xfe")
    (cq / "Linked").symlink_to(cq / "Good")
    queues, findings = list_queues(str(tmp_path), fmt)
    assert list(queues) == [("Good", 0)]
    assert sorted(f.kind for f in findings) == ["hostile-name"] * 4


@pytest.mark.skipif(__import__("os").geteuid() == 0, reason="running as root: file permissions do not bite")
def test_unreadable_file_by_permissions(tmp_path) -> None:
    from udfs.audit_tasks import QueueTask, audit_queue

    d = tmp_path / "consumequeue" / "T" / "0"
    d.mkdir(parents=True)
    (d / "00000000000000000000").write_bytes(bytes(8000))
    (d / "00000000000000000000").chmod(0)
    qa = audit_queue(QueueTask("T", 0, ("00000000000000000000",), ()), str(tmp_path), str(tmp_path / "r"), CFG, 0, 0)
    assert qa.findings[0].kind == "unreadable-file"


def test_lock_detection(tmp_path) -> None:
    from jobs.pipeline.liveness import lock_held

    (tmp_path / "lock").write_bytes(b"lock")
    assert not lock_held(str(tmp_path))
    proc = hold_lock(tmp_path)
    try:
        assert lock_held(str(tmp_path))
    finally:
        proc.kill()
        proc.wait()
    assert not lock_held(str(tmp_path))


def test_recovery_stops_at_a_damaged_segment_end_too() -> None:
    """A bad magic in the middle of the log stops the broker's recovery like a CRC failure does."""
    segments = crashed_segments()
    bad = finding("segment-bad-magic", "commitlog/00000000000003276800", "magic", commitlog_offset=3_300_000)
    out = check_commitlog(segments, [bad], None, False, CFG, MAX_OFFSET, 0, 0)
    f = next(f for f in out if f.kind == "recovery-would-truncate")
    assert (f.commitlog_offset, f.count) == (3_300_000, MAX_OFFSET - 3_300_000)
    assert "normal recovery" in f.message
    assert "checkpoint-unreadable" in {f.kind for f in out}


def test_audit_cannot_audit_what_is_not_a_store(spark, tmp_path) -> None:
    (tmp_path / "store").mkdir()
    assert run_cli(["audit", "--store", str(tmp_path / "store"), "--report", str(tmp_path / "r")]) == 2
    store = copy_store(CLEAN, tmp_path / "clean")
    assert run_cli(["audit", "--store", str(store), "--report", str(store / "report")]) == 2
    assert not (store / "report").exists()


def test_an_audit_parses_the_commitlog_once(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """#8 item 5: an audit that rebuilds compares with its rebuild's parse, and one given --rebuilt scans the store
    once; neither parses the commitlog a second time for its comparisons (the records of RebuildResult)."""
    from jobs.pipeline import parse as parse_module
    from jobs.pipeline import rebuild_flow as rebuild_module
    from jobs.pipeline.audit_flow import audit
    from jobs.pipeline.context import Run
    from storelib.broker.config import BrokerConfig
    from storelib.synthetic.generator import generate_store
    from storelib.synthetic.spec import GeneratorSpec

    cfg = BrokerConfig(
        mappedFileSizeCommitLog=1 << 16, mappedFileSizeConsumeQueue=400, maxHashSlotNum=97, maxIndexNum=400
    )
    store = tmp_path / "store"
    generate_store(store, GeneratorSpec(messages=600, topics=2, queues_per_topic=2), cfg)
    rebuilt = tmp_path / "rebuilt"
    rebuild_module.rebuild(Run(spark, cfg), str(store), str(rebuilt))
    parses: list[str] = []
    parse_store = parse_module.parse_store

    def counted(run: Run, segments: list, mode: str, scratch: str, *whole: object) -> object:
        parses.append(mode)
        return parse_store(run, segments, mode, scratch, *whole)

    monkeypatch.setattr(parse_module, "parse_store", counted)
    assert audit(Run(spark, cfg), str(store), None, str(tmp_path / "r1")).exit_code == 0
    assert parses == ["dispatch"]  # its own rebuild
    parses.clear()
    assert audit(Run(spark, cfg), str(store), str(rebuilt), str(tmp_path / "r2")).exit_code == 0
    assert parses == ["dispatch"]  # the scan of the audited segments


def test_a_zeroed_sector_in_a_middle_segment_costs_its_messages_only(spark, tmp_path) -> None:
    """4 KiB zeroed at file offset 12,288 of clean/'s segment 393216 (clean shutdown): the audit names the damaged
    byte range, the rebuild indexes the segment's records on both sides of it (no segment is left out), the live
    units of the 16 messages there are cq-damaged-entries (not wrong ones), and recover leaves those queues alone."""
    from jobs.pipeline.audit_flow import audit
    from jobs.pipeline.context import Run

    store = copy_store(CLEAN, tmp_path / "store")
    seg = store / "commitlog" / "00000000000000393216"
    data = bytearray(seg.read_bytes())
    data[12288 : 12288 + 4096] = bytes(4096)
    seg.write_bytes(bytes(data))
    result = audit(Run(spark, CFG), str(store), None, str(tmp_path / "report"))
    kinds = {f.kind for f in result.findings}
    assert "segments-skipped" not in kinds and not any(k.startswith("segment-") for k in kinds)
    (hole,) = [f for f in result.findings if f.kind == "damaged-records"]
    # the record at 12,324 is the first whose header the zeros hit; the next sound record starts at 16,409
    assert (hole.file, hole.commitlog_offset, hole.count) == (f"commitlog/{seg.name}", 393216 + 12324, 16409 - 12324)
    damaged = {
        (f.topic, f.queue_id, f.queue_offset, f.count) for f in result.findings if f.kind == "cq-damaged-entries"
    }
    gaps = {(f.topic, f.queue_id, f.queue_offset, f.count) for f in result.findings if f.kind == "queue-offset-gap"}
    assert damaged == gaps and sum(n for *_, n in damaged) == 16
    wrong = [(f.topic, f.queue_offset) for f in result.findings if f.kind == "cq-wrong-entries"]
    assert wrong == [("OrderCreated", 188)]  # the record the zeros end inside of: its properties (TAGS) zeroed
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    stopping = {(k.split("/")[1], int(k.split("/")[2])) for k in report["plan"]["stopping"]}
    assert stopping == {(t, q) for t, q, _, _ in damaged}  # recover would not hide the sound units after them


RECOVERED = Checkpoint(LAST_TS, LAST_TS, LAST_TS)  # the checkpoint recover writes for clean/'s records


def test_the_checkpoint_fixes_a_truncation_only_where_the_new_start_lies_past_the_damage() -> None:
    """Crash recovery from crashed/'s lagging checkpoint starts at the first segment. With recover's checkpoint it
    starts at the last one: a CRC failure two segments before is then never walked (recover fixes it); one in the
    last segment is still walked and truncated at (recover does not)."""
    ckpt = Checkpoint.unpack((CRASHED / "checkpoint").read_bytes())
    segments = crashed_segments()
    last = [s for s in segments if s.messages][-1]
    assert recovery_start(segments, RECOVERED, abort=True) == segments.index(last)
    early = finding("crc-mismatch", f"commitlog/{segments[-4].file}", "BODYCRC", commitlog_offset=segments[-4].start)
    out = check_commitlog(segments, [early], ckpt, True, CFG, MAX_OFFSET, LAST_TS, LAST_TS, -1, RECOVERED)
    (f,) = [f for f in out if KINDS[f.kind].truncation]
    assert (f.kind, f.commitlog_offset) == ("recovery-would-truncate", segments[-4].start)
    assert f"with recover's new checkpoint it starts at segment {last.file}, past the damage" in f.message
    late = finding("crc-mismatch", f"commitlog/{last.file}", "BODYCRC", commitlog_offset=last.start + 100)
    out = check_commitlog(segments, [late], ckpt, True, CFG, MAX_OFFSET, LAST_TS, LAST_TS, -1, RECOVERED)
    (f,) = [f for f in out if KINDS[f.kind].truncation]
    assert (f.kind, f.commitlog_offset) == ("recovery-would-truncate-after-recover", last.start + 100)
    assert "still stops at the damage: recover does not prevent this truncation" in f.message


def test_a_crc_failure_in_the_segment_crash_recovery_starts_at_is_not_claimed_by_the_checkpoint(
    spark, tmp_path
) -> None:
    """One body byte flipped in clean/'s last segment, abort present: crash recovery truncates there (76 messages),
    and does with recover's checkpoint too (it starts at that segment): the plan's checkpoint step does not claim
    it. (crashed/'s truncation, two segments earlier, is the one it fixes: test_crashed_fixture_is_classified...)"""
    from jobs.pipeline.audit_flow import audit
    from jobs.pipeline.context import Run

    store = copy_store(CLEAN, tmp_path / "store")
    seg = store / "commitlog" / "00000000000003407872"
    data = bytearray(seg.read_bytes())
    data[397 + 100] ^= 0xFF  # a body byte of the segment's second record, at commitlog offset 3,408,269
    seg.write_bytes(bytes(data))
    (store / "abort").write_bytes(b"")
    audit(Run(spark, CFG), str(store), None, str(tmp_path / "report"))
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    (cut,) = [f for f in report["findings"] if KINDS[f["kind"]].truncation]
    assert (cut["kind"], cut["commitlog_offset"]) == ("recovery-would-truncate-after-recover", 3_408_269)
    assert report["verdict"]["truncate"]["messages"] == 76
    claimed = {r["kind"] for s in report["verdict"]["recover"]["steps"] for r in s["resolves"]}
    assert claimed == {"index-deleted-on-recovery"}
