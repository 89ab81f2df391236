"""Recover: refuses a running broker; on a damaged copy of crashed/ the plan is a dry run, --apply repairs
exactly what the audit found (with a backup), the store then audits clean and every ConsumeQueue entry reads
back its message, nothing outside the store and the backup changes, and --undo restores the damaged store."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from jobs.pipeline.context import Run
from jobs.pipeline.recover_flow import check_stopped, recover
from storelib.constants import MESSAGE_MAGIC_CODE
from storelib.errors import Refused
from storelib.formats.commitlog import decode_message
from storelib.formats.consumequeue import CQ_BLANK_SIZE, decode_units
from tests.storecopy import copy_store, hold_lock, run_cli, tree_digest

MAX_OFFSET = 3_444_995
INDEX_ENTRY_AT = 40 + 701 * 4 + 10 * 20  # entry 10 of an IndexFile of the fixture's settings


def test_refuses_while_the_lock_is_held(fixture_dir: Path, tmp_path: Path, capsys) -> None:
    store = copy_store(fixture_dir / "clean", tmp_path / "store")
    broker = hold_lock(store)
    try:
        with pytest.raises(Refused, match="locked by another process"):
            check_stopped(str(store))
        assert run_cli(["recover", "--store", str(store), "--apply"]) == 1
        assert "refused" in capsys.readouterr().err
    finally:
        broker.kill()
        broker.wait()
    check_stopped(str(store))


def test_refuses_when_abort_exists_and_a_broker_process_uses_the_store(fixture_dir: Path, tmp_path: Path) -> None:
    store = copy_store(fixture_dir / "crashed", tmp_path / "store")
    check_stopped(str(store))  # a crash leftover: abort, but no broker
    script = f'exec -a java {sys.executable} -c "import time; time.sleep(60)" "$0"'
    fake = subprocess.Popen(["bash", "-c", script, str(store)])
    cmdline = Path(f"/proc/{fake.pid}/cmdline")
    deadline = time.monotonic() + 30
    while not cmdline.read_bytes().startswith(b"java"):
        assert time.monotonic() < deadline, "the stand-in broker process never showed its java command line"
        time.sleep(0.05)
    try:
        with pytest.raises(Refused, match="broker looks alive"):
            check_stopped(str(store))
    finally:
        fake.kill()
        fake.wait()


def test_refuses_a_store_that_is_not_local() -> None:
    with pytest.raises(Refused, match="not a local path"):
        check_stopped("hdfs://nn/stores/broker-a")


def damage(store: Path) -> None:
    """Six more ConsumeQueue damages on top of crashed/'s, each in its own queue, a bad index entry,
    a hostile topic directory and a torn commitlog tail."""
    cq = store / "consumequeue"
    torn = cq / "Billing_v1" / "1" / "00000000000000000000"
    torn.write_bytes(torn.read_bytes()[:3990])  # story 1: a short file with a partial unit
    (cq / "OrderCreated" / "0" / "00000000000000008000").unlink()  # a file missing in the middle
    for p in (cq / "%DLQ%billing-consumer" / "0").iterdir():  # a queue missing entirely
        p.unlink()
    (cq / "%DLQ%billing-consumer" / "0").rmdir()
    (cq / "%DLQ%billing-consumer").rmdir()
    dirty = cq / "Metrics" / "5" / "00000000000000000000"
    data = bytearray(dirty.read_bytes())
    data[399 * 20 : 400 * 20] = struct.pack(">qiq", MAX_OFFSET, 180, 0)  # points at the end of the log
    dirty.write_bytes(bytes(data))
    (cq / "OrderCreated" / "1" / "00000000000000016000").write_bytes(bytes(8000))  # an empty extra last file
    (cq / "bad topic; rm -rf ~").mkdir()  # hostile name: reported, never read or changed
    (cq / "bad topic; rm -rf ~" / "x").write_bytes(b"keep me")
    index = store / "index" / "20261122015838209"
    data = bytearray(index.read_bytes())
    at = INDEX_ENTRY_AT
    data[at : at + 4] = struct.pack(">i", struct.unpack(">i", data[at : at + 4])[0] ^ 1)  # entry 10's keyHash
    index.write_bytes(bytes(data))
    last = store / "commitlog" / "00000000000003407872"
    data = bytearray(last.read_bytes())
    data[MAX_OFFSET - 3407872 : MAX_OFFSET - 3407872 + 8] = struct.pack(">ii", 200_000, MESSAGE_MAGIC_CODE)
    last.write_bytes(bytes(data))  # a record header whose TOTALSIZE runs past the segment: a torn tail


def read_back(store: Path, segment_size: int) -> int:
    """Every ConsumeQueue entry points at a record of its topic, queueId and queue offset; returns the count."""
    checked = 0
    segments: dict[int, bytes] = {}
    for qdir in sorted(d for d in (store / "consumequeue").glob("*/*") if d.name.isdigit()):
        topic, queue_id = qdir.parent.name, int(qdir.name)
        for f in sorted(qdir.iterdir()):
            units = decode_units(f.read_bytes())
            for i in np.flatnonzero((units["size"] > 0) & (units["size"] != CQ_BLANK_SIZE)):
                offset = int(units["offset"][i])
                start = offset // segment_size * segment_size
                if start not in segments:
                    segments[start] = (store / "commitlog" / f"{start:020d}").read_bytes()
                m = decode_message(segments[start], offset - start)
                assert (m.topic, m.queue_id, m.queue_offset) == (topic, queue_id, int(f.name) // 20 + int(i)), f
                checked += 1
    return checked


def test_recover_repairs_what_the_audit_found_and_undo_puts_it_back(
    spark, fixture_dir: Path, fixture_cfg, crashed_rebuilt: Path, tmp_path: Path, capsys
) -> None:
    from jobs.pipeline.audit_flow import audit

    store = copy_store(fixture_dir / "crashed", tmp_path / "store")
    damage(store)
    damaged = tree_digest(store)
    backup = tmp_path / "backup"
    outside = tree_digest(tmp_path, skip=(store, backup)) | tree_digest(crashed_rebuilt)

    before = audit(Run(spark, fixture_cfg), str(store), str(crashed_rebuilt), None)
    got = {(f.kind, f.file, f.queue_offset, f.count) for f in before.findings if f.kind.startswith("cq-")}
    cq = "consumequeue"
    assert got == {
        ("cq-zeroed-entries", f"{cq}/Metrics/0/00000000000000016000", 1000, 200),
        ("cq-wrong-entries", f"{cq}/Audit-Log/0/00000000000000008000", 517, 1),
        ("cq-torn-file", f"{cq}/Billing_v1/1/00000000000000000000", 199, 201),
        ("cq-missing-file", f"{cq}/OrderCreated/0/00000000000000008000", 400, 400),
        ("cq-missing-queue", f"{cq}/%DLQ%billing-consumer/0", 0, 6),
        ("cq-dirty-tail", f"{cq}/Metrics/5/00000000000000000000", 399, 1),
        ("cq-extra-file", f"{cq}/OrderCreated/1/00000000000000016000", 800, 0),
    }
    (bad,) = [f for f in before.findings if f.kind == "index-bad-entries"]
    assert (bad.file, bad.file_offset, bad.count) == ("index/20261122015838209", INDEX_ENTRY_AT, 1)
    kinds = {f.kind for f in before.findings}
    assert {"hostile-name", "commitlog-torn-tail", "index-file-differs"} <= kinds

    # dry run: the plan, nothing changed
    assert recover(Run(spark, fixture_cfg), str(store), str(crashed_rebuilt), False, True, backup, audited=before) == 0
    plan = capsys.readouterr().out
    assert "dry run" in plan and "zero commitlog/00000000000003407872 from file offset" in plan
    assert tree_digest(store) == damaged and not backup.exists()

    code = recover(Run(spark, fixture_cfg), str(store), str(crashed_rebuilt), True, True, backup, audited=before)
    out = capsys.readouterr().out
    assert code == 0, out
    manifest = json.loads((backup / "manifest.json").read_text())
    assert manifest["state"] == "applied"
    changed = {s["file"]: s["action"] for s in manifest["steps"]}
    assert changed == {
        f"{cq}/Metrics/0/00000000000000016000": "replace",
        f"{cq}/Audit-Log/0/00000000000000008000": "replace",
        f"{cq}/Billing_v1/1/00000000000000000000": "replace",
        f"{cq}/OrderCreated/0/00000000000000008000": "create",
        f"{cq}/%DLQ%billing-consumer/0/00000000000000000000": "create",
        f"{cq}/Metrics/5/00000000000000000000": "replace",
        f"{cq}/OrderCreated/1/00000000000000016000": "delete",
        "index/20261122015838886": "replace",
        "index/20261122015838209": "replace",
        "commitlog/00000000000003407872": "truncate",
        "checkpoint": "replace",
    }
    after = tree_digest(store)
    assert {k for k in after if after[k] != damaged.get(k)} | (set(damaged) - set(after)) == set(changed)
    assert read_back(store, fixture_cfg.mappedFileSizeCommitLog) == 11_956
    assert (store / "consumequeue" / "bad topic; rm -rf ~" / "x").read_bytes() == b"keep me"
    assert tree_digest(tmp_path, skip=(store, backup)) | tree_digest(crashed_rebuilt) == outside
    assert "re-audit: 0 repairable findings left" in out

    # undo: the damaged store, byte for byte
    assert run_cli(["recover", "--store", str(store), "--undo", str(backup)]) == 0
    assert tree_digest(store) == damaged
    assert json.loads((backup / "manifest.json").read_text())["state"] == "undone"


def test_generated_store_with_an_expired_head_is_repaired(spark, tmp_path: Path) -> None:
    """A store from storelib.synthetic.generator (retention deleted its first segment): a zeroed middle file, a queue
    missing entirely and a lost newest IndexFile (story 2) are found, and only those; recover repairs them."""
    from jobs.pipeline.audit_flow import audit
    from jobs.pipeline.rebuild_flow import rebuild
    from storelib.broker.config import BrokerConfig
    from storelib.synthetic.generator import generate_store
    from storelib.synthetic.spec import GeneratorSpec

    cfg = BrokerConfig(
        mappedFileSizeCommitLog=1 << 16, mappedFileSizeConsumeQueue=400, maxHashSlotNum=97, maxIndexNum=400
    )
    store = tmp_path / "store"
    generate_store(store, GeneratorSpec(messages=1500, topics=2, queues_per_topic=2, deleted_head_segments=1), cfg)
    rebuilt = tmp_path / "rebuilt"
    rebuild(Run(spark, cfg), str(store), str(rebuilt))
    queues = sorted((d for d in (store / "consumequeue").glob("*/*")), key=lambda d: -len(list(d.iterdir())))
    zeroed, gone = queues[0], queues[1]
    middle = sorted(zeroed.iterdir())[1]
    middle.write_bytes(bytes(middle.stat().st_size))
    shutil.rmtree(gone)
    newest = sorted((store / "index").iterdir())[-1]
    newest.unlink()

    before = audit(Run(spark, cfg), str(store), str(rebuilt), None)
    divergent = {(f.kind, f.file) for f in before.findings if f.severity != "info"}
    assert {k for k, _ in divergent} == {
        "cq-zeroed-entries",
        "cq-missing-queue",
        "index-missing-file",
        "index-keys-not-found",
    }
    assert ("cq-zeroed-entries", str(middle.relative_to(store))) in divergent
    assert ("cq-missing-queue", str(gone.relative_to(store))) in divergent
    assert recover(Run(spark, cfg), str(store), str(rebuilt), True, backup_dir=tmp_path / "backup", audited=before) == 0
    assert read_back(store, cfg.mappedFileSizeCommitLog) > 1000
    assert len(list((store / "index").iterdir())) == len(list((rebuilt / "index").iterdir()))


def test_recover_copies_a_chunk_at_a_time_and_zeros_stay_a_hole(tmp_path: Path) -> None:
    """Backups, new files and undo are poured CHUNK bytes at a time: a 1 GiB segment's truncate is never held in
    memory; the zeros it leaves are a hole; a source shorter than its piece is an error."""
    import hashlib
    import os
    import tracemalloc

    from jobs.pipeline.durable import CHUNK, Piece, write_durably

    segment = tmp_path / "segment"
    segment.write_bytes(os.urandom(1 << 20) * 40)
    tracemalloc.start()
    sha256 = write_durably(tmp_path / "new", [Piece.of_file(segment, 1 << 20, 40 << 20), Piece(None, 0, 200 << 20)])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 3 * CHUNK
    new = tmp_path / "new"
    assert new.stat().st_size == (39 + 200) << 20 and new.stat().st_blocks * 512 < 41 << 20
    expected = hashlib.sha256(segment.read_bytes()[1 << 20 :])
    for _ in range(200 // 8):
        expected.update(bytes(8 << 20))
    assert sha256 == expected.hexdigest()
    with pytest.raises(OSError, match="ends 1 bytes before byte"):
        write_durably(tmp_path / "short", [Piece.of_file(segment, 0, (40 << 20) + 1)])


def test_recover_creates_a_lost_index_file_where_the_broker_loads_it(
    spark, fixture_dir: Path, fixture_cfg, crashed_rebuilt: Path, tmp_path: Path, capsys
) -> None:
    """crashed/ without its first IndexFile: recover rewrites the later positions and creates the last file under a
    name after every live one (the broker loads IndexFiles in name order), so the re-audit is clean, the files in
    name order are clean/'s and the ConsumeQueues are clean/'s."""
    store = copy_store(fixture_dir / "crashed", tmp_path / "store")
    live = sorted(p.name for p in (store / "index").iterdir())
    (store / "index" / live[0]).unlink()
    code = recover(Run(spark, fixture_cfg), str(store), str(crashed_rebuilt), True, True, tmp_path / "backup")
    out = capsys.readouterr().out
    assert code == 0 and "re-audit: 0 repairable findings left" in out, out
    names = sorted(p.name for p in (store / "index").iterdir())
    assert names[:-1] == live[1:] and names[-1] > live[-1]
    clean = fixture_dir / "clean"
    assert [(store / "index" / n).read_bytes() for n in names] == [
        p.read_bytes() for p in sorted((clean / "index").iterdir())
    ]
    assert tree_digest(store / "consumequeue") == tree_digest(clean / "consumequeue")
