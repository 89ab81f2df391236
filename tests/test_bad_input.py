"""What the tool does with bad input, hostile stores and a full disk (no traceback, nothing written where it must
not be), and the damage a store can hold without recover making it worse.

The oracles read the files with struct, not with storelib.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jobs.pipeline import transaction
from jobs.pipeline.context import Run
from jobs.pipeline.listing import list_queues
from jobs.pipeline.rebuild_flow import check_output
from jobs.pipeline.recover_flow import undo
from storelib.broker.config import BrokerConfig
from storelib.errors import BadInput, Refused, RmqStoreError
from storelib.formats.indexfile import IndexFileReader, build_index_file_head, index_file_size
from storelib.formats.javahash import index_key_hash, java_hash
from storelib.reports.plan import Step
from tests.storecopy import tree_digest

ROOT = Path(__file__).resolve().parents[1]
UNIT = struct.Struct(">qiq")  # a ConsumeQueue unit: commitlog offset, size, tagsCode
MAGIC_V1, MAGIC_V2, BLANK_MAGIC = -626843481, -626843477, -875286124


def cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``rmqstore ARGV`` in its own process, as a person runs it."""
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def no_traceback(p: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    return p.stderr


def mini_store(tmp_path: Path) -> tuple[Path, Path]:
    """A stopped store with one queue file, and a 'rebuilt' directory holding a new version of it and a new queue."""
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    (store / "commitlog" / "00000000000000000000").write_bytes(bytes(4096))
    (store / "consumequeue" / "T" / "0").mkdir(parents=True)
    (store / "consumequeue" / "T" / "0" / "00000000000000000000").write_bytes(b"old" * 100)
    rebuilt = tmp_path / "rebuilt"
    for rel, data in (("T/0/00000000000000000000", b"new" * 100), ("U/1/00000000000000000000", b"created" * 10)):
        (rebuilt / "consumequeue" / rel).parent.mkdir(parents=True, exist_ok=True)
        (rebuilt / "consumequeue" / rel).write_bytes(data)
    return store, rebuilt


STEPS = [
    Step("replace", "consumequeue/T/0/00000000000000000000", "test", "consumequeue/T/0/00000000000000000000"),
    Step("create", "consumequeue/U/1/00000000000000000000", "test", "consumequeue/U/1/00000000000000000000"),
]


# --- 3. recover --undo trusts its manifest ---------------------------------------------------------------


def test_undo_removes_the_files_and_the_directories_recover_created(tmp_path: Path) -> None:
    store, rebuilt = mini_store(tmp_path)
    before = tree_digest(store)
    dirs_before = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_dir())
    transaction.apply(STEPS, str(store), str(rebuilt), tmp_path / "backup", BrokerConfig())
    assert (store / "consumequeue" / "U" / "1" / "00000000000000000000").read_bytes() == b"created" * 10
    undo(str(store), tmp_path / "backup")
    assert tree_digest(store) == before
    assert sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_dir()) == dirs_before


def _manifest(store: Path, steps: list[dict[str, object]]) -> dict[str, object]:
    return {"format": "rmqstore-recover-backup/1", "store": str(store.resolve()), "state": "applied", "steps": steps}


