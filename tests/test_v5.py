"""RocketMQ 5.x stores at the storelib level (no Spark): the real 5.5.0 broker's sample store rebuilt byte for
byte (ConsumeQueue, LMQ queues, BatchConsumeQueue, IndexFiles with tag keys), the version rules and their
detection, and the ``__CRC32#`` check.

The oracle is the broker's own files in /work/shared/fixtures/rocketmq-5.5.0-sample/clean/ (see its README).
"""

from __future__ import annotations

import collections
import dataclasses
import io
import itertools
import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from jobs.pipeline.store_rules import _merged
from storelib.audit.batch_queues import classify_batch_queue
from storelib.broker.config import BrokerConfig, batch_cq_topics, load_broker_config
from storelib.broker.detection import Clue, Releases, StoreFacts, Stretch, releases
from storelib.broker.dispatch import dispatch_batch, lmq_targets, property_crc
from storelib.broker.rule_choice import (
    LMQ_ENDS_KEPT,
    RuleInputs,
    differences,
    lmq_writers,
    refuse_mixed_slot_counts,
    select,
    select_stretches,
)
from storelib.broker.versions import RULE_SETS, rules_for
from storelib.errors import AmbiguousRelease, ConfigError, StoreFormatError
from storelib.formats import batchcq
from storelib.formats.checkpoint import Checkpoint
from storelib.formats.consumequeue import QueueFiles
from storelib.formats.indexfile import IndexFileSeries, IndexHeader
from storelib.formats.rocksdbcq import as_queue_files, parse_unit_key, read_units, unit_key
from storelib.formats.scanner import SegmentScanner
from tests.broker.fixtures import harness_store
from tests.broker.harness import SEEDS
from tests.reference import walk_commitlog


def store_config(root: Path, conf: Path, version: str) -> BrokerConfig:
    """broker.conf plus the store's BatchCQ topics and the given broker version."""
    cfg = load_broker_config(conf)
    topics = batch_cq_topics((root / "config" / "topics.json").read_text())
    return dataclasses.replace(cfg, brokerVersion=version, batchCQTopics=topics)


@dataclasses.dataclass
class Rebuilt:
    files: dict[str, bytes]  # store-relative path -> bytes (consumequeue/, batchconsumequeue/)
    index: list[bytes]
    findings: list[object]
    bad_crc: list[tuple[int, str]]  # (commitlog offset, detail)


def rebuild_store(root: Path, cfg: BrokerConfig) -> Rebuilt:
    """Every queue file and IndexFile storelib derives from ``root/commitlog``."""
    simple: dict[tuple[str, int], QueueFiles] = {}
    batch: dict[tuple[str, int], batchcq.BatchQueueFiles] = {}
    files: dict[str, bytes] = {}
    series, index, bad_crc = IndexFileSeries(cfg), [], []

    def keep(prefix: str, key: tuple[str, int], out) -> None:
        files.update({f"{prefix}/{key[0]}/{key[1]}/{name}": data for name, data in out})

    for path in sorted((root / "commitlog").iterdir()):
        with path.open("rb") as f:
            scanner = SegmentScanner(f, path.name, int(path.name), path.stat().st_size, True, 16 << 10)
            for b in scanner:
                d = dispatch_batch(b, cfg)
                bad_crc += [(int(b.physical_offset[i]), detail) for i, detail in d.bad_crc_property]
                units = collections.defaultdict(list)  # (queue, qid) -> [(queue offset, record)]
                for i in np.flatnonzero(d.to_consume_queue & ~d.batch_cq).tolist():
                    units[b.topic[i], int(b.queue_id[i])].append((int(b.queue_offset[i]), i))
                for r, q, qid, qo in zip(d.lmq.record, d.lmq.queue, d.lmq.queue_id, d.lmq.queue_offset):
                    units[q, int(qid)].append((int(qo), int(r)))
                for key, rows in units.items():
                    qo, r = (np.array(c) for c in zip(*rows))
                    q = simple.setdefault(key, QueueFiles(cfg.cq_file_size))
                    keep("consumequeue", key, q.add(qo, b.physical_offset[r], b.total_size[r], d.tags_code[r]))
                for i in np.flatnonzero(d.batch_cq).tolist():
                    key = (b.topic[i], int(b.queue_id[i]))
                    q = batch.setdefault(key, batchcq.BatchQueueFiles(cfg.mapperFileSizeBatchConsumeQueue))
                    one = [np.array([x]) for x in (b.physical_offset[i], b.total_size[i], d.tags_code[i])]
                    one += [np.array([x]) for x in (b.store_timestamp[i], d.msg_base_offset[i], d.batch_size[i])]
                    keep("batchconsumequeue", key, q.add_run(batchcq.encode_units(*one)))
                r = d.index_record
                index += series.add(d.index_key_hash, b.physical_offset[r], b.store_timestamp[r], b.physical_offset[-1])
    findings = []
    for prefix, queues in (("consumequeue", simple), ("batchconsumequeue", batch)):
        for key, q in queues.items():
            keep(prefix, key, q.finish())
            findings += q.findings
    index += series.finish()
    return Rebuilt(files, [data for _, data in index], findings, bad_crc)


