"""The audit's model of the broker's next start (report.json ``run.restart``, storelib.broker.restart) against the real
broker: started on a copy of the same store, its store log says which recovery ran, from which segment, where
the commitlog ends after it and which IndexFiles it deleted."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from jobs.pipeline.audit_flow import audit
from jobs.pipeline.context import Run
from jobs.pipeline.rebuild_flow import rebuild
from jobs.pipeline.recover_flow import recover
from storelib.broker.config import load_broker_config
from tests.broker.harness import build_store, java_available, read_properties, restarted
from tests.reference import walk_commitlog

pytestmark = pytest.mark.broker

VERSIONS = ("5.5.0", "5.3.3", "4.9.7")
#: the broker's words (CommitLog.recoverNormally/recoverAbnormally, DefaultMessageStore.load, MappedFile.destroy)
SHUTDOWN = re.compile(r"last shutdown (normally|abnormally)")
START = re.compile(r"recover from this mapped file (\S+)")
WALK = re.compile(
    r"recover (?:next physics file, |physics file end, |(?:last 3 )?physics file over, last mapped file )(\S+)"
)
LOADED = re.compile(r"load over, and the max phy offset = (\d+)")
DELETED = re.compile(r"delete file\[REF:-?\d+\] (\S+/index/\d+) OK")


@dataclasses.dataclass(frozen=True)
class Start:
    """What one start of the broker did with a store."""

    crash: bool
    start_offset: int
    truncate_at: int
    deleted_index: frozenset[str]


def broker_start(lines: list[str], segment_size: int) -> Start:
    """The store log of one start read up to ``load over``: the segment recovery started at is the one it names
    (crash recovery), else the one before the first it moved on to, else the one it ended in."""
    loaded = next(i for i, line in enumerate(lines) if LOADED.search(line))
    text = lines[: loaded + 1]
    crash = next(m[1] for line in text if (m := SHUTDOWN.search(line))) == "abnormally"
    named = [int(Path(m[1]).name) for line in text if (m := START.search(line))]
    walked = [(line, int(Path(m[1]).name)) for line in text if (m := WALK.search(line))]
    line, first = walked[0]
    start = named[0] if named else first - segment_size if "next physics file" in line else first
    deleted = frozenset(f"index/{Path(m[1]).name}" for line in text if (m := DELETED.search(line)))
    return Start(crash, start, int(LOADED.search(lines[loaded])[1]), deleted)


def predicted(spark, root: Path, conf: Path, version: str, work: Path) -> Start:
    """The audit's prediction for the store at ``root`` under ``version``'s rules."""
    cfg = dataclasses.replace(load_broker_config(conf), brokerVersion=version)
    report = audit(Run(spark, cfg, work_root=str(work)), str(root), None, None).report
    r = report.run.restart
    deleted = frozenset(f.file for f in report.findings if f.kind == "index-deleted-on-recovery")
    return Start(r.crash, r.start_offset, r.truncate_at, deleted)


def torn_copy(version: str, dst: Path, crash: bool) -> Path:
    """A copy of the version's clean store whose last record lost its second half to zeros, as a power loss leaves
    it; with ``crash`` also the ``abort`` file a broker that did not shut down leaves."""
    root = shutil.copytree(build_store(version).root, dst, ignore=shutil.ignore_patterns("lock", "abort"))
    last = list(walk_commitlog(root / "commitlog"))[-1]
    size = load_broker_config(build_store(version).broker_conf).mappedFileSizeCommitLog
    seg = root / "commitlog" / f"{last.offset - last.offset % size:020d}"
    with open(seg, "r+b") as f:
        f.seek(last.offset % size + last.total_size // 2)
        f.write(bytes(last.total_size - last.total_size // 2))
    if crash:
        (root / "abort").touch()
    return root


@pytest.fixture(scope="module", autouse=True)
def _java() -> None:
    reason = java_available()
    if reason:
        pytest.skip(f"the real broker needs java, javac and mvn ({reason})")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_audit_predicts_the_broker_start_after_kill9(spark, tmp_path: Path, version: str) -> None:
    """kill -9 in the middle of the send burst: crash recovery from the segment the release's rules pick."""
    store = build_store(version, "kill9")
    expected = broker_start(restarted(version, store.root), segment_size(store.broker_conf))
    assert expected.crash
    assert predicted(spark, store.root, store.broker_conf, version, tmp_path) == expected


@pytest.mark.parametrize("crash", [False, True], ids=["normal", "crash"])
@pytest.mark.parametrize("version", VERSIONS)
def test_the_audit_predicts_the_broker_start_on_a_torn_tail(spark, tmp_path: Path, version: str, crash: bool) -> None:
    """The last record half zeros: both recoveries cut the commitlog at that record."""
    conf = build_store(version).broker_conf
    root = torn_copy(version, tmp_path / "store", crash)
    expected = broker_start(restarted(version, root, read_properties(conf)), segment_size(conf))
    assert expected.crash == crash
    assert predicted(spark, root, conf, version, tmp_path / "work") == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_the_audit_predicts_the_broker_start_after_recover(spark, tmp_path: Path, version: str) -> None:
    """A kill9 store after ``recover --apply``: its new checkpoint moves crash recovery's start."""
    store = build_store(version, "kill9")
    root = shutil.copytree(store.root, tmp_path / "store", ignore=shutil.ignore_patterns("lock"))
    run = Run(spark, dataclasses.replace(load_broker_config(store.broker_conf), brokerVersion=version))
    run = rebuild(run, str(root), str(tmp_path / "rebuilt")).run  # with the rules it settled
    assert recover(run, str(root), str(tmp_path / "rebuilt"), True, backup_dir=tmp_path / "backup") in (0, 1)
    expected = broker_start(
        restarted(version, root, read_properties(store.broker_conf)), run.cfg.mappedFileSizeCommitLog
    )
    assert predicted(spark, root, store.broker_conf, version, tmp_path / "work") == expected


def segment_size(conf: Path) -> int:
    return load_broker_config(conf).mappedFileSizeCommitLog