def test_undo_refuses_a_manifest_whose_paths_leave_the_store(tmp_path: Path) -> None:
    store, _ = mini_store(tmp_path)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    other = tmp_path / "other"
    other.write_bytes(b"also precious")
    os.symlink(tmp_path, store / "consumequeue" / "T" / "up")
    evil = b"evil"
    backup = tmp_path / "backup"
    (backup / "files").mkdir(parents=True)
    (backup / "files" / "00000").write_bytes(evil)
    sha = hashlib.sha256(evil).hexdigest()
    cases = [
        {"action": "replace", "file": "../victim", "backup": "files/00000", "size": 4, "sha256": sha},
        {"action": "replace", "file": "consumequeue/T/up/victim", "backup": "files/00000", "size": 4, "sha256": sha},
        {"action": "create", "file": "../other", "backup": None},
        {"action": "create", "file": str(other), "backup": None},
        {"action": "replace", "file": "consumequeue/T/0/x", "backup": "../victim", "size": 8, "sha256": sha},
    ]
    for entry in cases:
        (backup / "manifest.json").write_text(json.dumps(_manifest(store, [entry])))
        p = cli("recover", "--store", str(store), "--undo", str(backup))
        assert p.returncode == 1 and "refused" in no_traceback(p), entry
        assert victim.read_bytes() == b"precious" and other.read_bytes() == b"also precious"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "not a readable recover manifest"),
        ("[1, 2]", "not a recover backup manifest"),
        (json.dumps({"format": "rmqstore-recover-backup/1"}), "is of the store None"),
        ("STEPS", "must be lists"),
        ("ENTRY", "is not a step recover writes"),
    ],
)
def test_undo_says_what_is_wrong_with_a_manifest_it_did_not_write(tmp_path: Path, text: str, says: str) -> None:
    store, _ = mini_store(tmp_path)
    backup = tmp_path / "backup"
    backup.mkdir()
    if text == "STEPS":
        text = json.dumps(_manifest(store, {"file": "x"}))  # type: ignore[arg-type]
    elif text == "ENTRY":
        text = json.dumps(_manifest(store, [{"action": "replace", "backup": "files/00000"}]))
    (backup / "manifest.json").write_text(text)
    p = cli("recover", "--store", str(store), "--undo", str(backup))
    assert p.returncode in (1, 2) and says in no_traceback(p)


# --- 1. a zero unit written into a live queue -------------------------------------------------------------


@pytest.mark.parametrize(
    ("units", "stop"),
    [
        ([(0, 0x7FFFFFFF, 0), (100, 50, 0), (150, 50, 0)] + [(0, 0, 0)] * 5, None),  # pre-blank, entries, zeros
        ([(100, 50, 0), (0, 0, 0), (200, 50, 0)] + [(0, 0, 0)] * 5, 1),  # a gap inside a file
        ([(100, 50, 0)] * 3 + [(0, 0, 0)] + [(300, 50, 0)] + [(0, 0, 0)] * 3, 3),  # a gap at a file's last unit
        ([(100, 50, 0)] * 4 + [(0, 0, 0)] + [(-1, 50, 0)] * 3, None),  # nothing valid after the end
    ],
)
def test_a_rebuilt_queue_with_a_unit_the_broker_stops_at_is_found(tmp_path: Path, units: list, stop: int) -> None:
    from jobs.pipeline.audit_queues import rebuilt_queue_stop

    qdir = tmp_path / "consumequeue" / "T" / "0"
    qdir.mkdir(parents=True)
    for k in range(0, len(units), 4):  # files of 4 units (80 bytes)
        (qdir / f"{k * 20:020d}").write_bytes(b"".join(UNIT.pack(*u) for u in units[k : k + 4]))
    assert rebuilt_queue_stop(str(tmp_path), "consumequeue/T/0") == stop


# --- 4. never write into a store by any path ------------------------------------------------------------


def test_outputs_reached_through_symbolic_links_are_refused(tmp_path: Path) -> None:
    from jobs.pipeline.backup import check_backup_dir
    from jobs.pipeline.listing import check_outside_store

    store, _ = mini_store(tmp_path)
    link = tmp_path / "L"
    os.symlink(store, link)
    (tmp_path / "elsewhere").mkdir()
    for option, uri in (("--out", link / "rebuilt"), ("--work-dir", link / "work"), ("--report", link / "rep")):
        with pytest.raises(BadInput, match="overlaps the store"):
            check_outside_store(str(store), str(uri), option)
    with pytest.raises(BadInput, match="overlaps the store"):
        check_output(str(store), str(link / "rebuilt"))
    with pytest.raises(BadInput, match="overlaps the store"):  # the store given through the link
        check_output(str(link), str(store / "rebuilt"))
    with pytest.raises(BadInput, match="overlaps the store"):
        check_output(str(store), str(tmp_path / "elsewhere" / "out"), work_dir=str(link / "consumequeue"))
    with pytest.raises(BadInput, match="overlaps the store"):
        check_backup_dir(str(store), link / "backup")
    check_output(str(store), str(tmp_path / "elsewhere" / "out"))  # a sound output is accepted

    from jobs.pipeline.audit_flow import audit

    with pytest.raises(BadInput, match="overlaps the store"):
        audit(Run(None, BrokerConfig()), str(store), None, str(link / "rep"))  # before any Spark work
    with pytest.raises(BadInput, match="overlaps the store"):
        audit(Run(None, BrokerConfig(), work_root=str(link)), str(store), None, str(tmp_path / "rep"))


