"""storelib.reports.inspection and ``rmqstore inspect``: the 4.9.8 sample store's facts, generated stores,
hostile names."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import inspect as inspect_job
from jobs.generate import broker_properties
from storelib.broker.config import BrokerConfig
from storelib.broker.detection import StoreFacts
from storelib.broker.rule_choice import select
from storelib.reports.inspection import inspect_store
from storelib.synthetic.generator import LONG_TOPIC, generate_store
from tests.builders import SMALL_CFG, SMALL_SPEC


def snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file's size, mtime and bytes: inspect must change none of them."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, p.read_bytes())
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, object]:
    """A generated store whose first two segments expired (no long topic: a clean store)."""
    root = tmp_path_factory.mktemp("inspect") / "store"
    spec = dataclasses.replace(SMALL_SPEC, long_topic=False, deleted_head_segments=2)
    return root, generate_store(root, spec, SMALL_CFG)


def run_verb(*argv: str) -> int:
    p = argparse.ArgumentParser()
    inspect_job.add_arguments(p)
    return inspect_job.run(p.parse_args(argv))


# --- the RocketMQ 4.9.8 sample store (facts from its README) -----------------------------------


def test_clean_fixture_matches_the_readme(fixture_dir, fixture_cfg):
    r = inspect_store(fixture_dir / "clean", fixture_cfg)
    assert (len(r.segments), r.blanks, r.messages) == (27, 26, 11_967)
    assert r.segments[-1].name == "00000000000003407872" and r.segments[-1].end == "zero-tail"
    assert r.segments[-1].end_offset == 3_444_995
    assert (len(r.queues), r.cq_files, sum(q.entries for q in r.queues)) == (25, 44, 11_956)
    queues = {(q.topic, q.queue_id): q for q in r.queues}
    assert (queues["Billing_v1", 1].files, queues["Billing_v1", 1].entries) == (1, 400)
    assert (queues["OrderCreated", 0].files, queues["OrderCreated", 0].entries) == (5, 1614)
    assert queues["Metrics", 5].max_offset == 398 and queues["SCHEDULE_TOPIC_XXXX", 17].entries == 26
    assert len(r.index_files) == 9 and [f.full for f in r.index_files] == [True] * 8 + [False]
    assert r.index_files[-1].index_count == 679 and sum(f.index_count - 1 for f in r.index_files) == 24_670
    assert r.checkpoint["physic_msg_timestamp"] == 1795312719780
    assert r.checkpoint["logics_msg_timestamp"] == r.segments[-1].last_store_timestamp == 1795312760863
    assert r.topics["Metrics"] == 5159 and r.topics["SCHEDULE_TOPIC_XXXX"] == 190
    assert r.lock and not r.abort and r.clean and r.all_problems() == []


def test_expired_fixture_shows_pre_blank_queues(fixture_dir, fixture_cfg):
    r = inspect_store(fixture_dir / "expired", fixture_cfg)
    assert (len(r.segments), r.blanks, r.messages) == (16, 15, 6_900)
    assert r.segments[0].name == "00000000000001441792"
    assert (r.cq_files, sum(q.entries for q in r.queues)) == (39, 6_892)
    assert len(r.index_files) == 5 and r.index_files[-1].index_count == 2270
    metrics0 = next(q for q in r.queues if (q.topic, q.queue_id) == ("Metrics", 0))
    assert metrics0.first_file == "00000000000000008000" and metrics0.pre_blank == 211
    assert metrics0.min_offset == 400 + 211 and metrics0.max_offset == 1399
    assert r.clean


def test_crashed_fixture_names_each_damage(fixture_dir, fixture_cfg):
    r = inspect_store(fixture_dir / "crashed", fixture_cfg)
    problems = "\n".join(r.all_problems())
    assert not r.clean and r.abort
    assert "crc-mismatch at offset 1965519" in problems and "crc-mismatch at offset 1965763" in problems
    assert "consumequeue/Metrics/0: 00000000000000024000: after the queue's end in 00000000000000016000" in problems
    assert "index/20261122015838886: not full, but a later file exists" in problems
    metrics0 = next(q for q in r.queues if (q.topic, q.queue_id) == ("Metrics", 0))
    assert (metrics0.entries, metrics0.max_offset, metrics0.stale_units) == (1000, 999, 200)
    # the zero-filled preallocated next segment is not damage: records end in the one before it
    assert r.segments[-1].records == 0 and "00000000000003538944" not in problems


# --- generated stores -----------------------------------------------------------------------------


def test_generated_store_agrees_with_its_summary_and_is_not_touched(generated):
    root, summary = generated
    before = snapshot(root)
    r = inspect_store(root, SMALL_CFG)
    assert snapshot(root) == before
    assert r.clean, r.all_problems()
    assert len(r.segments) == summary.segments and r.segments[0].start_offset == 2 * SMALL_CFG.mappedFileSizeCommitLog
    assert r.blanks == summary.blanks - 2
    assert (len(r.queues), r.cq_files, len(r.index_files)) == (summary.queues, summary.cq_files, summary.index_files)
    assert sum(f.index_count - 1 for f in r.index_files) == summary.index_entries
    assert any(q.pre_blank for q in r.queues)
    assert all(q.max_offset - q.min_offset + 1 == q.entries for q in r.queues)
    assert r.checkpoint["physic_msg_timestamp"] == r.segments[-1].last_store_timestamp
    assert not r.lock and not r.abort


def test_hostile_and_odd_names_are_reported_not_followed(tmp_path):
    root = tmp_path / "store"
    generate_store(root, dataclasses.replace(SMALL_SPEC, messages=300), SMALL_CFG)
    outside = tmp_path / "outside" / "0"
    outside.mkdir(parents=True)
    (outside / "00000000000000000000").write_bytes(bytes(SMALL_CFG.cq_file_size))
    cq = root / "consumequeue"
    for name in ("con$umer", "..evil", "a b"):
        (cq / name / "0").mkdir(parents=True)
        (cq / name / "0" / "00000000000000000000").write_bytes(bytes(20))
    os.symlink(tmp_path / "outside", cq / "LinkedTopic")
    (cq / "OrderCreated" / "x1").mkdir()
    short = next((cq / "Billing_v1" / "0").iterdir())
    short.write_bytes(short.read_bytes()[:100])
    (root / "commitlog" / "notes.txt").write_text("hi")
    os.symlink(outside / "00000000000000000000", root / "commitlog" / "99999999999999999999")  # never followed
    (root / "index" / "garbage\x1b[2J").write_bytes(b"\xff" * 100)
    r = inspect_store(root, SMALL_CFG)
    text = inspect_job.format_report(r, select("4.9", StoreFacts()))
    assert "\x1b" not in text  # a name never sends control characters to the terminal
    # the garbage header reads as -1 everywhere (eight 0xff bytes): -1 ms is 1969-12-31 23:59:59.999 UTC
    (row,) = [line for line in text.splitlines() if line.startswith("'garbage")]
    assert row.split() == ["'garbage\\x1b[2J'", *["1969-12-31", "23:59:59.999"] * 2, "-1", "-1", "-1", "-1", "no"]
    assert not any(line.startswith(("con$umer", "..evil", "LinkedTopic")) for line in text.splitlines())
    problems = "\n".join(r.all_problems())
    for name in ("con$umer", "..evil", "a b", "LinkedTopic"):
        assert f"consumequeue/{name}: " in problems, name
    assert "consumequeue/OrderCreated/x1: not a queueId; not followed" in problems
    assert f"consumequeue/Billing_v1/0: {short.name}: 100 bytes, expected 2000" in problems
    assert "commitlog/notes.txt: not a commitlog segment" in problems
    assert "commitlog/99999999999999999999: not a commitlog segment (name, type or a link)" in problems
    assert "index/'garbage\\x1b[2J': name is not a yyyyMMddHHmmssSSS time" in problems
    assert "indexCount -1 is outside 1..400" in problems
    topics = {q.topic for q in r.queues}
    assert topics.isdisjoint({"con$umer", "..evil", "a b", "LinkedTopic"}) and "OrderCreated" in topics
    assert LONG_TOPIC in topics  # 150 legal characters: a v2-record topic, not a hostile name


def test_verb_prints_tables_or_json_and_exits_1_on_problems(generated, fixture_dir, capsys):
    root, summary = generated
    conf = root.parent / "broker.conf"
    conf.write_text(broker_properties(SMALL_CFG))
    assert run_verb(str(root), "--broker-config", str(conf)) == 0
    text = capsys.readouterr().out
    for heading in ("COMMITLOG", "CONSUMEQUEUE", "INDEX FILES", "CHECKPOINT"):
        assert f"\n{heading}" in text
    assert f"{summary.segments} segments" in text.splitlines()[0] and "clean" in text.splitlines()[0]
    assert run_verb(str(root), "--broker-config", str(conf), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["totals"]["segments"] == summary.segments and report["totals"]["clean"] is True
    assert report["config"]["mappedFileSizeCommitLog"] == SMALL_CFG.mappedFileSizeCommitLog
    crashed = fixture_dir / "crashed"
    assert run_verb(str(crashed), "--broker-config", str(fixture_dir / "broker.conf")) == 1
    assert "\nPROBLEMS\n- abort: present" in capsys.readouterr().out


def test_missing_store_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        inspect_store(tmp_path / "nope", BrokerConfig())


def test_verb_scripts_do_not_shadow_the_standard_inspect_module():
    """``spark-submit jobs/<verb>.py`` puts jobs/ on sys.path, where jobs/inspect.py would hide ``inspect``."""
    jobs = Path(inspect_job.__file__).resolve().parent
    code = f"import sys; sys.path.insert(0, {str(jobs)!r}); import _bootstrap, dataclasses, inspect; "
    code += "print(inspect.__file__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert Path(out.strip()).parent != jobs


def test_without_a_config_the_segment_size_is_read_off_the_files(generated, capsys):
    """Segments of 64 KiB and no --broker-config: the size comes from the files (and says so), not the 1 GiB
    default that made every segment look torn; a config that contradicts the files is reported per segment."""
    from jobs.pipeline.listing import store_broker_config

    root, summary = generated
    run_verb(str(root), "--json")
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["config"]["mappedFileSizeCommitLog"] == 64 * 1024
    assert "read off the segment files" in err
    assert not [p for p in report["totals"]["problems"] if p.startswith("commitlog/")]
    assert {s["end"] for s in report["segments"]} <= {"blank", "zero-tail", "eof"}
    assert store_broker_config(str(root), None).mappedFileSizeCommitLog == 64 * 1024  # what recover runs with
    conf = root.parent / "contradicting.conf"
    conf.write_text(broker_properties(dataclasses.replace(SMALL_CFG, mappedFileSizeCommitLog=128 * 1024)))
    assert run_verb(str(root), "--broker-config", str(conf), "--json") == 1
    out, err = capsys.readouterr()
    problems = json.loads(out)["totals"]["problems"]
    assert "contradicts the store" in err
    assert sum("but the segment size is 131072" in p for p in problems) == summary.segments