def live_files(root: Path, *dirs: str) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for d in dirs for p in sorted((root / d).rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def rebuilt_55(v5_fixture: Path) -> Rebuilt:
    root = v5_fixture / "clean"
    return rebuild_store(root, store_config(root, v5_fixture / "broker.conf", "5.5"))


# --- 5.5.0 fixture: byte-exact -----------------------------------------------------------------------


def test_queue_files_of_the_5_5_fixture_are_byte_identical(v5_fixture: Path, rebuilt_55: Rebuilt) -> None:
    live = live_files(v5_fixture / "clean", "consumequeue", "batchconsumequeue")
    assert sorted(rebuilt_55.files) == sorted(live)
    assert [p for p, data in rebuilt_55.files.items() if live[p] != data] == []
    assert len([p for p in live if p.startswith("consumequeue/")]) == 27
    assert len([p for p in live if "%LMQ%" in p]) == 5
    assert len([p for p in live if p.startswith("batchconsumequeue/")]) == 2
    assert rebuilt_55.findings == []


def test_index_files_of_the_5_5_fixture_are_byte_identical(v5_fixture: Path, rebuilt_55: Rebuilt) -> None:
    live = [p.read_bytes() for p in sorted((v5_fixture / "clean" / "index").iterdir())]
    assert len(rebuilt_55.index) == len(live) == 3
    assert [i for i, (a, b) in enumerate(zip(rebuilt_55.index, live)) if a != b] == []
    assert [IndexHeader.unpack(d).index_count for d in live] == [2000, 2000, 1705]


def test_every_crc32_property_of_the_5_5_fixture_checks(rebuilt_55: Rebuilt) -> None:
    assert rebuilt_55.bad_crc == []


def test_5_3_rules_give_other_index_files_and_the_same_queues(v5_fixture: Path, rebuilt_55: Rebuilt) -> None:
    """Without the tag keys (5.3 rules) the IndexFiles hold 4,074 entries, not 5,702, and none is equal."""
    root = v5_fixture / "clean"
    other = rebuild_store(root, store_config(root, v5_fixture / "broker.conf", "5.3.3"))
    assert other.files == rebuilt_55.files
    assert sum(IndexHeader.unpack(d).index_count - 1 for d in other.index) == 1823 + 2251
    assert not set(other.index) & set(rebuilt_55.index)


# --- __CRC32# ----------------------------------------------------------------------------------------


def crc_piece(crc: int) -> bytes:
    """``__CRC32#`` 0x01, ten digits least significant first, 0x02 (written here by hand, not by storelib)."""
    digits = "".join(str(crc // 10**i % 10) for i in range(10))
    return b"__CRC32#\x01" + digits.encode() + b"\x02"


def test_crc_property_digits_are_least_significant_first() -> None:
    assert crc_piece(123) == b"__CRC32#\x013210000000\x02"
    assert property_crc("3210000000") == 123
    assert property_crc("12a") is None


def test_a_flipped_byte_is_a_crc_property_finding_and_later_records_stay(v5_fixture: Path, tmp_path: Path) -> None:
    """One byte of a TopicOrders body flipped in a copy of a segment: that record alone fails, at its offset."""
    seg = sorted((v5_fixture / "clean" / "commitlog").iterdir())[3]
    data = bytearray(seg.read_bytes())
    size = int.from_bytes(data[:4], "big")
    # the record's own __CRC32# is its last 20 bytes: check the fixture's value by hand first
    stored = int(data[size - 11 : size - 1].decode()[::-1])
    assert stored == zlib.crc32(bytes(data[: size - 20])) & 0x7FFFFFFF
    data[size - 40] ^= 0xFF  # inside the properties, before the CRC piece: framing is unchanged
    cfg = store_config(v5_fixture / "clean", v5_fixture / "broker.conf", "5.5")
    scanner = SegmentScanner(io.BytesIO(bytes(data)), seg.name, int(seg.name), len(data))
    batches = list(scanner)
    bad = [
        (int(b.physical_offset[i]), detail) for b in batches for i, detail in dispatch_batch(b, cfg).bad_crc_property
    ]
    assert [offset for offset, _ in bad] == [int(seg.name)]
    assert f"{stored} stored" in bad[0][1]
    assert sum(len(b) for b in batches) == scanner.messages > 1


# --- version rules --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "rule_set"),
    [
        ("4.3", "4.0"),
        ("4.7.0", "4.0"),
        ("4.7.1", "4.7.1"),
        ("4.9", "4.7.1"),
        ("4.9.2", "4.9.1"),
        ("4.9.7", "4.9.3"),
        ("5.0.0", "5.0"),
        ("5.1.1", "5.1.1"),
        ("5.3.3", "5.3.2"),
        ("5.4.0", "5.4"),
        ("5.5", "5.5"),
    ],
)
def test_a_version_picks_its_rule_set(version: str, rule_set: str) -> None:
    assert rules_for(version).name == rule_set


@pytest.mark.parametrize("version", ["3.2.6", "6.0", "five", "5"])
def test_an_unsupported_or_unreadable_version_is_refused(version: str) -> None:
    with pytest.raises(ConfigError):
        rules_for(version)


@pytest.mark.parametrize(
    ("version", "source", "expected"),
    [
        # 4.9.x: every name gets an offset, the SCHEDULE_TOPIC_XXXX copy is dispatched, queueId 0 for %LMQ%
        ("4.9.7", "SCHEDULE_TOPIC_XXXX", [("%LMQ%a", 0, 3), ("plain", 2, 4)]),
        ("5.0.0", "SCHEDULE_TOPIC_XXXX", [("%LMQ%a", 0, 3)]),
        ("5.1.2", "SCHEDULE_TOPIC_XXXX", []),
        ("5.1.2", "rmq_sys_wheel_timer", []),
        ("5.1.2", "rmq_sys_other", [("%LMQ%a", 0, 3)]),
        ("5.5", "rmq_sys_other", []),
        ("5.5", "%RETRY%g", []),
        ("5.5", "TopicOrders", [("%LMQ%a", 0, 3)]),
    ],
)
def test_lmq_targets_follow_the_version(version: str, source: str, expected: list) -> None:
    cfg = BrokerConfig(enableMultiDispatch=True, enableLmq=True, brokerVersion=version)
    assert lmq_targets(cfg, source, 2, "%LMQ%a,plain", "3,4") == expected


def test_lmq_targets_skip_unequal_lists_and_split_like_java() -> None:
    cfg = BrokerConfig(enableMultiDispatch=True, enableLmq=True, brokerVersion="5.5")
    assert lmq_targets(cfg, "T", 1, "%LMQ%a,%LMQ%b", "3") == []
    assert lmq_targets(cfg, "T", 1, "%LMQ%a,", "3,,") == [("%LMQ%a", 0, 3)]  # trailing empties dropped
    assert lmq_targets(cfg, "T", 1, "%LMQ%a/b", "3") == []
    assert lmq_targets(dataclasses.replace(cfg, enableLmq=False), "T", 1, "%LMQ%a", "3") == [("%LMQ%a", 1, 3)]


def test_batch_cq_topics_come_from_topics_json() -> None:
    text = '{"topicConfigTable": {"A": {"attributes": {"queue.type": "BatchCQ"}}, "B": {"attributes": {}}, "C": {}}}'
    assert batch_cq_topics(text) == ("A",)
    with pytest.raises(ConfigError):
        batch_cq_topics("[]")


# --- detection ----------------------------------------------------------------------------------------


def detected(facts: StoreFacts) -> str:
    """The name of the oldest rule set the facts' clues allow."""
    return select("", facts).rules.name


def test_no_clue_allows_every_release_and_settles_only_where_they_write_the_same_files() -> None:
    rules = select("", StoreFacts())
    assert (rules.rules.name, rules.settled, rules.source) == ("4.0", False, "detected")
    assert [r.name for r in rules.candidates] == [r.name for r in RULE_SETS]
    assert "no clue in the store" in rules.why
    assert rules.settle(RuleInputs()).settled
    last = StoreFacts(root_entries=frozenset({"rocksdbstore"}))  # 5.4.0 or later ran last
    with pytest.raises(AmbiguousRelease, match="for its first records"):  # an older one may have written them
        select("", last).settle(RuleInputs(tagged_index_records=1))
    keys = dataclasses.replace(last, tag_keys_checked=4, tag_keys_found=4)  # keys of a live IndexFile ...
    with pytest.raises(AmbiguousRelease, match="for its first records"):  # ... from later records only
        select("", keys).settle(RuleInputs(tagged_index_records=1))
    covered = dataclasses.replace(keys, index_covers_start=True)  # ... from the first one on
    assert select("", covered).settle(RuleInputs(tagged_index_records=1)).settled  # 5.4 and 5.5 write the same
    with pytest.raises(AmbiguousRelease, match="topic#T#<TAGS>") as e:
        rules.settle(RuleInputs(tagged_index_records=3))
    assert e.value.choices == ["4.0.0", "5.4.0"]  # one release of each rule set that writes other files
    assert e.value.exit_code == 2
    with pytest.raises(AmbiguousRelease) as e:
        rules.settle(RuleInputs(index_records=3))
    # each difference is said once, at the release where it changes, not once per later row
    assert str(e.value).count("hashSlotCount") == 1
    assert "occupied slots, not every put, from 4.7.1 on" in str(e.value)


def test_an_index_file_from_the_first_record_on_tells_how_its_slots_were_counted() -> None:
    """5.2 or later ran last (the store root), its records end with 0x02 as 4.0 … 4.9.0's do: the first records may
    be a 4.6 broker's, whose hashSlotCount counts every put, unless a live IndexFile from the first record on shows
    it: no slot two keys share (every release writes it alike), or the count of a file where they share."""
    facts = StoreFacts(props_records=3, props_ending_02=3, root_entries=frozenset({"timerlog"}))
    inputs = RuleInputs(index_records=9)
    with pytest.raises(AmbiguousRelease, match="hashSlotCount"):
        select("", facts).settle(inputs)
    covered = dataclasses.replace(facts, index_covers_start=True)
    assert select("", covered).settle(inputs).settled
    shared = dataclasses.replace(covered, index_slot_counts=(("f", 9, 10, 9),))  # counts occupied slots
    assert select("", shared).settle(inputs).settled
    with pytest.raises(AmbiguousRelease, match="hashSlotCount"):  # a later file's count tells of later records
        select("", dataclasses.replace(shared, index_covers_start=False)).settle(inputs)


def test_batch_queues_without_a_consumequeue_of_their_topic_were_written_by_releases_that_have_them() -> None:
    """5.0.0 or later ran last (config/); records end without 0x02 as 4.9.1 … 5.1.x's do: a 4.9.x broker before an
    upgrade would have put a BatchCQ topic's records into consumequeue/<topic>, which the live files lack."""
    facts = StoreFacts(props_records=3, config_entries=frozenset({"timercheck"}))
    inputs = RuleInputs(batch_cq_records=5)
    with pytest.raises(AmbiguousRelease, match="BatchCQ"):
        select("", facts).settle(inputs)
    live = dataclasses.replace(facts, consumequeue_entries=frozenset({"TopicA"}), batch_queue_topics=frozenset({"B"}))
    assert select("", live).settle(inputs).settled
    both = dataclasses.replace(live, consumequeue_entries=frozenset({"TopicA", "B"}))
    with pytest.raises(AmbiguousRelease, match="BatchCQ"):
        select("", both).settle(inputs)


def test_clues_bound_the_releases() -> None:
    facts = StoreFacts(root_entries=frozenset({"timerlog"}), props_records=10, props_ending_02=10, tag_keys_checked=4)
    assert detected(facts) == "5.2"
    assert [r.name for r in select("", facts).candidates] == ["5.2", "5.3.1", "5.3.2"]  # the live index: no tag keys
    untold = [r.name for r in select("", dataclasses.replace(facts, tag_keys_checked=0)).candidates]
    assert untold == ["5.2", "5.3.1", "5.3.2", "5.4", "5.5"]
    assert detected(dataclasses.replace(facts, tag_keys_found=4)) == "5.4"
    covered = dataclasses.replace(facts, tag_keys_found=4, index_covers_start=True)  # the live IndexFiles' keys
    assert select("", covered).settle(RuleInputs(tagged_index_records=4)).settled  # from the first record on
    assert detected(StoreFacts(root_entries=frozenset({"batchconsumequeue"}), props_records=3)) == "5.0"
    below = select("", StoreFacts(props_records=3))  # properties not ending with 0x02: 4.9.1 up to 5.2
    assert [r.name for r in below.candidates] == ["4.9.1", "4.9.3", "5.0", "5.1.1", "5.1.2"]
    assert releases(StoreFacts(props_records=3)).text == "4.9.1 up to 5.2.0"
    ending = releases(StoreFacts(props_records=3, props_ending_02=3))  # 4.x before 4.9.1 and 5.2 on end with 0x02
    assert ending.text == "before 4.9.1 or 5.2.0 or later"


def test_a_given_release_wins_and_is_settled() -> None:
    rules = select("5.3.3", StoreFacts(props_records=3, props_ending_02=3))
    assert (rules.rules.name, rules.settled, rules.version) == ("5.3.2", True, "5.3.3")
    assert rules.settle(RuleInputs(tagged_index_records=9)) is rules
    assert rules.to_dict()["source"] == "--broker-version"
    assert "WARNING" not in rules.why
    warned = select("5.5.0", StoreFacts(props_records=3))  # its properties do not end with 0x02: before 5.2
    assert "WARNING: the store's clues allow 4.9.1 up to 5.2.0" in warned.why
    assert warned.rules.name == "5.5"  # the operator's word wins; the console line and the report say it


@pytest.mark.parametrize(
    ("inputs", "differ"),
    [
        (RuleInputs(tagged_index_records=1), {("5.3.2", "5.4")}),
        (RuleInputs(index_records=1), {("4.0", "4.7.1")}),
        (RuleInputs(split_pair_records=1), {("4.7.1", "4.9.1")}),
        (RuleInputs(batch_cq_records=1), {("4.9.3", "5.0")}),
        (RuleInputs(lmq_sources=(("%RETRY%g", 1),)), {("4.9.1", "4.9.3"), ("5.0", "5.1.1")}),
        (RuleInputs(lmq_sources=(("SCHEDULE_TOPIC_XXXX", 1),)), {("4.9.1", "4.9.3"), ("5.1.1", "5.1.2")}),
        (RuleInputs(lmq_sources=(("rmq_sys_x", 1),)), {("4.9.1", "4.9.3"), ("5.1.2", "5.2")}),
        (RuleInputs(lmq_sources=(("TopicOrders", 1),), lmq_unprefixed_names=1), {("4.9.1", "4.9.3"), ("4.9.3", "5.0")}),
        (RuleInputs(lmq_sources=(("TopicOrders", 1),), lmq_path_names=1), {("4.9.1", "4.9.3"), ("5.1.1", "5.1.2")}),
        (RuleInputs(lmq_sources=(("TopicOrders", 2),)), {("4.9.1", "4.9.3")}),  # LMQ from 4.9.3 on
        (RuleInputs(lmq_unprefixed_names=1), set()),  # no record multi-dispatched: the names are never read
        # LMQ units out of step: written at the write position by the rows 5.0 … 5.2 only
        (
            RuleInputs(lmq_sources=(("T", 1),), lmq_out_of_step=1),
            {("4.9.1", "4.9.3"), ("4.9.3", "5.0"), ("5.2", "5.3.1")},
        ),
        (
            RuleInputs(lmq_sources=(("T", 1),), lmq_ends_unknown=True),
            {("4.9.1", "4.9.3"), ("4.9.3", "5.0"), ("5.2", "5.3.1")},
        ),
    ],
)
def test_what_makes_two_rule_sets_differ_for_a_store(inputs: RuleInputs, differ: set[tuple[str, str]]) -> None:
    pairs = {(a.name, b.name) for a, b in itertools.pairwise(RULE_SETS) if differences(a, b, inputs)}
    assert pairs == differ


def test_rule_inputs_add_up_and_survive_json() -> None:
    a = RuleInputs(1, 2, (("A", 1), ("B", 2)), 3, 4)
    b = RuleInputs(10, 0, (("B", 1),), 0, 1)
    assert a + b == RuleInputs(11, 2, (("A", 1), ("B", 3)), 3, 5)
    assert RuleInputs.from_dict(json.loads(json.dumps(dataclasses.asdict(a)))) == a


def test_lmq_steps_add_up_in_commitlog_order() -> None:
    """A queue's units keep step within a part and between parts (its last offset, then the next part's first); a
    repeat, a skip or an earlier offset at the seam is one out of step."""
    a = RuleInputs(lmq_out_of_step=1, lmq_ends=(("%LMQ%a", 0, 9), ("%LMQ%b", 5, 6)))
    b = RuleInputs(lmq_ends=(("%LMQ%a", 10, 20), ("%LMQ%c", 3, 3)))
    c = RuleInputs(lmq_ends=(("%LMQ%a", 20, 21), ("%LMQ%b", 8, 9)))
    total = a + b + c
    assert total.lmq_out_of_step == 3  # a's own, a's repeat of 20, b's skip of 7
    assert total.lmq_ends == (("%LMQ%a", 0, 21), ("%LMQ%b", 5, 9), ("%LMQ%c", 3, 3))
    assert RuleInputs.from_dict(json.loads(json.dumps(dataclasses.asdict(total)))) == total
    many = RuleInputs(lmq_ends=tuple((f"%LMQ%{n}", 0, 0) for n in range(LMQ_ENDS_KEPT + 1)))
    assert (RuleInputs() + many).lmq_ends_unknown and (RuleInputs() + many).lmq_ends == ()


def test_contradicting_clues_are_refused() -> None:
    facts = StoreFacts(crc_property_records=2, props_records=5, props_ending_02=0)
    with pytest.raises(ConfigError, match="--broker-version"):
        releases(facts)


def test_a_4_9_checkpoint_has_no_5_x_fields() -> None:
    cp = (1).to_bytes(8, "big") * 3 + bytes(4096 - 24)
    assert detected(StoreFacts(checkpoint=cp)) == "4.0"
    assert detected(StoreFacts(checkpoint=cp[:24] + (7).to_bytes(8, "big") + cp[32:])) == "5.0"


# --- BatchConsumeQueue audit -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bcq_queue(v5_fixture: Path) -> tuple[BrokerConfig, dict[str, bytes]]:
    root = v5_fixture / "clean"
    cfg = store_config(root, v5_fixture / "broker.conf", "5.5")
    q = root / "batchconsumequeue" / "TopicBatchCQ" / "0"
    return cfg, {p.name: p.read_bytes() for p in q.iterdir()}


def unit_at(data: bytes, k: int) -> tuple[int, ...]:
    """Unit k of a BatchConsumeQueue file read by hand: offset, size, tagsCode, storeTime, base, batchSize."""
    import struct

    return struct.unpack_from(">qiqqqh", data, k * 46)


def test_a_healthy_batch_queue_is_clean(bcq_queue) -> None:
    cfg, files = bcq_queue
    qa = classify_batch_queue("TopicBatchCQ", 0, files, files, cfg, 0, 1_438_095)
    assert qa.findings == []
    assert (qa.row.live_entries, qa.row.live_end, qa.row.rebuilt_end) == (38, 151, 151)
    base, batch_size = unit_at(files["00000000000000000000"], 37)[4:]
    assert base + batch_size == 151


def test_batch_queue_damage_is_named(bcq_queue) -> None:
    cfg, files = bcq_queue
    name = "00000000000000000000"
    data = bytearray(files[name])
    lost_tail = bytes(data[: 36 * 46]).ljust(len(data), b"\0")  # the last two units never written
    qa = classify_batch_queue("TopicBatchCQ", 0, {name: lost_tail}, files, cfg, 0, 1_438_095)
    assert [(f.kind, f.count, f.queue_offset) for f in qa.findings] == [("cq-missing-tail", 2, unit_at(data, 36)[4])]
    assert qa.write == [name]
    data[5 * 46 + 8 : 5 * 46 + 12] = (999).to_bytes(4, "big")  # unit 5's size
    qa = classify_batch_queue("TopicBatchCQ", 0, {name: bytes(data)}, files, cfg, 0, 1_438_095)
    assert [(f.kind, f.file_offset) for f in qa.findings] == [("cq-wrong-entries", 5 * 46)]
    qa = classify_batch_queue("TopicBatchCQ", 0, {}, files, cfg, 0, 1_438_095)
    assert [f.kind for f in qa.findings] == ["cq-missing-queue"]


def test_a_batch_unit_pointing_into_damaged_records_is_named_as_damaged(bcq_queue) -> None:
    """The rebuilt queue lacks unit 7, whose batch lies in damaged records: a cq-damaged-entries (as a
    ConsumeQueue's unit there is), not a unit the commitlog does not hold."""
    cfg, files = bcq_queue
    name = "00000000000000000000"
    data = files[name]
    rebuilt = {name: (data[: 7 * 46] + data[8 * 46 :]).ljust(len(data), b"\0")}  # unit 7 dropped
    at = unit_at(data, 7)[0]
    qa = classify_batch_queue("TopicBatchCQ", 0, files, rebuilt, cfg, 0, 1_438_095, [(at - 10, at + 10)])
    damaged = [(f.queue_offset, f.commitlog_offset, f.count) for f in qa.findings if f.kind == "cq-damaged-entries"]
    assert damaged == [(unit_at(data, 7)[4], at, 1)]
    qa = classify_batch_queue("TopicBatchCQ", 0, files, rebuilt, cfg, 0, 1_438_095)
    assert "cq-damaged-entries" not in [f.kind for f in qa.findings]


# --- stores of the real-broker harness (tests/broker/), when cached ----------------------------------------

#: (version, variant) of the cached harness stores a rebuild must give back byte for byte
BYTE_EXACT = [("4.9.7", "default"), ("5.3.3", "default"), ("5.5.0", "default"), ("5.5.0", "crc")]


def harness_config(store: Path, version: str) -> BrokerConfig:
    """The harness store's broker.conf, BatchCQ topics as the rebuild finds them, and the broker version."""
    root = store / "store"
    topics_json = root / "config" / "topics.json"
    topics = set(batch_cq_topics(topics_json.read_text())) if topics_json.is_file() else set()
    if (root / "batchconsumequeue").is_dir():
        topics |= {p.name for p in (root / "batchconsumequeue").iterdir()}
    cfg = load_broker_config(store / "broker.conf")
    return dataclasses.replace(cfg, brokerVersion=version, batchCQTopics=tuple(sorted(topics)))


@pytest.mark.broker
@pytest.mark.parametrize(("version", "variant"), BYTE_EXACT)
def test_harness_store_is_rebuilt_byte_exact(version: str, variant: str) -> None:
    store = harness_store(version, variant)
    root = store / "store"
    rebuilt = rebuild_store(root, harness_config(store, version))
    live = live_files(root, "consumequeue", "batchconsumequeue")
    assert sorted(rebuilt.files) == sorted(live)
    assert [p for p, data in rebuilt.files.items() if live[p] != data] == []
    assert rebuilt.index == [p.read_bytes() for p in sorted((root / "index").iterdir())]
    assert (rebuilt.findings, rebuilt.bad_crc) == ([], [])


@pytest.mark.broker
def test_the_4_9_7_store_dispatches_the_schedule_copy_to_lmq() -> None:
    """4.9.x gives the SCHEDULE_TOPIC_XXXX copy of a delayed LMQ message its own LMQ units (FACTS.md)."""
    store = harness_store("4.9.7", "default")
    rebuilt = rebuild_store(store / "store", harness_config(store, "4.9.7"))
    as_5x = rebuild_store(store / "store", harness_config(store, "5.2.0"))  # excludes SCHEDULE_TOPIC_XXXX
    lmq = sorted(p for p in rebuilt.files if "%LMQ%" in p)
    assert lmq and any(rebuilt.files[p] != as_5x.files.get(p) for p in lmq)


# --- RocksDB ConsumeQueue -------------------------------------------------------------------------------


def test_rocksdb_unit_keys_read_back() -> None:
    key = unit_key("%LMQ%room-1", 0, 300)
    assert key == b"\x00\x00\x00\x0b\x01%LMQ%room-1\x01\x00\x00\x00\x00\x01" + (300).to_bytes(8, "big")
    assert parse_unit_key(key) == ("%LMQ%room-1", 0, 300)
    with pytest.raises(StoreFormatError):
        parse_unit_key(key[:-1])


def reference_unit_count(commitlog: Path) -> int:
    """ConsumeQueue units a 5.5.0 RocksDB store holds, counted by the plain-Python reference walk: one per
    dispatched record (not PREPARED, not ROLLBACK), and one per LMQ name of a record that holds both LMQ
    properties and whose topic MixAll.topicAllowsLMQ (not %RETRY%, %DLQ%, rmq_sys_*, SCHEDULE_TOPIC_XXXX)."""
    blocked = ("%RETRY%", "%DLQ%", "rmq_sys_")
    n = 0
    for r in walk_commitlog(commitlog):
        if r.sys_flag & 0xC not in (0, 0x8):
            continue
        names, offsets = r.properties.get("INNER_MULTI_DISPATCH"), r.properties.get("INNER_MULTI_QUEUE_OFFSET")
        lmq = names and offsets and not r.topic.startswith(blocked) and r.topic != "SCHEDULE_TOPIC_XXXX"
        n += 1 + (len(names.split(",")) if lmq else 0)
    return n


@pytest.mark.broker
def test_the_rocksdb_store_holds_what_the_commitlog_gives() -> None:
    """Every unit of the real 5.5.0 broker's RocksDB ConsumeQueue, laid out as files, equals the rebuilt files."""
    store = harness_store("5.5.0", "rocksdb")
    root = store / "store"
    cfg = harness_config(store, "5.5")
    cfg = dataclasses.replace(cfg, storeType="defaultRocksDB", batchCQTopics=("TopicBatchCQ",))
    assert not cfg.is_batch_cq("TopicBatchCQ") and not cfg.dense_queue_offsets("TopicBatchCQ")
    units = read_units(root / "consumequeue")
    rebuilt = rebuild_store(root, cfg)
    as_files = {
        f"consumequeue/{t}/{q}/{name}": data
        for (t, q), u in units.items()
        for name, data in as_queue_files(u, cfg.cq_file_size)
    }
    assert sum(len(u) for u in units.values()) == reference_unit_count(root / "commitlog")
    assert sorted(as_files) == sorted(rebuilt.files)
    assert [p for p in as_files if as_files[p] != rebuilt.files[p]] == []
    assert rebuilt.index == [p.read_bytes() for p in sorted((root / "index").iterdir())]


# --- checkpoint -------------------------------------------------------------------------------------------


@pytest.mark.broker
@pytest.mark.parametrize("seed", SEEDS)
def test_5_5_checkpoint_offsets_are_read_and_kept(seed: int) -> None:
    """5.5.0 flushes logicsPhysicalOffset at byte 40 only at a thorough ConsumeQueue flush (FACTS.md): zero or a
    record boundary of the commitlog; a rebuilt checkpoint keeps the live 5.x offsets whatever they are."""
    store = harness_store("5.5.0", "default", seed)
    page = (store / "store" / "checkpoint").read_bytes()
    live = Checkpoint.unpack(page)
    assert live.logics_physical_offset == int.from_bytes(page[40:48], "big")
    ends = {r.offset + r.total_size for r in walk_commitlog(store / "store" / "commitlog")}
    assert live.logics_physical_offset == 0 or live.logics_physical_offset in ends
    rebuilt = Checkpoint(1, 2, 3).with_5x_fields_of(live)
    assert rebuilt.pack()[:24] == Checkpoint(1, 2, 3).pack()[:24]
    assert rebuilt.pack()[24:48] == page[24:48]
    assert Checkpoint(1, 2, 3).with_5x_fields_of(None) == Checkpoint(1, 2, 3)


def test_5_5_checkpoint_offsets_are_read_from_bytes_24_to_47() -> None:
    page = b"".join(n.to_bytes(8, "big") for n in (1, 2, 3, 4, 5, 1_040_318)).ljust(4096, b"\0")
    live = Checkpoint.unpack(page)
    assert (live.master_flushed_offset, live.confirm_phy_offset, live.logics_physical_offset) == (4, 5, 1_040_318)


@pytest.mark.parametrize(
    ("source", "releases", "writers"),
    [
        ("SCHEDULE_TOPIC_XXXX", ((4, 9, 0), (5, 2, 0)), ["4.9.3", "5.0", "5.1.1"]),
        ("SCHEDULE_TOPIC_XXXX", ((5, 2, 0), None), ["5.2"]),  # 5.2.0 … 5.3.0 append them; 5.3.1 on do not
        ("rmq_sys_wheel_timer", ((5, 5, 0), None), []),
        ("%RETRY%g", ((4, 9, 0), (5, 2, 0)), ["4.9.3", "5.0"]),
        ("TopicOrders", ((4, 9, 0), None), ["4.9.3", "5.0", "5.1.1", "5.1.2", "5.2", "5.3.1", "5.3.2", "5.4", "5.5"]),
    ],
)
def test_only_releases_that_append_lmq_offsets_for_a_source_wrote_them(source, releases, writers) -> None:
    found = Releases.between(*releases)
    got, why = lmq_writers(found, RuleInputs(lmq_sources=((source, 3),)))
    assert [r.name for r in got] == writers
    assert bool(why) == (len(writers) < len(found.candidates))


def test_a_4_9_store_with_lmq_copies_of_delayed_messages_settles_on_the_rules_that_wrote_them() -> None:
    """The 4.9.7 harness store's shape: properties not ending with 0x02 and LMQ offsets on SCHEDULE_TOPIC_XXXX
    records: 5.1.2 … 5.1.x would not have appended them, and 4.9 … 5.1.1 dispatch these records alike."""
    rules = select("", StoreFacts(props_records=5, lmq_sources=("TopicOrders",)))  # the sample met an LMQ record
    assert rules.rules.name == "4.9.3"  # 4.9.1 and 4.9.2 give no LMQ offsets: they did not write it
    inputs = RuleInputs(tagged_index_records=9, lmq_sources=(("SCHEDULE_TOPIC_XXXX", 3), ("TopicOrders", 90)))
    settled = rules.settle(inputs)
    assert (settled.rules.name, settled.settled) == ("4.9.3", True)
    assert "appended under rule sets 4.9.3, 5.0, 5.1.1 only" in settled.why
    with pytest.raises(ConfigError, match="contradict"):
        select("", StoreFacts(props_records=5, props_ending_02=5)).settle(RuleInputs(lmq_sources=(("%RETRY%g", 1),)))


# --- a store several releases wrote (an in-place upgrade) ---------------------------------------------------


def test_each_stretch_of_a_batch_is_dispatched_by_its_release() -> None:
    cfg = BrokerConfig(brokerVersion="4.9.7", releaseStretches=((1000, "5.5.0"),))
    parts = cfg.stretch_parts(np.array([0, 500, 1000, 1500], np.int64))
    assert [(k, lo, hi, c.brokerVersion, c.releaseStretches) for k, lo, hi, c in parts] == [
        (0, 0, 2, "4.9.7", ()),
        (1, 2, 4, "5.5.0", ()),
    ]
    assert [(k, lo, hi) for k, lo, hi, _ in cfg.stretch_parts(np.array([1200], np.int64))] == [(1, 0, 1)]
    assert BrokerConfig().stretch_parts(np.array([5], np.int64))[0][:3] == (0, 0, 1)


def test_a_stretch_told_by_its_live_files_gets_its_own_rules_or_a_refusal_naming_its_range() -> None:
    """4.8.0 then 5.5.0 (both end property strings with 0x02): the first stretch's IndexFiles hold no
    topic#T#<TAGS> keys and count occupied slots; that allows 4.7.1 … 4.9.0 or 5.2 … 5.3.x, which read a TAGS value
    holding 0x01 otherwise: refused, naming the range and the flag, until its ConsumeQueue units show the split."""
    cp = bytes(40) + b"\x01" * 8  # logicsPhysicalOffset: 5.5.0
    facts = StoreFacts(checkpoint=cp, props_records=5, props_ending_02=5, tag_keys_found=4, tag_keys_checked=4)
    slots = Clue.at_least("index hashSlotCount", "index/x's hashSlotCount counts occupied slots", (4, 7, 1))
    old, new = Stretch(0, True, (), False, None, (slots,)), Stretch(9000, True, (), True)
    rules = select_stretches("", facts, (old, new))
    ((start, first),) = rules.earlier
    assert (start, first.releases.text, rules.rules.name) == (0, "4.7.1 up to 4.9.1 or 5.2.0 up to 5.4.0", "5.5")
    assert "topic#T#<TAGS>" in first.why
    with pytest.raises(AmbiguousRelease, match=r"commitlog offsets 0 up to 9,000 .*--broker-version X\.Y\.Z"):
        first.settle(RuleInputs(split_pair_records=3))
    split = dataclasses.replace(old, split_pairs=True)
    first = select_stretches("", facts, (split, new)).earlier[0][1]
    assert first.releases.text == "4.7.1 up to 4.9.1" and first.settle(RuleInputs(split_pair_records=3)).settled
    with pytest.raises(ConfigError, match=r"offsets 0 up to 9,000 .*--broker-version X\.Y\.Z"):
        select_stretches("", facts, (dataclasses.replace(old, tag_keys=True, split_pairs=True), new))


def test_fingerprint_boundaries_whose_windows_overlap_are_one_stretch_boundary() -> None:
    """A property-ending cut at 800 (its window: (799, 800]) inside a tag-key cut's window (600, 900]: one boundary,
    at 800; windows apart: two."""
    claim = (-1, 0, False)
    assert _merged([0], [claim, (799, 800, True)], [claim, (600, 900, True)]) == [0, 800]
    assert _merged([0], [claim, (199, 200, True)], [claim, (600, 900, True)]) == [0, 200, 900]
    assert _merged([0], [], [claim]) == [0]


def test_an_upgraded_store_gets_the_rules_of_each_release_that_wrote_it() -> None:
    """4.9.x records (no 0x02 ending, LMQ offsets on schedule copies), then 5.5.0 ones: the last stretch is told by
    every clue, the first by its own records, up to the last one's releases; a config/ file without a newer key may
    be the older release's: weak."""
    keys = frozenset(f"consumerOffset.json:{k}" for k in ("offsetTable", "dataVersion", "pullOffsetTable"))
    old = frozenset({"lmqConsumerOffset.json:offsetTable"})  # left by 4.9.x: no dataVersion
    facts = StoreFacts(config_keys=keys | old, props_records=5, props_ending_02=5)
    stretches = (Stretch(0, False, ("SCHEDULE_TOPIC_XXXX", "TopicOrders")), Stretch(5000, True))
    rules = select_stretches("", facts, stretches)
    assert (rules.rules.name, rules.start, rules.releases.text) == ("5.5", 5000, "5.5.0 or later")
    assert [c.clue for c in rules.releases.set_aside] == ["config dataVersion", "config pullOffsetTable"]
    ((start, first),) = rules.earlier
    assert (start, first.rules.name, first.releases.text) == (0, "4.9.3", "4.9.1 up to 5.2.0")
    assert rules.stretches == ((5000, "5.5.0"),)
    assert "from commitlog offset 0: broker rules 4.9.3" in rules.line
    assert "from commitlog offset 5,000: broker rules 5.5" in rules.line
    first = first.settle(RuleInputs(lmq_sources=(("SCHEDULE_TOPIC_XXXX", 2), ("TopicOrders", 9))))
    assert first.settled
    with pytest.raises(AmbiguousRelease, match="for its first records"):  # 5.2 … 5.4 may have written them first
        rules.settle(RuleInputs(tagged_index_records=4))
    keys = dataclasses.replace(facts, tag_keys_checked=4, tag_keys_found=4, index_covers_start=True)
    assert select_stretches("", keys, stretches).settle(RuleInputs(tagged_index_records=4)).settled
    assert [s["start"] for s in rules.to_dict()["stretches"]] == [0, 5000]
    with pytest.raises(ConfigError, match="contradict"):  # one stretch: no upgrade, and the old file is strong
        select_stretches("", facts, stretches[1:])


def test_an_earlier_stretch_of_batch_cq_records_gets_a_row_with_batch_consume_queues_or_no_command() -> None:
    """5.1.x records (no 0x02 ending, LMQ offsets on TopicOrders, BatchCQ records), then 5.5.0 ones (the real
    5.1.4 -> 5.5.0 store): where batchconsumequeue/ holds the BatchCQ topic and consumequeue/ does not, every
    release that wrote its records had BatchConsumeQueues, the first stretch too: it is parsed by a row that has
    them and settled. Without that evidence it is refused, and the refusal offers no --broker-version (the flag
    names the release that ran last: given an older one, the newer records would be parsed by its rules)."""
    facts = StoreFacts(props_records=5, props_ending_02=5, consumequeue_entries=frozenset({"TopicOrders"}))
    stretches = (Stretch(0, False, ("TopicOrders",)), Stretch(5000, True))
    inputs = RuleInputs(lmq_sources=(("TopicOrders", 9),), batch_cq_records=53)
    shown = dataclasses.replace(facts, batch_queue_topics=frozenset({"TopicBatchCQ"}))
    ((_, first),) = select_stretches("", shown, stretches).earlier
    assert (first.rules.name, first.rules.batch_cq, first.settle_earlier(inputs).settled) == ("5.0", True, True)
    ((_, first),) = select_stretches("", facts, stretches).earlier
    assert first.rules.name == "4.9.3"
    with pytest.raises(AmbiguousRelease, match="no flag settles commitlog offsets 0 up to 5,000") as refused:
        first.settle_earlier(inputs)
    assert refused.value.choices == []


def test_stretches_whose_index_file_counts_differ_are_refused() -> None:
    """4.5.2 records (hashSlotCount: every put), then 5.5.0 ones (occupied slots), both put into IndexFiles: the
    IndexFile both wrote counts both ways: refused, naming the later stretch's start; without puts in the later
    stretch, or with stretches counting alike (4.8.0 then 5.5.0), nothing to refuse."""
    facts = StoreFacts(props_records=5, props_ending_02=5, tag_keys_checked=4, tag_keys_found=4)
    old = dataclasses.replace(Stretch(0, True, tag_keys=False), files=(Clue.below("index", "every put", (4, 7, 1)),))
    rules = select_stretches("", facts, (old, Stretch(5000, True, tag_keys=True)))
    stretches = [*rules.earlier, (rules.start, rules)]
    puts = {0: RuleInputs(index_records=9), 1: RuleInputs(index_records=9)}
    with pytest.raises(ConfigError, match=r"from commitlog offset 5,000 .* hashSlotCount"):
        refuse_mixed_slot_counts(stretches, puts)
    refuse_mixed_slot_counts(stretches, {0: puts[0]})
    counted = dataclasses.replace(old, files=(Clue.at_least("index", "occupied slots", (4, 7, 1)),))
    alike = select_stretches("", facts, (counted, Stretch(5000, True, tag_keys=True)))
    assert alike.earlier[0][1].rules.name == "4.7.1"
    refuse_mixed_slot_counts([*alike.earlier, (alike.start, alike)], puts)
