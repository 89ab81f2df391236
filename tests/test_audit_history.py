"""``rmqstore audit --history`` and ``--since-last`` on the 4.9.8 fixture: a store whose last segments arrive
between nightly audits (clean/ without its last 3 segments, indexed by a rebuild, then clean/ itself)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from jobs.tables.history import SUMMARY, read_history, run_version
from tests.conftest import FIXTURE_DIR
from tests.storecopy import copy_store, run_cli

CLEAN = FIXTURE_DIR / "clean"
SEGMENTS = sorted(p.name for p in (CLEAN / "commitlog").iterdir())
NEW = 3  # segments written after the first audit
TAIL = SEGMENTS[-NEW - 1]  # the segment holding the first audit's commitlog max offset


def audit(store: Path, table: Path, report: Path, *extra: str) -> tuple[int, dict]:
    """``rmqstore audit --history TABLE --since-last`` of ``store``: the exit code and report.json."""
    argv = ["audit", "--store", str(store), "--report", str(report), "--history", str(table), "--since-last"]
    code = run_cli([*argv, "--store-id", "broker-a", "--broker-config", str(FIXTURE_DIR / "broker.conf"), *extra])
    return code, json.loads((report / "report.json").read_text())


def summaries(spark, table: Path, version: int | None = None) -> list[dict]:
    rows = read_history(spark, str(table), version).where(f"row_type = '{SUMMARY}'").orderBy("started_at").collect()
    return [r.asDict() for r in rows]


def test_since_last_audits_only_the_tail_and_records_every_run(
    spark, fixture_cfg, tmp_path, capsys, monkeypatch
) -> None:
    from jobs.pipeline.context import Run
    from jobs.pipeline.rebuild_flow import rebuild

    # clean/ as it was NEW segments ago: the commitlog without them, its index and checkpoint rebuilt
    store, table, rebuilt = copy_store(CLEAN, tmp_path / "store"), tmp_path / "history", tmp_path / "rebuilt"
    for name in SEGMENTS[-NEW:]:
        (store / "commitlog" / name).unlink()
    rebuild(Run(spark, fixture_cfg), str(store), str(rebuilt))
    for part in ("consumequeue", "index"):
        shutil.rmtree(store / part)
        shutil.copytree(rebuilt / part, store / part)
    shutil.copy(rebuilt / "checkpoint", store / "checkpoint")

    # 1. no clean run yet: a full audit, said so
    code, first = audit(store, table, tmp_path / "r1", "--rebuilt", str(rebuilt))
    assert code == 0, first["findings"]
    scope = first["run"]["scope"]
    assert scope["note"].startswith("no clean run of store broker-a") and scope["base_run_id"] is None
    assert scope["segments_audited"] == SEGMENTS[:-NEW] and scope["skipped"] == []
    assert "no clean run of store broker-a" in capsys.readouterr().out
    run1 = first["run"]["history"]["run_id"]
    assert first["run"]["history"]["version"] == run_version(spark, str(table), run1) == 0

    # 2. nothing new: only the segment holding the max offset, and what its messages touch
    code, second = audit(store, table, tmp_path / "r2", "--rebuilt", str(rebuilt))
    assert code == 0, second["findings"]
    scope = second["run"]["scope"]
    assert scope["base_run_id"] == run1 and scope["segments_audited"] == [TAIL]
    assert scope["from_offset"] == int(TAIL)
    skipped = f"{len(SEGMENTS) - NEW - 1} commitlog segments below offset {int(TAIL)} unchanged since run {run1} at "
    assert scope["skipped"][0].startswith(skipped)
    queues, index_files = len(first["queues"]), len(first["index_files"])
    assert [s.split(" unchanged")[0] for s in scope["skipped"][1:]] == [
        f"{queues - len(second['queues'])} queues without messages in the audited segments",
        f"{index_files - len(second['index_files'])} index files with no entry at or after offset {int(TAIL)}",
    ]
    assert 0 < len(second["queues"]) < queues and 0 < len(second["index_files"]) < index_files
    assert f"skipped {skipped}" in capsys.readouterr().out
    rows = summaries(spark, table)
    assert [(r["run_id"], r["exit_code"], r["base_run_id"]) for r in rows] == [
        (run1, 0, None),
        (second["run"]["history"]["run_id"], 0, run1),
    ]
    assert rows[0]["segments_audited"] == SEGMENTS[:-NEW] and rows[1]["segments_audited"] == [TAIL]
    assert rows[1]["skipped"] == scope["skipped"]
    assert (
        rows[1]["commitlog_max_offset"]
        == rows[0]["commitlog_max_offset"]
        == first["summary"]["commitlog"]["max_offset"]
    )

    # 3. the broker wrote NEW segments and indexed them; a queue they touch lost its last file, and one
    #    they do not touch lost everything: only the first is audited
    shutil.rmtree(store)
    copy_store(CLEAN, store)
    (store / "consumequeue" / "OrderCreated" / "0" / "00000000000000032000").unlink()
    shutil.rmtree(store / "consumequeue" / "Audit-Log" / "2")
    code, third = audit(store, table, tmp_path / "r3")
    assert code == 1
    assert third["run"]["scope"]["segments_audited"] == [TAIL, *SEGMENTS[-NEW:]]
    assert third["run"]["scope"]["base_run_id"] == second["run"]["history"]["run_id"]
    got = {(f["kind"], f["file"], f["queue_offset"], f["count"]) for f in third["findings"]}
    assert got == {("cq-missing-tail", "consumequeue/OrderCreated/0/00000000000000032000", 1600, 14)}
    assert ("Audit-Log", 2) not in {(q["topic"], q["queue_id"]) for q in third["queues"]}
    assert third["summary"]["commitlog"]["max_offset"] == 3_444_995

    history = read_history(spark, str(table))
    assert history.where(f"row_type = '{SUMMARY}'").count() == 3
    found = history.where("row_type = 'finding'").collect()
    assert [(f["run_id"], f["kind"], f["queue_offset"], f["store"]) for f in found] == [
        (third["run"]["history"]["run_id"], "cq-missing-tail", 1600, "broker-a")
    ]
    assert summaries(spark, table)[-1]["kinds"] == {"cq-missing-tail": 1}

    # time travel: the table as the first run left it
    assert [r["run_id"] for r in summaries(spark, table, version=0)] == [run1]
    assert read_history(spark, str(table), as_of_run=run1).count() == 1


def test_since_last_needs_history(tmp_path) -> None:
    assert run_cli(["audit", "--store", str(CLEAN), "--report", str(tmp_path / "r"), "--since-last"]) == 2


def test_a_run_that_cannot_audit_is_recorded_and_a_history_write_failure_is_exit_2(
    spark, tmp_path, capsys, monkeypatch
) -> None:
    (tmp_path / "store").mkdir()
    argv = ["audit", "--store", str(tmp_path / "store"), "--report", str(tmp_path / "r"), "--history"]
    assert run_cli([*argv, str(tmp_path / "history"), "--store-id", "broker-b"]) == 2
    [row] = summaries(spark, tmp_path / "history")
    assert (row["store"], row["exit_code"], row["findings"]) == ("broker-b", 2, 0)

    def fail(*_: object) -> int:
        raise OSError("disk full")

    monkeypatch.setattr("jobs.audit.append_history", fail)
    table = tmp_path / "tbl"
    code, report = audit(CLEAN, table, tmp_path / "r2")  # a clean audit, written once with where its row went
    assert (code, report["summary"]["exit_code"]) == (2, 0)
    assert report["run"]["history"] == {"table": str(table), "run_id": None, "error": "disk full"}
    assert report["run"]["scope"]["note"] == f"no clean run of store broker-a in {table} yet: full audit"
    assert f"could not write the history table {table}: disk full" in capsys.readouterr().err
