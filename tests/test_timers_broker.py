"""Timers and delay levels judged by the real broker (``pytest -m broker``): the harness's ``timers`` store, stopped
with 18 timers (due 25-50 s after their send) and 6 level-4 delays (30 s) still pending behind 2,080-byte timerlog
files, so that their units lie before the broker's own timerlog recovery window.

- the rebuilt timerwheel, timercheck and delay offsets equal the broker's, and the untouched store audits clean;
- a damaged slot is named in report.json (``timer-slot-wrong``) and recover writes the wheel back byte-equal;
- timerwheel, delayOffset.json and its .bak lost: report.json names them, recover writes them back (the wheel
  byte-equal), and a broker started on the store delivers every pending timer and delay once, to its real topic and
  queue, not before its time, and nothing delivered before the stop again; the broker alone on the same loss is
  recorded too (tests/broker/timer_figures.json, the table of docs/timers.md).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from jobs.cli import main
from jobs.inspect import timers
from jobs.pipeline.audit_flow import audit
from jobs.pipeline.context import Run
from jobs.pipeline.rebuild_flow import rebuild, resolve_rules
from jobs.pipeline.recover_flow import recover
from storelib.broker.config import load_broker_config
from storelib.formats import delayoffset, timerwheel
from storelib.reports.inspection import inspect_store
from tests.broker.fixtures import harness_store, release_param
from tests.broker.harness import SEEDS, VERSIONS, read_jsonl
from tests.broker.timers import copies, delivered

pytestmark = pytest.mark.broker
VERSION = "5.5.0"
FIGURES = Path(__file__).parent / "broker" / "timer_figures.json"


@pytest.fixture(scope="module")
def timers_store() -> Path:
    return harness_store(VERSION, "timers")


@pytest.fixture(scope="module")
def rebuilt(spark, timers_store: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("timers") / "rebuilt"
    rebuild(_run(spark, timers_store), str(timers_store / "store"), str(out))
    return out


def _run(spark, store: Path) -> Run:
    cfg = load_broker_config(store / "broker.conf")
    return Run(spark, cfg.__class__(**{**cfg.to_dict(), "brokerVersion": VERSION}))


def _copy(store: Path, tmp_path: Path) -> Path:
    shutil.copytree(store / "store", tmp_path / "store")
    shutil.copy(store / "broker.conf", tmp_path / "broker.conf")
    return tmp_path / "store"


@pytest.mark.parametrize(("version", "seed"), [release_param(v, seed) for v in VERSIONS if v >= "5" for seed in SEEDS])
def test_every_5x_default_store_folds_to_its_wheel(version: str, seed: int) -> None:
    """Without Spark (inspect's path): the default store of each 5.x release the harness runs, stopped with its
    timers and delays all delivered, folds to its own timerwheel byte for byte, its delay offsets and timer
    checkpoint are what the commitlog shows, and nothing is pending or found."""
    store = harness_store(version, "default", seed)
    cfg = dataclasses.replace(load_broker_config(store / "broker.conf"), brokerVersion=version)
    batches: list = []
    report = inspect_store(store / "store", cfg, batches)
    result = timers(report, batches, cfg, resolve_rules(str(store / "store"), cfg, [])[1])
    live = store / "store"
    assert result.findings == ()
    assert result.wheel == (live / "timerwheel").read_bytes()
    assert result.checkpoint.pack() == (live / "config" / "timercheck").read_bytes()
    assert result.delay_table == delayoffset.parse((live / "config" / "delayOffset.json").read_text())[0]
    assert result.counts["timers"] > 0 and result.pending() == []


def test_the_rebuilt_timer_files_are_the_brokers_and_the_store_audits_clean(
    spark, timers_store: Path, rebuilt: Path
) -> None:
    live = timers_store / "store"
    assert len(list((live / "timerlog").iterdir())) >= 3  # the pending units lie before the recovery window
    assert (rebuilt / "timerwheel").read_bytes() == (live / "timerwheel").read_bytes()
    assert (rebuilt / "config" / "timercheck").read_bytes() == (live / "config" / "timercheck").read_bytes()
    live_table = delayoffset.parse((live / "config" / "delayOffset.json").read_text())[0]
    assert delayoffset.parse((rebuilt / "config" / "delayOffset.json").read_text())[0] == live_table
    timers = json.loads((rebuilt / "rebuild.json").read_text())["timers"]
    sent = read_jsonl(timers_store / "sent.jsonl")
    assert timers["counts"]["timers_pending"] == sum(s["kind"] == "timer-pending" for s in sent) == 18
    assert timers["counts"]["delayed_pending"] == sum(s["kind"] == "delay-pending" for s in sent) == 6
    result = audit(_run(spark, timers_store), str(live), str(rebuilt), None)
    assert [f.kind for f in result.findings] == []


def test_a_damaged_slot_is_named_and_recover_writes_the_wheel_back(
    spark, timers_store: Path, rebuilt: Path, tmp_path: Path
) -> None:
    store = _copy(timers_store, tmp_path)
    wheel = bytearray((store / "timerwheel").read_bytes())
    slots = timerwheel.read_slots(bytes(wheel))
    used = [int(i) for i in slots.nonzero()[0] if slots["time"][i]]
    at = used[len(used) // 2] * timerwheel.SLOT_SIZE + 16  # a used slot's lastPos
    wheel[at : at + 8] = (-1).to_bytes(8, "big", signed=True)
    (store / "timerwheel").write_bytes(bytes(wheel))
    run = _run(spark, timers_store)
    audit(run, str(store), str(rebuilt), str(tmp_path / "report"))
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [(f["kind"], f["file"], f["file_offset"]) for f in report["findings"]] == [
        ("timer-slot-wrong", "timerwheel", at - 16)
    ]
    assert recover(run, str(store), str(rebuilt), do_apply=True, backup_dir=tmp_path / "backup") == 0
    assert (store / "timerwheel").read_bytes() == (timers_store / "store" / "timerwheel").read_bytes()


def _pending(timers_store: Path) -> tuple[dict[str, dict], int]:
    """The messages pending at the stop (sent.jsonl), and how many were delivered before it."""
    sent = read_jsonl(timers_store / "sent.jsonl")
    pending = {s["msgId"]: s for s in sent if s["kind"].endswith("-pending")}
    return pending, len(sent) - len(pending)


def test_lost_timer_files_recovered_then_every_pending_timer_is_delivered_once(
    spark, timers_store: Path, rebuilt: Path, tmp_path: Path
) -> None:
    pending, before = _pending(timers_store)
    store = _lose_timer_files(_copy(timers_store, tmp_path / "recovered"))
    run = _run(spark, timers_store)
    audit(run, str(store), str(rebuilt), str(tmp_path / "report"))
    found = {f["kind"]: f for f in json.loads((tmp_path / "report" / "report.json").read_text())["findings"]}
    assert found.keys() == {"timer-wheel-missing", "schedule-offsets-missing"}
    # the units the broker's refiling does not reach: every pending timer (the broker alone delivers none of them)
    assert found["timer-wheel-missing"]["count"] == sum(s["kind"] == "timer-pending" for s in pending.values())
    assert recover(run, str(store), str(rebuilt), do_apply=True, backup_dir=tmp_path / "backup") == 0
    assert (store / "timerwheel").read_bytes() == (timers_store / "store" / "timerwheel").read_bytes()

    after = delivered(VERSION, store, before + len(pending), wait_s=90)
    got = copies(after)
    assert len(after) == before + len(pending)  # nothing delivered again
    for msg_id, s in pending.items():
        (copy,) = got[msg_id]  # once
        assert (copy["topic"], copy["queueId"]) == (s["topic"], s["queueId"])  # its real topic and queue
        due = s.get("deliverTimeMs") or s["sentMs"] + 30_000
        assert copy["storeTimestamp"] >= due - 1000  # not before its time (a delay: its record's store time + 30 s)
    _record("recovered", pending, before, after)


def test_the_broker_alone_loses_the_timers_and_delivers_the_delays_again(timers_store: Path, tmp_path: Path) -> None:
    """The same loss without recover: the broker's own timerlog recovery does not reach the pending units, and
    every level starts at its first record."""
    pending, before = _pending(timers_store)
    alone = delivered(VERSION, _lose_timer_files(_copy(timers_store, tmp_path)), 10**6, wait_s=30)
    _record("alone", pending, before, alone)
    got = copies(alone)
    assert not any(m in got for m, s in pending.items() if s["kind"] == "timer-pending")
    assert len(alone) > before + sum(s["kind"] == "delay-pending" for s in pending.values())  # delivered again


def _lose_timer_files(store: Path) -> Path:
    for name in ("timerwheel", "config/delayOffset.json", "config/delayOffset.json.bak"):
        (store / name).unlink()
    return store


def _record(case: str, pending: dict[str, dict], before: int, lines: list[dict]) -> None:
    """tests/broker/timer_figures.json: what the broker delivered after recover and alone (docs/timers.md's table)."""
    got = copies(lines)
    figures = {
        "timers_pending": sum(1 for s in pending.values() if s["kind"] == "timer-pending"),
        "timers_delivered": sum(1 for m, s in pending.items() if s["kind"] == "timer-pending" and m in got),
        "delays_pending": sum(1 for s in pending.values() if s["kind"] == "delay-pending"),
        "delays_delivered": sum(1 for m, s in pending.items() if s["kind"] == "delay-pending" and m in got),
        "delivered_again": len(lines) - before - sum(1 for m in pending if m in got),
    }
    table = json.loads(FIGURES.read_text()) if FIGURES.is_file() else {}
    table.setdefault(VERSION, {})[case] = figures
    FIGURES.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


def test_inspect_lists_the_pending_timers_to_send_them_again(timers_store: Path, tmp_path: Path, capsys) -> None:
    """``rmqstore inspect --pending-out``: every timer and delayed message still pending at the stop, with its real
    topic and queue, its due time and keys, as sent (sent.jsonl); the console shows them by real topic."""
    out = tmp_path / "pending.jsonl"
    args = ["inspect", str(timers_store / "store"), "--broker-config", str(timers_store / "broker.conf")]
    assert main([*args, "--broker-version", VERSION, "--pending-out", str(out)]) == 0
    pending = {p["uniq_key"]: p for p in read_jsonl(out)}
    sent = {s["msgId"]: s for s in read_jsonl(timers_store / "sent.jsonl") if s["kind"].endswith("-pending")}
    assert pending.keys() == sent.keys()
    for msg_id, s in sent.items():
        p = pending[msg_id]
        assert (p["topic"], p["queue_id"], p["keys"], p["kind"]) == (s["topic"], s["queueId"], s["keys"], s["kind"][:5])
        if "deliverTimeMs" in s:
            assert p["due_ms"] == s["deliverTimeMs"] // 1000 * 1000 or p["due_ms"] == s["deliverTimeMs"]
    console = capsys.readouterr().out
    assert "timer    TopicTimers        18" in console and "delay    TopicDelays         6" in console
