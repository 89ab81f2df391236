"""RocketMQ 5.x stores end to end on local Spark: ``rebuild`` of the real 5.5.0 broker's sample store gives
its consumequeue/ (LMQ queues included), batchconsumequeue/ and index/ byte for byte, with
``--broker-version 5.5`` and with the rules detected from the store; the audit of that store is clean."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import io
import json
import shutil
import struct
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from jobs.pipeline.audit_flow import audit
from jobs.pipeline.context import Run
from jobs.pipeline.rebuild_flow import rebuild
from storelib.broker.config import load_broker_config
from storelib.errors import AmbiguousRelease
from storelib.formats.rocksdbcq import unit_key
from tests.broker.fixtures import harness_store
from tests.broker.harness import SEED, SEEDS, read_jsonl
from tests.reference import assert_same_index, walk_commitlog
from tests.storecopy import rmqstore_main, tree_digest


@pytest.mark.parametrize("version", ["5.5", ""])
def test_rebuild_of_the_5_5_fixture_is_byte_exact(spark, v5_fixture: Path, tmp_path: Path, version: str) -> None:
    cfg = dataclasses.replace(load_broker_config(v5_fixture / "broker.conf"), brokerVersion=version)
    store, out = v5_fixture / "clean", tmp_path / "out"
    result = rebuild(Run(spark, cfg), str(store), str(out))
    assert_same_index(store, out)
    rules = json.loads((out / "rebuild.json").read_text())["broker_rules"]
    # detected: the oldest of the rows the clues allow that write these files (5.4 and 5.5 write the same here);
    # the label's range always holds the release that wrote the store
    assert rules["name"] == ("5.5" if version else "5.4")
    assert rules["source"] == ("--broker-version" if version else "detected")
    assert version or rules["releases"] == "5.4.0 or later"
    if not version:
        assert {c["clue"] for c in rules["clues"]} >= {"batchconsumequeue/", "__CRC32#", "index tag keys"}
    assert result.report.findings == ()
    queues = {(q.topic, q.queue_id): q for q in result.report.consume_queues}
    assert (queues["TopicBatchCQ", 0].entries, queues["TopicBatchCQ", 0].max_offset) == (38, 151)
    assert queues["%LMQ%room-4", 0].entries == 72


DETECTED = {"4.9.7": "4.9.3", "5.3.3": "5.2", "5.5.0": "5.5"}


@pytest.mark.broker
@pytest.mark.parametrize(
    ("version", "variant", "seed"),
    [(v, "default", seed) for v in DETECTED for seed in SEEDS]
    + [("5.5.0", "crc", SEED)]
    + [(v, "consumers", SEED) for v in DETECTED],  # retries, a dead-letter queue, orderly, POP (5.x)
)
def test_harness_store_rebuilt_with_detected_rules_and_audited_clean(
    spark, tmp_path: Path, version: str, variant: str, seed: int
) -> None:
    """A store the real broker wrote: rules detected (no --broker-version), index byte-exact, audit exit 0."""
    store, rules = harness_store(version, variant, seed), DETECTED[version]
    run, out = Run(spark, load_broker_config(store / "broker.conf")), tmp_path / "out"
    run = rebuild(run, str(store / "store"), str(out)).run  # with the rules it settled
    assert_same_index(store / "store", out)
    assert json.loads((out / "rebuild.json").read_text())["broker_rules"]["name"] == rules
    assert (out / "checkpoint").read_bytes()[24:48] == (store / "store" / "checkpoint").read_bytes()[24:48]
    if version >= "5":  # the timer wheel, folded from the timerlog (docs/timers.md)
        assert (out / "timerwheel").read_bytes() == (store / "store" / "timerwheel").read_bytes()
    result = audit(run, str(store / "store"), str(out), None)
    assert [f.kind for f in result.findings] == []
    assert result.exit_code == 0


@pytest.mark.broker
@pytest.mark.parametrize("seed", SEEDS)
def test_a_5_5_store_without_its_index_and_config_is_rebuilt_byte_exact(spark, tmp_path: Path, seed: int) -> None:
    """index/ lost from the real 5.5.0 broker's store: config/ and the store root tell that 5.5.0 ran last, but
    nothing left tells whether a release before 5.4.0 (no topic#T#<TAGS> keys) wrote its first records before an
    in-place upgrade (the 4.8.0 -> 5.5.0 store's records read alike): refused with no flag, naming it; with
    --broker-version 5.5.0 byte-exact, with config/ lost too."""
    store = harness_store("5.5.0", "default", seed)
    cfg = load_broker_config(store / "broker.conf")
    for lost in (("index",), ("index", "config")):
        copy = tmp_path / "-".join(lost)
        shutil.copytree(store / "store", copy, ignore=shutil.ignore_patterns(*lost, "lock"))
        with pytest.raises(AmbiguousRelease, match="for its first records") as e:
            rebuild(Run(spark, cfg), str(copy), str(tmp_path / f"detected-{len(lost)}"))
        assert "--broker-version X.Y.Z" in str(e.value) and "topic#T#<TAGS>" in str(e.value)
        given = dataclasses.replace(cfg, brokerVersion="5.5.0")
        rebuild(Run(spark, given), str(copy), str(tmp_path / f"given-{len(lost)}"))
        assert_same_index(store / "store", tmp_path / f"given-{len(lost)}")


@pytest.mark.broker
def test_rocksdb_store_rebuilt_and_audited(spark, tmp_path: Path) -> None:
    """The real 5.5.0 broker's RocksDB store: detected, rebuilt as files, its units audited clean; a copy with
    one unit deleted from its RocksDB is a finding about that queue."""
    store = harness_store("5.5.0", "rocksdb")
    run, out = Run(spark, load_broker_config(store / "broker.conf")), tmp_path / "out"
    run = rebuild(run, str(store / "store"), str(out)).run  # with the rules it settled
    rules = json.loads((out / "rebuild.json").read_text())
    assert (rules["broker_rules"]["name"], rules["broker_config"]["storeType"]) == ("5.5", "defaultRocksDB")
    assert "rocksdb-consumequeue" in {c["clue"] for c in rules["broker_rules"]["clues"]}
    assert rules["findings"] == []
    result = audit(run, str(store / "store"), str(out), None)
    assert ([f.kind for f in result.findings], result.exit_code) == ([], 0)
    assert result.report.summary.queues.audited == 29

    # a copy with the RocksDB moved to consumequeue_rocksdb/ (5.5.0 useSeparateStorePathForRocksdbCQ) and one unit
    # deleted: audited (a rebuild inside) with a fresh config
    copy = tmp_path / "store"
    shutil.copytree(store / "store", copy, ignore=shutil.ignore_patterns("LOCK", "lock"))
    (copy / "consumequeue").rename(copy / "consumequeue_rocksdb")
    opts = Options(raw_mode=True)
    opts.set_allow_concurrent_memtable_write(False)  # the broker's OPTIONS file turns on in-place updates
    families = {cf: opts for cf in Rdict.list_cf(str(copy / "consumequeue_rocksdb"), opts)}
    db = Rdict(str(copy / "consumequeue_rocksdb"), options=opts, column_families=families)
    db.delete(unit_key("TopicOrders", 2, 5))
    db.close()
    damaged = audit(Run(spark, load_broker_config(store / "broker.conf")), str(copy), None, None)
    assert damaged.exit_code == 1
    bad = [f for f in damaged.findings if f.severity == "error"]
    assert [(f.kind, f.topic, f.queue_id, f.queue_offset) for f in bad] == [("cq-zeroed-entries", "TopicOrders", 2, 5)]
    assert (bad[0].file, bad[0].message[:22]) == ("consumequeue_rocksdb", "RocksDB ConsumeQueue: ")
    assert damaged.repairs == []


@pytest.mark.broker
def test_rocksdb_store_rolled_back_without_topics_json_gets_queues_at_the_write_position(spark, tmp_path: Path) -> None:
    """storeType=default on the RocksDB store, no topics.json: its BatchCQ topic (queue offsets stepped by INNER_NUM
    in the RocksDB) is a plain queue where ConsumeQueue.putMessagePositionInfo appends each record's unit at the write
    position: unit n is the queue's n-th record (the plain-Python reference walk), no gap reported, no hole."""
    store = harness_store("5.5.0", "rocksdb")
    cfg = dataclasses.replace(load_broker_config(store / "broker.conf"), storeType="default", brokerVersion="5.5.0")
    rebuild(Run(spark, cfg), str(store / "store"), str(tmp_path / "out"))
    report = json.loads((tmp_path / "out" / "rebuild.json").read_text())
    assert report["findings"] == []
    records = collections.defaultdict(list)
    for r in walk_commitlog(store / "store" / "commitlog"):
        if r.topic == "TopicBatchCQ":
            records[r.queue_id].append((r.offset, r.total_size, r.queue_offset))
    assert any(qo != i for units in records.values() for i, (_, _, qo) in enumerate(units))  # the RocksDB's steps
    for queue_id, units in records.items():
        data = b"".join(
            p.read_bytes()
            for p in sorted((tmp_path / "out" / "consumequeue" / "TopicBatchCQ" / str(queue_id)).iterdir())
        )
        written = [struct.unpack_from(">qi", data, i) for i in range(0, len(data), 20) if any(data[i : i + 20])]
        assert written == [(offset, size) for offset, size, _ in units], queue_id


def units_short(root: Path) -> set[tuple[str, int]]:
    """ConsumeQueues (topic, queueId) of plain topics whose live files hold fewer units than the commitlog has
    dispatched records for them (the plain-Python reference walk): the queues a crash left behind."""
    wanted = collections.Counter(
        (r.topic, r.queue_id) for r in walk_commitlog(root / "commitlog") if r.sys_flag & 0xC in (0, 0x8)
    )
    short = set()
    for (topic, queue_id), n in wanted.items():
        files = sorted((root / "consumequeue" / topic / str(queue_id)).glob("*"))
        data = b"".join(p.read_bytes() for p in files)
        live = sum(1 for i in range(0, len(data), 20) if any(data[i : i + 20]))
        if not (root / "batchconsumequeue" / topic).exists() and live < n:
            short.add((topic, queue_id))
    return short


@pytest.mark.broker
def test_a_killed_broker_store_is_audited_as_crashed(spark, tmp_path: Path) -> None:
    """kill -9 in the middle of the send burst: abort is left, and the audit names exactly the ConsumeQueues the
    crash left short (where the kill landed after the last dispatch there are none) and nothing false."""
    store = harness_store("5.5.0", "kill9")
    run, out = Run(spark, load_broker_config(store / "broker.conf")), tmp_path / "out"
    run = rebuild(run, str(store / "store"), str(out)).run  # with the rules it settled
    result = audit(run, str(store / "store"), str(out), None)
    assert result.exit_code == 1
    kinds = {f.kind for f in result.findings}
    assert "abort-marker" in kinds
    batch = {p.name for p in (store / "store" / "batchconsumequeue").glob("*")}
    tails = {(f.topic, f.queue_id) for f in result.findings if f.kind == "cq-missing-tail"}
    assert {(t, q) for t, q in tails if not t.startswith("%LMQ%") and t not in batch} == units_short(store / "store")
    assert not {"cq-wrong-entries", "duplicate-queue-offset", "queue-offset-gap"} & kinds


@pytest.mark.broker
@pytest.mark.parametrize(
    ("version", "seed"), [("5.5.0", SEED), ("5.3.3", SEED), pytest.param("5.5.0", 8, marks=pytest.mark.matrix)]
)
def test_a_store_upgraded_in_place_is_rebuilt_stretch_by_stretch(
    spark, tmp_path: Path, version: str, seed: int
) -> None:
    """4.9.7 wrote the store and stopped cleanly, then the 5.x broker went on writing the same files: each stretch
    of the commitlog is dispatched by the rules of the release that wrote it (found with no flag), byte-exact, and
    the audit is clean."""
    store = harness_store(version, "upgraded", seed)  # seed 8: another workload (make test-matrix)
    run, out = Run(spark, load_broker_config(store / "broker.conf")), tmp_path / "out"
    run = rebuild(run, str(store / "store"), str(out)).run  # with the rules it settled
    assert_same_index(store / "store", out)
    rules = json.loads((out / "rebuild.json").read_text())["broker_rules"]
    assert [s["name"] for s in rules["stretches"]] == ["4.9.3", rules["name"]]
    assert rules["stretches"][1]["start"] > 0
    result = audit(run, str(store / "store"), str(out), None)
    assert ([f.kind for f in result.findings], result.exit_code) == ([], 0)


@pytest.mark.broker
def test_a_4_8_store_upgraded_to_5_5_is_told_apart_by_each_index_file(spark, tmp_path: Path) -> None:
    """4.8.0 wrote the store (no topic#T#<TAGS> keys), then 5.5.0 went on inside the same IndexFile; both releases'
    broker-written property strings end with 0x02: each live IndexFile's keys speak for the commitlog range its
    header covers, so the tag-key boundary is a stretch boundary. With no flag: byte-exact, audit clean."""
    store = harness_store("5.5.0", "upgraded-4.8.0")
    run, out = Run(spark, load_broker_config(store / "broker.conf")), tmp_path / "out"
    run = rebuild(run, str(store / "store"), str(out)).run
    assert_same_index(store / "store", out)
    rules = json.loads((out / "rebuild.json").read_text())["broker_rules"]
    assert [s["name"] for s in rules["stretches"]] == ["4.7.1", "5.5"], rules
    offsets = {r.properties.get("UNIQ_KEY"): r.offset for r in walk_commitlog(store / "store" / "commitlog")}
    old, new = (read_jsonl(store / name) for name in ("sent-4.8.0.jsonl", "sent.jsonl"))
    last_4_8, first_5_5 = offsets[old[-1]["msgId"]], offsets[new[0]["msgId"]]
    assert last_4_8 < rules["stretches"][1]["start"] <= first_5_5
    result = audit(run, str(store / "store"), str(out), None)
    assert ([f.kind for f in result.findings], result.exit_code) == ([], 0)


@pytest.mark.broker
@pytest.mark.parametrize("config", ["left", "rewritten"])
def test_recover_of_the_4_8_to_5_5_store_after_its_queues_and_index_are_lost(tmp_path: Path, config: str) -> None:
    """consumequeue/ and index/ lost: nothing tells the 4.8.0 records from 5.5.0 ones (both end their property
    strings with 0x02), whether config/ holds files 4.8.0 left or only files the 5.5.0 broker rewrote (the plain
    5.5.0 store's): recover refuses with the store untouched, naming the flag and the range in doubt."""
    rewritten = harness_store("5.5.0", "default") / "store" / "config" if config == "rewritten" else None
    code, err, _ = recover_without_queues_and_index(harness_store("5.5.0", "upgraded-4.8.0"), tmp_path, rewritten)
    assert code == 2 and "--broker-version X.Y.Z" in err and "commitlog" in err, err


def recover_without_queues_and_index(
    store: Path, tmp_path: Path, config: Path | None = None
) -> tuple[int, str, list[str]]:
    """``recover --apply`` of a copy of a harness store without consumequeue/ and index/ (and with ``config`` for
    its config/): the exit code, stderr, and the arguments naming the copy. A refusal leaves the copy as it was."""
    lost = tmp_path / "store"
    shutil.copytree(store / "store", lost)
    for name in ("consumequeue", "index", *(["config"] if config else [])):
        shutil.rmtree(lost / name)
    if config is not None:
        shutil.copytree(config, lost / "config")
    before = tree_digest(lost)
    conf = ["--store", str(lost), "--broker-config", str(store / "broker.conf"), "--apply"]
    with contextlib.redirect_stderr(io.StringIO()) as err:
        code = rmqstore_main(["recover", *conf, "--backup-dir", str(tmp_path / "backup")])
    assert code == 0 or tree_digest(lost) == before
    return code, err.getvalue(), conf


# variant -> the stretches found with no flag, and the release whose sends start the last one
UPGRADES = {"upgraded-5.1.4": (["5.0", "5.5"], "5.1.4"), "upgraded-twice": (["4.9.3", "5.5"], "5.1.4")}


@pytest.mark.broker
@pytest.mark.parametrize("variant", UPGRADES)
def test_a_5_1_store_upgraded_to_5_5_is_rebuilt_stretch_by_stretch(spark, tmp_path: Path, variant: str) -> None:
    """5.1.4 (whose broker-written property strings end without 0x02) wrote the store, TopicBatchCQ a BatchCQ topic,
    then 5.5.0 went on mid-segment; or 4.9.7, then 5.1.4, then 5.5.0 (both older releases end without 0x02: one
    stretch, whose rows write the same files here). With no flag: the 0x02 boundary lies between the last 5.1.4
    record and the first 5.5.0 one, each stretch by its own rules (5.1.4's BatchCQ records: the live
    batchconsumequeue/ shows every release that wrote them had BatchConsumeQueues), byte-exact, audit clean."""
    names, older = UPGRADES[variant]
    store = harness_store("5.5.0", variant)
    run, out = Run(spark, load_broker_config(store / "broker.conf")), tmp_path / "out"
    run = rebuild(run, str(store / "store"), str(out)).run
    assert_same_index(store / "store", out)
    rules = json.loads((out / "rebuild.json").read_text())["broker_rules"]
    assert [s["name"] for s in rules["stretches"]] == names, rules
    offsets = {r.properties.get("UNIQ_KEY"): r.offset for r in walk_commitlog(store / "store" / "commitlog")}
    old, new = (read_jsonl(store / name) for name in (f"sent-{older}.jsonl", "sent.jsonl"))
    start = rules["stretches"][1]["start"]
    assert offsets[old[-1]["msgId"]] < start <= offsets[new[0]["msgId"]] and start % (64 << 10), start
    result = audit(run, str(store / "store"), str(out), None)
    assert ([f.kind for f in result.findings], result.exit_code) == ([], 0)


@pytest.mark.broker
@pytest.mark.parametrize("variant", UPGRADES)
def test_recover_of_a_5_1_to_5_5_store_after_its_queues_and_index_are_lost(tmp_path: Path, variant: str) -> None:
    """consumequeue/ and index/ lost: recover refuses, the store untouched, naming the range in doubt. 5.1.4 first:
    its stretch's BatchCQ records (4.9.x rows put them in consumequeue/, and no consumequeue/ is left to show they
    did not), a refusal that offers no --broker-version command (the flag names the release that ran last, 5.5.0's
    records would be parsed by the older rules). 4.9.7 and 5.1.4 first: the last stretch's tag keys (5.2.0 or
    5.4.0 rules); given 5.5.0, the broker's own files."""
    store = harness_store("5.5.0", variant)
    code, err, conf = recover_without_queues_and_index(store, tmp_path)
    assert code == 2 and "--broker-version X.Y.Z" in err and "commitlog offset" in err, err
    earlier = variant == "upgraded-5.1.4"  # its first stretch in doubt; the other's last stretch (tag keys)
    assert ("commitlog offsets 0 up to" in err, "no flag settles" in err) == (earlier, earlier), err
    assert ("run it again" in err) != earlier, err
    if not earlier:  # the release that ran last given: the broker's own files, the first stretch told by its records
        assert rmqstore_main(["recover", *conf, "--backup-dir", str(tmp_path / "b2"), "--broker-version", "5.5.0"]) == 0
        assert_same_index(store / "store", tmp_path / "store")


@pytest.mark.broker
def test_a_4_5_store_upgraded_to_5_5_is_refused_for_its_mixed_index_file(tmp_path: Path, capsys) -> None:
    """4.5.2 (IndexFile hashSlotCount: every put) wrote the store, then 5.5.0 (occupied slots) went on inside the same
    IndexFile, whose count then holds both (1,879 of 1,999 puts). Rebuild with no flag found the stretches (4.0,
    then 5.5 by the tag keys) but wrote every IndexFile by the first stretch's rule with exit 0 (4 of 5 headers
    wrong); now refused, nothing written. Recover after consumequeue/ and index/ are lost: refused (4.5.2's
    config/consumerOffset.json contradicts the 5.5.0 clues), the store untouched."""
    store = harness_store("5.5.0", "upgraded-4.5.2")
    out = tmp_path / "out"
    code = rmqstore_main(
        ["rebuild", "--store", str(store / "store"), "--out", str(out), "--broker-config", str(store / "broker.conf")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "hashSlotCount" in err and "commitlog offset" in err and "X.Y.Z" in err, err
    assert not (out / "index").exists() and not (out / "consumequeue").exists()
    code, err, _ = recover_without_queues_and_index(store, tmp_path)
    assert code == 2 and "--broker-version X.Y.Z" in err, err


@pytest.mark.broker
def test_a_rocksdb_store_with_a_stale_topics_json_needs_no_flag(spark, tmp_path: Path) -> None:
    """storeType=defaultRocksDB keeps topic configs in config/topics/: the topics.json an operator declared for 4.9
    (no dataVersion.stateVersion) is a weak clue, set aside, said so; rebuild and audit with no flag, exit 0."""
    store = harness_store("5.5.0", "rocksdb-stale-topics")
    run, out = Run(spark, load_broker_config(store / "broker.conf")), tmp_path / "out"
    run = rebuild(run, str(store / "store"), str(out)).run  # with the rules it settled
    rules = json.loads((out / "rebuild.json").read_text())["broker_rules"]
    assert rules["name"] == "5.5" and rules["set_aside"], rules
    assert all(c["weak"] and "topics.json" in c["detail"] for c in rules["set_aside"])
    result = audit(run, str(store / "store"), str(out), None)
    assert ([f.kind for f in result.findings], result.exit_code) == ([], 0)
