"""Disasters end to end, judged by the real broker: a copy of a store the real 4.9.7, 5.3.3 or 5.5.0 broker wrote
loses files (or is torn, or crashed), the broker alone serves what it can from it, then `rmqstore recover --apply`
runs and the broker serves it again. After recover the broker must serve exactly what it served before the loss
(every queue from min to max, tag-filtered pulls, every lookup by key, UNIQ_KEY and 5.5 tag: harness `served`), and
the rebuilt files must equal the broker's own. What the broker alone served is recorded, not asserted: it is the
"before" column of the table in docs/disasters.md (`python -m tests.broker.disasters`)."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.broker.disasters import FIGURES, figures
from tests.broker.harness import (
    export_rocksdb_topics,
    read_properties,
    replayed,
    served,
    served_key,
    served_queues,
)
from tests.reference import assert_queues_as_the_broker_replays_them, queue_units, walk_commitlog
from tests.storecopy import run_cli

pytestmark = pytest.mark.broker

VERSIONS = ("5.5.0", "5.3.3", "4.9.7")
QUEUE_DIRS = ("consumequeue", "batchconsumequeue")


def lose_index(root: Path) -> None:
    shutil.rmtree(root / "index")


def lose_queues(root: Path) -> None:
    for name in QUEUE_DIRS:
        shutil.rmtree(root / name, ignore_errors=True)


def lose_all_but_commitlog_and_config(root: Path) -> None:
    for p in root.iterdir():
        if p.name not in ("commitlog", "config"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()


def tear_last_record(root: Path) -> None:
    """A power loss: the last record's second half never reached the disk (zeros), and `abort` is left behind."""
    last = list(walk_commitlog(root / "commitlog"))[-1]
    segment = max((p for p in (root / "commitlog").iterdir() if int(p.name) <= last.offset), key=lambda p: int(p.name))
    with open(segment, "r+b") as f:
        f.seek(last.offset - int(segment.name) + last.total_size // 2)
        f.write(bytes(last.total_size - last.total_size // 2))
    (root / "abort").touch()


def zero_middle_of_a_queue_file(root: Path) -> None:
    """The middle third of the written units of the longest queue's first file, every byte zero."""
    queue = max((root / "consumequeue").glob("*/*"), key=lambda q: (sum(f.stat().st_size for f in q.iterdir()), str(q)))
    first = sorted(queue.iterdir())[0]
    data = bytearray(first.read_bytes())
    written = -(-len(data.rstrip(b"\0")) // 20)  # units up to the last non-zero byte
    data[written // 3 * 20 : written * 2 // 3 * 20] = bytes((written * 2 // 3 - written // 3) * 20)
    first.write_bytes(bytes(data))


def untouched(root: Path) -> None:
    """The store as the crash left it."""


def roll_back_to_files(root: Path) -> None:
    """A RocksDB store rolled back to file ConsumeQueues as an operator does it (apache/rocketmq#8699): the topic
    configs exported to topics.json by RocketMQ's own rocksDBConfigToJson; the broker then runs with
    storeType=default. Nothing else changes: the RocksDB stays in consumequeue/, which that broker does not read."""
    export_rocksdb_topics("5.5.0", root)


# scenario -> (store variant, the loss)
SCENARIOS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "a-index-lost": ("default", lose_index),
    "b-queues-lost": ("default", lose_queues),
    "c-all-but-commitlog-and-config-lost": ("default", lose_all_but_commitlog_and_config),
    "d-kill9": ("kill9", untouched),
    "e-torn-tail": ("default", tear_last_record),
    "f-queue-file-zeroed": ("default", zero_middle_of_a_queue_file),
    "g-rocksdb-rolled-back": ("rocksdb", roll_back_to_files),
}
SYSTEM_TOPICS = ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_", "rmq_sys_")  # pulled, but not looked up (Served.java)
CRASHED = ("d-kill9", "e-torn-tail")  # the oracle is the broker's own crash recovery of the damaged copy


def cases() -> list:
    return [(v, s) for v in VERSIONS for s in SCENARIOS if s != "g-rocksdb-rolled-back" or v == "5.5.0"]


@pytest.mark.parametrize(("version", "scenario"), cases())
def test_disaster_recovered_as_the_broker_served_it(
    spark,
    broker_store,
    tmp_path: Path,
    capsys,
    version: str,
    scenario: str,
) -> None:
    variant, lose = SCENARIOS[scenario]
    store = broker_store(version, variant)
    settings = read_properties(store.broker_conf)
    if variant == "rocksdb":
        settings["storeType"] = "default"  # rolled back: the broker restarted with file ConsumeQueues
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    queues = served_queues(store.root)
    copy = tmp_path / "store"
    shutil.copytree(store.root, copy)
    lose(copy)
    alone = served(version, copy, settings, queues)
    oracle = alone if scenario in CRASHED else served(version, store.root, read_properties(store.broker_conf), queues)

    argv = ["recover", "--store", str(copy), "--broker-config", str(conf), "--broker-version", version, "--apply"]
    argv += ["--backup-dir", str(tmp_path / "backup")]
    # a torn tail is zeroed only when asked (without: exit 1, the broker truncates it at start)
    capsys.readouterr()
    assert run_cli([*argv, "--truncate-torn-tail"] if scenario == "e-torn-tail" else argv) == 0
    said = capsys.readouterr().out
    after = served(version, copy, settings, queues)
    FIGURES.mkdir(parents=True, exist_ok=True)
    (FIGURES / f"{version}-{scenario}.json").write_text(json.dumps(figures(oracle, alone, after)))

    batch_cq = rocksdb_batch_cq_topics(copy) if scenario == "g-rocksdb-rolled-back" else set()
    if batch_cq:  # and recover told the operator, in the one line of what stays as it is
        assert [x for x in said.splitlines() if "cq-rolled-back-rocksdb" in x and all(t in x for t in batch_cq)]
        assert_batches_served_whole(copy, [x for x in after if x["topic"] in batch_cq], oracle, batch_cq)
    crashed = scenario in CRASHED
    assert_same_served(*([x for x in lines if x["topic"] not in batch_cq] for lines in (after, oracle)), crashed)
    assert_every_lookup_finds_its_message(after, settings)
    if scenario == "g-rocksdb-rolled-back":  # the broker's files are those it writes in file mode from the commitlog
        assert_queues_as_the_broker_replays_them(replayed(version, copy, settings), copy)
    assert_files_as_the_broker_wrote_them(store.root, copy, scenario)
    assert_queues_hold_what_is_served(copy, oracle)


def assert_same_served(after: list[dict], oracle: list[dict], crashed: bool) -> None:
    """Line by line; a difference is shown by kind with its first lines. After a crash the broker's own recovery
    may lose lookups (it deletes IndexFiles newer than the checkpoint's indexMsgTimestamp and indexes again only
    what it re-dispatches): there, every lookup finds at least what it found."""
    for kind in ("queue", "message", "tagged", "lookup"):
        got, want = [x for x in after if x["kind"] == kind], [x for x in oracle if x["kind"] == kind]
        if crashed and kind == "lookup":
            assert [x["key"] for x in got] == [x["key"] for x in want]
            got = [{**w, "found": sorted({*w.get("found", ())} & {*g.get("found", ())})} for g, w in zip(got, want)]
        missing, extra = [x for x in want if x not in got], [x for x in got if x not in want]
        assert (kind, missing[:3], extra[:3]) == (kind, [], [])
        assert got == want, kind
    assert any(x["kind"] == "message" for x in oracle)


def rocksdb_batch_cq_topics(root: Path) -> set[str]:
    """BatchCQ topics of topics.json (exported from the RocksDB config/topics/ by rocksDBConfigToJson)."""
    table = json.loads((root / "config" / "topics.json").read_text())["topicConfigTable"]
    return {t for t, c in table.items() if (c.get("attributes") or {}).get("queue.type") == "BatchCQ"}


def assert_batches_served_whole(root: Path, after: list[dict], oracle: list[dict], topics: set[str]) -> None:
    """A rolled-back store's BatchCQ topics (their records' queue offsets step by INNER_NUM in a RocksDB store):
    the broker in file mode serves every member of every batch at its queue offset (QUEUEOFFSET + i), from the first
    record, where the RocksDB broker served from its last batch only (FACTS.md); to the same max, with every message
    the RocksDB broker served."""
    members: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for r in walk_commitlog(root / "commitlog"):
        if r.topic in topics:
            n = int(r.properties.get("INNER_NUM", "1"))
            members.setdefault((r.topic, r.queue_id), []).extend((r.queue_offset + i, r.offset) for i in range(n))
    served_at: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for x in (x for x in after if x["kind"] == "message"):
        served_at.setdefault((x["topic"], x["queueId"]), []).append((x["queueOffset"], x["commitLogOffset"]))
    assert {q: sorted(m) for q, m in served_at.items()} == {q: sorted(m) for q, m in members.items()}
    want = {(x["topic"], x["queueId"]): x for x in oracle if x["kind"] == "queue" and x["topic"] in topics}
    got = {(x["topic"], x["queueId"]): x for x in after if x["kind"] == "queue"}
    assert sorted(got) == sorted(want) == sorted(members)
    for q, m in members.items():
        assert (got[q]["minOffset"], got[q]["maxOffset"]) == (min(m)[0], want[q]["maxOffset"]), q
    assert [x for x in oracle if x["kind"] == "message" and x["topic"] in topics and x not in after] == []


def assert_every_lookup_finds_its_message(lines: list[dict], settings: dict[str, str]) -> None:
    """Each message of a workload topic (its own queue, not an LMQ or system copy) is found by every KEYS token and
    its UNIQ_KEY, except the members of a BatchCQ batch: the broker indexes the one INNER_BATCH record, whose
    UNIQ_KEY and KEYS are not theirs."""
    found = {(x["by"], x["topic"], x["key"]): set(x["found"]) for x in lines if x["kind"] == "lookup"}
    batch_cq = "TopicBatchCQ" if settings.get("storeType") != "defaultRocksDB" else None
    messages = [x for x in lines if x["kind"] == "message" and x["msgTopic"] == x["topic"] != batch_cq]
    messages = [m for m in messages if not m["topic"].startswith(SYSTEM_TOPICS)]
    wanted = [("UNIQ_KEY", m["msgTopic"], m["msgId"], m["commitLogOffset"]) for m in messages]
    wanted += [("KEYS", m["msgTopic"], k, m["commitLogOffset"]) for m in messages for k in (m["keys"] or "").split()]
    lost = [w for w in wanted if w[3] not in found.get(w[:3], ())]
    assert lost == []
    assert wanted


def assert_queues_hold_what_is_served(root: Path, oracle: list[dict]) -> None:
    """Before the broker starts, each ConsumeQueue of the recovered store holds a unit the broker reads (offset >= 0,
    size > 0: ConsumeQueue.recover) for every queue offset it serves: after a crash, recover wrote the tail the
    broker would otherwise re-dispatch itself."""
    units = queue_units(root)
    for x in (x for x in oracle if x["kind"] == "queue" and "maxOffset" in x):
        name = f"consumequeue/{x['topic']}/{x['queueId']}"
        if f"batch{name}" not in units:
            fields = [struct.unpack_from(">qi", u) for u in units.get(name, [])]
            assert sum(offset >= 0 and size > 0 for offset, size in fields) == x["maxOffset"] - x["minOffset"], name


def assert_files_as_the_broker_wrote_them(original: Path, recovered: Path, scenario: str) -> None:
    """Where the original store has them: ConsumeQueue and BatchConsumeQueue files equal by path, IndexFiles by
    order (their names are creation times). A crash (d, e): every unit the broker wrote before it that recover wrote
    too (the crash tail's units are dropped by both), equal at the same queue offset."""
    if scenario in CRASHED:
        live, rebuilt = queue_units(original), queue_units(recovered)
        for queue, units in live.items():
            both = [
                i
                for i, u in enumerate(units[: len(rebuilt.get(queue, []))])
                if u.strip(b"\0") and rebuilt[queue][i].strip(b"\0")
            ]
            assert [i for i in both if rebuilt[queue][i] != units[i]] == [], queue
        return
    for name in QUEUE_DIRS:
        live = {str(p.relative_to(original)): p.read_bytes() for p in (original / name).rglob("*") if p.is_file()}
        rebuilt = {str(p.relative_to(recovered)): p.read_bytes() for p in (recovered / name).rglob("*") if p.is_file()}
        if scenario != "g-rocksdb-rolled-back":
            assert sorted(rebuilt) == sorted(live)
            assert [p for p in live if rebuilt[p] != live[p]] == []
    live_index = [p.read_bytes() for p in sorted((original / "index").iterdir())]
    built_index = [p.read_bytes() for p in sorted((recovered / "index").iterdir())]
    assert [i for i, (a, b) in enumerate(zip(built_index, live_index, strict=True)) if a != b] == []


def test_served_key_follows_the_bytes_and_the_settings(tmp_path: Path) -> None:
    """The served cache: the same bytes and settings give the same key (no broker started again); one changed
    byte, a renamed file or another setting gives another."""
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    (root / "commitlog" / "00000000000000000000").write_bytes(bytes(64))
    settings, queues = {"storeType": "default"}, ["TopicA/0"]
    key = served_key("5.5.0", root, settings, queues)
    assert served_key("5.5.0", root, dict(settings), list(queues)) == key
    (root / "commitlog" / "00000000000000000000").write_bytes(bytes(63) + b"\1")
    changed = served_key("5.5.0", root, settings, queues)
    (root / "commitlog" / "00000000000000000000").rename(root / "commitlog" / "00000000000000065536")
    renamed = served_key("5.5.0", root, settings, queues)
    others = [served_key("5.3.3", root, settings, queues), served_key("5.5.0", root, {"storeType": "x"}, queues)]
    assert len({key, changed, renamed, *others}) == 5
