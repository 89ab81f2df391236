"""Issue 11: what the tool does with bad input, hostile stores and a full disk (no traceback, nothing written
where it must not be), and the damage a store can hold without recover making it worse.

Each test names the item of issue 11 it covers. The oracles read the files with struct, not with storelib.
"""

from __future__ import annotations

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

from jobs.pipeline import recover as recover_mod
from jobs.pipeline.context import Run
from jobs.pipeline.listing import check_outside_store, list_queues
from jobs.pipeline.rebuild import check_output
from jobs.pipeline.recover import Step, apply, check_backup_dir, undo
from storelib.config import BrokerConfig
from storelib.errors import BadInput, Refused, RmqStoreError
from storelib.indexfile import IndexFileReader, build_index_file_head, index_file_size
from storelib.javahash import index_key_hash, java_hash
from tests.storecopy import tree_digest

ROOT = Path(__file__).resolve().parents[1]
UNIT = struct.Struct(">qiq")  # a ConsumeQueue unit: commitlog offset, size, tagsCode


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
    apply(STEPS, str(store), str(rebuilt), tmp_path / "backup", BrokerConfig())
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


# --- 4. never write into a store by any path ------------------------------------------------------------


def test_outputs_reached_through_symbolic_links_are_refused(tmp_path: Path) -> None:
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

    from jobs.pipeline.audit import audit

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
        apply(STEPS, str(store), str(rebuilt), tmp_path / "backup", BrokerConfig())
    assert tree_digest(store) == before and not (tmp_path / "backup").exists()


def test_a_failure_while_applying_undoes_every_change(tmp_path: Path, small_fs: Path, monkeypatch) -> None:
    """The disk fills up after the space check (another writer): ENOSPC on the second step; the first is undone."""
    store, _ = mini_store(small_fs)
    rebuilt = _big_rebuilt(tmp_path)
    before = tree_digest(store)
    monkeypatch.setattr(recover_mod, "check_free_space", lambda *args: None)
    with pytest.raises(RmqStoreError, match="every change was undone") as err:
        apply(STEPS, str(store), str(rebuilt), tmp_path / "backup", BrokerConfig())
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