def test_a_path_that_cannot_be_resolved_is_refused(tmp_path: Path) -> None:
    """10: a dangling-symlink --out, and a link loop, are clear errors before any work."""
    store, _ = mini_store(tmp_path)
    os.symlink(tmp_path / "nowhere" / "out", tmp_path / "dangling")
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    for out in (tmp_path / "dangling", tmp_path / "loop" / "out"):
        with pytest.raises(BadInput, match="cannot resolve"):
            check_output(str(store), str(out))
    assert not (tmp_path / "nowhere").exists()


# --- 10. a full disk during recover --apply, an existing --backup-dir -----------------------------------


def test_an_existing_backup_dir_is_refused_before_any_work(tmp_path: Path) -> None:
    store, _ = mini_store(tmp_path)
    (tmp_path / "backup").mkdir()
    p = cli("recover", "--store", str(store), "--backup-dir", str(tmp_path / "backup"), "--apply")
    assert p.returncode == 2 and "exists" in no_traceback(p)
    assert "Spark" not in p.stderr and "spark" not in p.stdout  # no session was started


@pytest.fixture
def small_fs(tmp_path: Path):
    """A 2 MiB tmpfs (needs root), unmounted afterwards."""
    mount = tmp_path / "small"
    mount.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if p.returncode:
        pytest.skip(f"cannot mount a tmpfs: {p.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def _big_rebuilt(tmp_path: Path) -> Path:
    """A rebuilt queue file of 3 MiB: more than the small filesystem holds."""
    rebuilt = tmp_path / "rebuilt"
    shutil.rmtree(rebuilt, ignore_errors=True)
    for rel, data in (("T/0/00000000000000000000", b"new" * 100), ("U/1/00000000000000000000", bytes(3 << 20))):
        (rebuilt / "consumequeue" / rel).parent.mkdir(parents=True, exist_ok=True)
        (rebuilt / "consumequeue" / rel).write_bytes(data)
    return rebuilt


def test_recover_checks_free_space_before_it_starts(tmp_path: Path, small_fs: Path) -> None:
    store, _ = mini_store(small_fs)
    rebuilt = _big_rebuilt(tmp_path)
    before = tree_digest(store)
    with pytest.raises(Refused, match="not enough free space"):
        transaction.apply(STEPS, str(store), str(rebuilt), tmp_path / "backup", BrokerConfig())
    assert tree_digest(store) == before and not (tmp_path / "backup").exists()


def test_a_failure_while_applying_undoes_every_change(tmp_path: Path, small_fs: Path, monkeypatch) -> None:
    """The disk fills up after the space check (another writer): ENOSPC on the second step; the first is undone."""
    store, _ = mini_store(small_fs)
    rebuilt = _big_rebuilt(tmp_path)
    before = tree_digest(store)
    monkeypatch.setattr(transaction, "check_free_space", lambda *args: None)
    with pytest.raises(RmqStoreError, match="every change was undone") as err:
        transaction.apply(STEPS, str(store), str(rebuilt), tmp_path / "backup", BrokerConfig())
    assert "No space left on device" in str(err.value)
    assert tree_digest(store) == before
    assert not (store / ".rmqstore-recover-tmp").exists() and not (store / "consumequeue" / "U").exists()
    assert json.loads((tmp_path / "backup" / "manifest.json").read_text())["state"] == "rolled-back"


# --- 11. settings with no upper bound, endless config files ----------------------------------------------


def test_bad_settings_and_endless_config_files_are_clear_errors(tmp_path: Path) -> None:
    store, _ = mini_store(tmp_path)
    conf = tmp_path / "broker.conf"
    conf.write_text("maxHashSlotNum=2147483647\n")
    for argv in (
        ("inspect", str(store), "--broker-config", str(conf)),
        ("inspect", str(store), "--broker-config", "/dev/zero"),
        ("audit", "--store", str(store), "--report", str(tmp_path / "rep"), "--index-sample", "-1"),
        ("generate", "--out", str(tmp_path / "gen"), "--broker-config", str(conf), "--messages", "10"),
    ):
        p = cli(*argv, timeout=30)
        assert p.returncode == 2, (argv, p.stderr)
        says = no_traceback(p)
        assert "must be at least 1" in says or str(conf) in says or "/dev/zero" in says, says
    assert not (tmp_path / "gen").exists() or not any((tmp_path / "gen").rglob("*"))


# --- 9. a cycle in an IndexFile hash chain ----------------------------------------------------------------


def test_a_cycle_in_a_hash_chain_ends_the_lookup_and_is_recorded() -> None:
    cfg = BrokerConfig(maxHashSlotNum=7, maxIndexNum=10)
    key = "T#k"
    key_hash = int(index_key_hash(np.array([java_hash(key)]))[0])
    other = next(h for h in range(1, 1000) if h % 7 == key_hash % 7 and h != key_hash)
    hashes = np.array([other, other, other], dtype=np.int32)  # one chain: entry 3 -> 2 -> 1, none of them the key
    _, head = build_index_file_head(hashes, np.array([0, 100, 200]), np.array([1000, 1000, 1000]), (0, 0), cfg)
    data = bytearray(head.ljust(index_file_size(7, 10), b"\0"))
    entry1 = 40 + 7 * 4 + 1 * 20
    struct.pack_into(">i", data, entry1 + 16, 3)  # entry 1's prevIndex back to entry 3: a cycle
    reader = IndexFileReader(bytes(data), cfg, "index/x")
    assert reader.select_phy_offsets(key, 32, 0, 1 << 62) == []  # returns instead of walking forever
    assert list(reader.broken_chains) == [key_hash % 7] and "cycle" in reader.broken_chains[key_hash % 7]


# --- 8. symbolic links under consumequeue/ ----------------------------------------------------------------


def test_a_linked_topic_directory_is_reported_and_not_followed(tmp_path: Path) -> None:
    store, _ = mini_store(tmp_path)
    outside = tmp_path / "outside" / "0"
    outside.mkdir(parents=True)
    (outside / "00000000000000000000").write_bytes(UNIT.pack(0, 100, 0))
    os.symlink(tmp_path / "outside", store / "consumequeue" / "LinkedTopic")
    os.symlink(outside, store / "consumequeue" / "T" / "1")
    queues, findings = list_queues(str(store))
    assert set(queues) == {("T", 0)}
    linked = {f.file: f for f in findings}
    assert set(linked) == {"consumequeue/LinkedTopic", "consumequeue/T/1"}
    assert all(f.kind == "hostile-name" and "not followed" in f.message for f in linked.values())


# --- 5, 6. the crash tail of a memory-mapped segment, one damaged record -----------------------------------

SEGMENT = 64 * 1024


def _judged(tmp_path: Path, data: bytes) -> tuple[list, dict]:
    """One segment parsed as a parse task does (no Spark), its summary settled and judged as the rebuild does."""
    from jobs.pipeline.rebuild_flow import judge, read_parsed
    from storelib.broker.segments import Piece, Segment
    from udfs.parse import parse_segment

    path = tmp_path / "commitlog" / "00000000000000000000"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    seg = Segment(str(path), path.name, 0, len(data))
    cfg = BrokerConfig(mappedFileSizeCommitLog=SEGMENT)
    for _ in parse_segment(seg, cfg, "dispatch", str(tmp_path / "scratch")):
        pass
    summaries = read_parsed(str(tmp_path / "scratch"), [[Piece(seg, 0, seg.size)]]).summaries
    findings: list = []
    assert judge([seg], summaries, findings, "stop") == []  # never a DamageStop
    return findings, summaries


@pytest.mark.parametrize("written", [struct.pack(">ii", 300, MAGIC_V1), struct.pack(">iiiii", 300, MAGIC_V1, 7, 1, 0)])
def test_the_first_bytes_of_a_record_then_zeros_are_a_torn_tail(tmp_path: Path, written: bytes) -> None:
    from storelib.broker.segments import max_offset
    from tests.builders import encode_segment, msg

    data, _ = encode_segment([msg(queue_offset=i, body=b"x" * 50) for i in range(5)])
    end = len(data)
    findings, summaries = _judged(tmp_path, (data + written).ljust(SEGMENT, b"\0"))
    assert [(f.kind, f.severity, f.commitlog_offset, f.file_offset) for f in findings] == [
        ("commitlog-torn-tail", "warning", end, end)
    ]
    (summary,) = summaries.values()
    assert summary.messages == 5 and summary.end_offset == end
    assert max_offset([_segment()], summaries) == end


def test_one_record_whose_lengths_do_not_add_up_costs_only_that_record(tmp_path: Path) -> None:
    from tests.builders import encode_segment, msg

    data, offsets = encode_segment([msg(queue_offset=i, body=b"x" * 50) for i in range(5)], size=SEGMENT, blank=True)
    data = bytearray(data)
    struct.pack_into(">i", data, offsets[2] + 84, 51)  # BODYLENGTH of record 2 (IPv4 hosts) one too many
    findings, summaries = _judged(tmp_path, bytes(data))
    assert [(f.kind, f.commitlog_offset) for f in findings] == [("length-mismatch", offsets[2])]
    (summary,) = summaries.values()
    assert summary.messages == 4 and summary.end_reason == "blank"


def _segment():
    from storelib.broker.segments import Segment

    return Segment("", "00000000000000000000", 0, SEGMENT)


# --- generated stores with damage (Spark) ----------------------------------------------------------------

CFG = BrokerConfig(
    mappedFileSizeCommitLog=64 * 1024, mappedFileSizeConsumeQueue=2000, maxHashSlotNum=97, maxIndexNum=400
)
SYSTEM_TOPICS = ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC")


@dataclasses.dataclass(frozen=True)
class Rec:
    """A message record as the test reads it (struct, after the 4.9.8 layout)."""

    offset: int
    size: int
    topic: str
    topic_at: int  # commitlog offset of the topic's first byte
    queue_id: int
    queue_offset: int
    body_length_at: int
    store_timestamp_at: int
    dispatched: bool  # reaches the ConsumeQueue: not a PREPARED or ROLLBACK half


def walk(store: Path) -> list[Rec]:
    """Every message record of every segment, in order, up to the first thing that is not one."""
    out = []
    for seg in sorted((store / "commitlog").iterdir()):
        data, base, pos = seg.read_bytes(), int(seg.name), 0
        while pos + 8 <= len(data):
            total, magic = struct.unpack_from(">ii", data, pos)
            if magic not in (MAGIC_V1, MAGIC_V2) or total <= 0:
                break
            queue_id, _, queue_offset, _, sys_flag = struct.unpack_from(">iiqqi", data, pos + 12)
            born = 20 if sys_flag & 0x10 else 8
            stored = 20 if sys_flag & 0x20 else 8
            body_at = pos + 68 + born + stored
            (body_length,) = struct.unpack_from(">i", data, body_at)
            topic_at = body_at + 4 + body_length
            wide = magic == MAGIC_V2
            (topic_length,) = struct.unpack_from(">h" if wide else ">b", data, topic_at)
            topic_at += 2 if wide else 1
            topic = data[topic_at : topic_at + topic_length].decode()
            tx = sys_flag & 0xC
            out.append(
                Rec(
                    base + pos,
                    total,
                    topic,
                    base + topic_at,
                    queue_id,
                    queue_offset,
                    base + body_at,
                    base + pos + 48 + born,
                    tx in (0, 8),
                )
            )
            pos += total
    return out


def poke(store: Path, offset: int, data: bytes) -> None:
    """Write ``data`` at commitlog ``offset``."""
    seg = store / "commitlog" / f"{offset - offset % CFG.mappedFileSizeCommitLog:020d}"
    with open(seg, "r+b") as f:
        f.seek(offset % CFG.mappedFileSizeCommitLog)
        f.write(data)


def tear_the_tail(store: Path, records: list[Rec]) -> int:
    """A crash in the middle of a memory-mapped write: TOTALSIZE, magic and two fields, then the zeros."""
    end = records[-1].offset + records[-1].size
    poke(store, end, struct.pack(">iiii", 300, MAGIC_V1, 0x12345678, 1))
    return end


def business(records: list[Rec], segment: int) -> list[Rec]:
    """Dispatched records of business topics in segment number ``segment``."""
    lo = segment * CFG.mappedFileSizeCommitLog
    return [
        r
        for r in records
        if lo <= r.offset < lo + CFG.mappedFileSizeCommitLog and r.dispatched and r.topic not in SYSTEM_TOPICS
    ]


@pytest.fixture(scope="module")
def clean_store(tmp_path_factory) -> Path:
    from storelib.synthetic.generator import generate_store
    from storelib.synthetic.spec import GeneratorSpec

    root = tmp_path_factory.mktemp("reliability") / "clean"
    generate_store(root, GeneratorSpec(messages=1500, topics=2, queues_per_topic=2, seed=11), CFG)
    return root


def queue_units(qdir: Path) -> list[tuple[int, int, int]]:
    """A live queue's units in queue-offset order, file after file (a missing file reads as zero units)."""
    names = sorted(int(p.name) for p in qdir.iterdir())
    out: list[tuple[int, int, int]] = []
    for start in range(names[0], names[-1] + 1, CFG.cq_file_size):
        path = qdir / f"{start:020d}"
        data = path.read_bytes() if path.exists() else bytes(CFG.cq_file_size)
        out += [UNIT.unpack_from(data, i) for i in range(0, len(data) - len(data) % 20, 20)]
    return out


def test_record_damage_keeps_its_segment_and_audit_names_hostile_topics_orphans_and_links(
    spark, clean_store: Path, tmp_path: Path
) -> None:
    """6: one record whose lengths do not add up costs only that record; 5: a torn crash tail is a warning at
    its offset with every record before it kept; 7: a hostile topic makes the audit incomplete; 13: an orphan
    queue is named; 8: a linked topic directory is reported, not followed."""
    from jobs.pipeline.audit_flow import audit
    from jobs.pipeline.rebuild_flow import rebuild
    from tests.storecopy import copy_store

    store = copy_store(clean_store, tmp_path / "store")
    records = walk(store)
    middle = business(records, 2)
    broken, hostile = middle[len(middle) // 3], middle[2 * len(middle) // 3]
    poke(store, broken.body_length_at, struct.pack(">i", 1 + (broken.topic_at - broken.body_length_at - 5)))
    poke(store, hostile.topic_at, b"/")
    torn_at = tear_the_tail(store, records)
    ghost = store / "consumequeue" / "Ghost" / "0"
    ghost.mkdir(parents=True)
    (ghost / "00000000000000000000").write_bytes(bytes(CFG.cq_file_size))
    (tmp_path / "outside" / "0").mkdir(parents=True)
    (tmp_path / "outside" / "0" / "00000000000000000000").write_bytes(UNIT.pack(0, 100, 0).ljust(2000, b"\0"))
    os.symlink(tmp_path / "outside", store / "consumequeue" / "LinkedTopic")

    result = rebuild(Run(spark, CFG), str(store), str(tmp_path / "rebuilt"))  # on_error=stop: no DamageStop
    report = result.report
    kinds = {f.kind: f for f in report.findings}
    assert "segments-skipped" not in kinds
    assert kinds["length-mismatch"].commitlog_offset == broken.offset
    torn = kinds["commitlog-torn-tail"]
    assert (torn.severity, torn.commitlog_offset) == ("warning", torn_at)
    assert report.commitlog.max_offset == torn_at
    per_segment = {s.start: s.messages for s in report.commitlog.segments}
    for start in per_segment:
        expected = sum(1 for r in records if start <= r.offset < start + CFG.mappedFileSizeCommitLog)
        assert per_segment[start] == expected - (start == 2 * CFG.mappedFileSizeCommitLog), start

    a = audit(Run(spark, CFG), str(store), str(tmp_path / "rebuilt"), str(tmp_path / "report"))
    found = {(f.kind, f.file) for f in a.findings}
    assert any(k == "hostile-topic-name" for k, _ in found) and a.report.summary.complete is False
    assert ("cq-empty-queue", "consumequeue/Ghost/0/00000000000000000000") in found
    assert ("hostile-name", "consumequeue/LinkedTopic") in found
    assert not any(k in ("cq-dirty-tail", "segments-skipped", "segment-zero-tail") for k, _ in found)
    rows = {(q.topic, q.queue_id): q for q in a.report.queues}
    assert rows[("Ghost", 0)].status == "warning" and ("LinkedTopic", 0) not in rows


def test_recover_never_writes_a_unit_the_broker_stops_at_and_truncates_a_torn_tail(
    spark, clean_store: Path, tmp_path: Path, capsys
) -> None:
    """1: a BLANK in the middle of a segment hides records, so their queues have gaps in the rebuild; recover
    leaves those queues alone and every entry the broker could read before it can still read after.
    5: the torn crash tail is zeroed with --truncate-torn-tail, and only from where the torn record starts."""
    from jobs.pipeline.rebuild_flow import rebuild
    from jobs.pipeline.recover_flow import recover
    from tests.storecopy import copy_store

    store = copy_store(clean_store, tmp_path / "store")
    records = walk(store)
    where = {r.offset: (r.topic, r.queue_id, r.queue_offset) for r in records}
    hidden = business(records, 2)[len(business(records, 2)) // 2]
    poke(store, hidden.offset, struct.pack(">ii", 3 * CFG.mappedFileSizeCommitLog - hidden.offset, BLANK_MAGIC))
    torn_at = tear_the_tail(store, records)
    last_segment = store / "commitlog" / f"{torn_at - torn_at % CFG.mappedFileSizeCommitLog:020d}"
    head = last_segment.read_bytes()[: torn_at % CFG.mappedFileSizeCommitLog]

    def readable() -> set[tuple[str, int, int]]:
        """(topic, queueId, queue offset) of every entry the broker reads: up to the first invalid unit."""
        out = set()
        for qdir in (store / "consumequeue").glob("*/*"):
            topic, queue_id, base = qdir.parent.name, int(qdir.name), min(int(p.name) for p in qdir.iterdir()) // 20
            for i, (offset, size, _) in enumerate(queue_units(qdir)):
                if offset < 0 or size <= 0:
                    break
                if size != 0x7FFFFFFF:
                    assert where.get(offset) == (topic, queue_id, base + i), (qdir, base + i)
                    out.add((topic, queue_id, base + i))
        return out

    before = readable()
    rebuild(Run(spark, CFG), str(store), str(tmp_path / "rebuilt"))
    code = recover(Run(spark, CFG), str(store), str(tmp_path / "rebuilt"), True, True, tmp_path / "backup")
    out = capsys.readouterr().out
    assert "left alone" in out and f"{hidden.topic}/{hidden.queue_id}" in out
    assert code == 1, out  # the gap queues' wrong entries stay: recover says so rather than hide them
    assert readable() >= before
    data = last_segment.read_bytes()
    assert data[: len(head)] == head and not any(data[len(head) :])


def test_a_rebuild_of_another_commitlog_state_is_refused(spark, clean_store: Path, tmp_path: Path) -> None:
    """2: the same segments, sizes and end offsets, one record's store time changed after the rebuild:
    audit and recover refuse with rebuilt-stale."""
    from jobs.pipeline.audit_flow import audit
    from jobs.pipeline.rebuild_flow import rebuild
    from jobs.pipeline.recover_flow import recover
    from tests.storecopy import copy_store

    store = copy_store(clean_store, tmp_path / "store")
    rebuild(Run(spark, CFG), str(store), str(tmp_path / "rebuilt"))
    r = business(walk(store), 1)[0]
    poke(store, r.store_timestamp_at, struct.pack(">q", 1_767_225_600_001))
    before = tree_digest(store)
    a = audit(Run(spark, CFG), str(store), str(tmp_path / "rebuilt"), None)
    stale = [f for f in a.findings if f.kind == "rebuilt-stale"]
    assert a.exit_code == 2 and [f.file for f in stale] == [f"commitlog/{CFG.mappedFileSizeCommitLog:020d}"]
    with pytest.raises(Refused, match="could not be audited"):
        recover(Run(spark, CFG), str(store), str(tmp_path / "rebuilt"), True, audited=a)
    assert tree_digest(store) == before
