"""Release clues that survive a disaster (index/, consumequeue/, batchconsumequeue/ and the checkpoint lost):
store-root entries, config/ files and the key paths of config/ JSON files (storelib.broker.detection.file_clues).

The first releases asserted here are the ones tests/broker/FACTS.md proves from the release jars; the broker
test checks every real harness store against them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from jobs.pipeline.rebuild_flow import list_segments, store_facts
from jobs.pipeline.store_rules import LiveIndex, resolve_rules
from storelib.broker.config import load_broker_config
from storelib.broker.detection import StoreFacts, config_keys, record_clues, releases
from storelib.broker.versions import parse_version
from storelib.errors import ConfigError
from storelib.formats.commitlog import format_properties
from tests.broker.harness import (
    CORE_VERSIONS,
    SEEDS,
    UPGRADED_FROM,
    VARIANTS,
    VERSIONS,
    build_store,
    java_available,
)
from tests.builders import batch_of, msg
from tests.reference import walk_commitlog
from tests.storecopy import rmqstore_main

LOST = ("index", "consumequeue", "batchconsumequeue", "checkpoint")


def low(facts: StoreFacts) -> str:
    return ".".join(map(str, releases(facts).low))


def test_config_keys_read_fastjson_files() -> None:
    text = '{"dataVersion":{"counter":0,"stateVersion":0},"offsetTable":{"T@G":{0:61,\n\t\t1:7}},"pullOffsetTable":{}}'
    keys = config_keys("consumerOffset.json", text)
    assert keys == {
        "consumerOffset.json:dataVersion",
        "consumerOffset.json:dataVersion.counter",
        "consumerOffset.json:dataVersion.stateVersion",
        "consumerOffset.json:offsetTable",
        "consumerOffset.json:offsetTable.T@G",
        "consumerOffset.json:pullOffsetTable",
    }
    assert config_keys("topics.json", "{not json") == frozenset()
    assert config_keys("topics.json", "[1, 2]") == frozenset()


@pytest.mark.parametrize(
    ("entry", "first"), [("abort.bak", "5.0.0"), ("compaction", "5.1.0"), ("rocksdbstore", "5.4.0")]
)
def test_store_root_entries(entry: str, first: str) -> None:
    assert low(StoreFacts(root_entries=frozenset({entry, "commitlog", "config", "lock"}))) == first
    assert low(StoreFacts(root_entries=frozenset({"commitlog", "config", "lock"}))) == "4.0.0"


@pytest.mark.parametrize(
    ("entry", "first"),
    [
        ("timercheck", "5.0.0"),
        ("timermetrics", "5.0.0"),
        ("consumerOrderInfo.json", "5.0.0"),
        ("transactionMetrics", "5.2.0"),
    ],
)
def test_config_entries(entry: str, first: str) -> None:
    assert low(StoreFacts(config_entries=frozenset({entry, "topics.json", "delayOffset.json"}))) == first


def test_a_5_4_system_topic() -> None:
    topics = frozenset({"topics.json:topicConfigTable", "topics.json:topicConfigTable.TBW102"})
    rocksdb_trans = "topics.json:topicConfigTable.RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC"
    assert low(StoreFacts(config_keys=topics | {rocksdb_trans})) == "5.4.0"
    assert low(StoreFacts(config_keys=topics)) == "4.0.0"


@pytest.mark.parametrize(
    ("name", "keys", "newer", "first"),
    [
        ("topics.json", ("dataVersion",), "dataVersion.stateVersion", "5.0.0"),
        ("consumerOffset.json", ("offsetTable",), "dataVersion", "5.0.0"),
        ("lmqConsumerOffset.json", ("offsetTable", "lmqOffsetTable"), "dataVersion", "5.0.0"),
        ("consumerOrderInfo.json", ("table",), "orderedConsumptionLevel", "5.4.0"),
        ("consumerOrderInfo.json", ("table", "orderedConsumptionLevel"), "orderInfoCount", "5.5.0"),
        ("consumerOffset.json", ("offsetTable", "dataVersion"), "pullOffsetTable", "5.5.0"),
        ("lmqConsumerOffset.json", ("offsetTable", "dataVersion"), "pullOffsetTable", "5.5.0"),
    ],
)
def test_config_file_schemas(name: str, keys: tuple[str, ...], newer: str, first: str) -> None:
    """A config file holding the newer key: written by that release or later; without it (and with the keys the
    release before writes): by an older one."""
    before = frozenset(f"{name}:{k}" for k in keys)
    assert low(StoreFacts(config_keys=before | {f"{name}:{newer}"})) == first
    assert releases(StoreFacts(config_keys=before)).high == parse_version(first)
    assert releases(StoreFacts(config_keys=frozenset({f"other.json:{keys[0]}"}))).high is None


def test_config_files_tell_4_9_from_5_0() -> None:
    """Only commitlog/ and config/ left: 4.9 and 5.0/5.1 dispatch LMQ differently, and are told apart."""
    old = frozenset({"topics.json:dataVersion", "topics.json:dataVersion.counter"})
    assert [r.name for r in releases(StoreFacts(config_keys=old, props_records=9)).candidates] == ["4.9.1", "4.9.3"]
    new = old | {"topics.json:dataVersion.stateVersion"}
    five = releases(StoreFacts(config_keys=new, props_records=9)).candidates
    assert [r.name for r in five] == ["5.0", "5.1.1", "5.1.2"]
    upgraded = new | {"lmqConsumerOffset.json:offsetTable"}  # a 4.9 file beside a 5.x one: refused, not guessed
    with pytest.raises(ConfigError, match="contradict"):
        releases(StoreFacts(config_keys=upgraded))


def test_a_clean_5_5_store_without_index_and_checkpoint_is_5_5() -> None:
    without = StoreFacts(props_records=4, props_ending_02=4)  # properties end with 0x02: before 4.9.1, or 5.2 on
    assert [r.name for r in releases(without).candidates] == ["4.0", "4.7.1", "5.2", "5.3.1", "5.3.2", "5.4", "5.5"]
    facts = dataclasses.replace(
        without,
        config_keys=frozenset(
            {f"lmqConsumerOffset.json:{k}" for k in ("offsetTable", "dataVersion", "pullOffsetTable")}
        ),
    )
    assert [r.name for r in releases(facts).candidates] == ["5.5"]


def test_repeated_property_names_are_before_5_4() -> None:
    """A plain batch's member with the batch's own properties appended (MessageExtEncoder up to 5.3.x)."""
    member = msg("TopicPayments", {"KEYS": "PAY-1-0", "WAIT": "true", "TAGS": "pay"})
    batch_props = format_properties({"CLUSTER": "OracleCluster", "WAIT": "true"})
    appended = dataclasses.replace(member, properties=member.properties + "\x02" + batch_props)
    crc = "__CRC32#\x010123456789\x02"  # a client's piece, and the one the encoder appends: not counted
    twice = dataclasses.replace(member, properties=member.properties + "\x02" + crc + crc)
    counts = record_clues(batch_of([member, appended, msg("TopicLogs", {}), twice]), {})
    assert counts["repeated_name_records"] == 1
    assert releases(StoreFacts(repeated_name_records=1)).high == (5, 4, 0)
    assert releases(StoreFacts()).high is None


# --- the real broker's stores ------------------------------------------------------------------------------


def _stores() -> list:
    """Every harness store; releases outside CORE_VERSIONS marked ``matrix`` (make test-matrix)."""
    out = [(v, variant, 7) for variant, (_, versions) in VARIANTS.items() for v in VERSIONS if v in versions]
    out += [(v, "default", s) for v in VERSIONS for s in SEEDS if s != 7]
    return [pytest.param(*x, marks=[] if x[0] in CORE_VERSIONS else [pytest.mark.matrix]) for x in out]


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _facts(root: Path, conf: Path) -> StoreFacts:
    cfg = load_broker_config(conf)
    segments, _ = list_segments(str(root), cfg)  # commitlog/ or DLedger data files
    fs = pafs.LocalFileSystem()
    return store_facts(fs, str(root), segments, LiveIndex(fs, str(root), cfg))


@pytest.mark.broker
@pytest.mark.parametrize(("version", "variant", "seed"), _stores())
def test_real_stores_after_a_disaster(version: str, variant: str, seed: int, tmp_path: Path) -> None:
    """index/, consumequeue/, batchconsumequeue/ and checkpoint deleted from a (hard-linked) copy: the range the
    clues give holds the release that wrote the store, and is narrower than what the commitlog gave before the
    clues of this file (the properties' 0x02 end, V2 magic, __CRC32#)."""
    if java_available():
        pytest.skip(f"real RocketMQ broker stores need java, javac and mvn ({java_available()})")
    store = build_store(version, variant, seed)
    lost = tmp_path / "store"
    shutil.copytree(store.root, lost, ignore=shutil.ignore_patterns(*LOST), copy_function=_link_or_copy)
    facts = _facts(lost, store.broker_conf)
    assert not ({*LOST} & facts.root_entries)
    if variant in UPGRADED_FROM:  # files of each release, none telling which records it wrote: refused, or right
        try:
            found = releases(facts)
        except ConfigError as e:
            assert "--broker-version X.Y.Z" in str(e)
            return
    found = releases(facts)
    v = parse_version(version)
    assert found.low <= v and (found.high is None or v < found.high), found.text
    none: frozenset[str] = frozenset()
    old = dataclasses.replace(facts, root_entries=none, config_entries=none, config_keys=none, repeated_name_records=0)
    before = releases(old)  # what the clues known before these gave
    assert before.low <= found.low and (before.high or (6,)) >= (found.high or (6,))
    assert (found.low, found.high) != (before.low, before.high), f"no narrower than {before.text}"
    names = [r.name for r in found.candidates]
    print(f"{version} {variant} seed {seed}: {found.text} (rule sets {names}); before: {before.text}")


def _tear(root: Path, how: str) -> int:
    """The store's last record torn as a power loss tears it: its last 4 bytes or its second half zeroed (the file's
    preallocated zeros), or the file cut inside it. Its commitlog offset."""
    *_, last = walk_commitlog(root / "commitlog")
    seg = sorted((root / "commitlog").iterdir())[-1]
    data = bytearray(seg.read_bytes())
    at, size = last.offset, last.total_size
    rel = at - int(seg.name)
    if how == "cut":
        del data[rel + size // 2 :]
    else:
        keep = size - 4 if how == "zero-4" else size // 2
        data[rel + keep : rel + size] = bytes(size - keep)
    seg.unlink()  # a hard link to the cached store: never written through
    seg.write_bytes(bytes(data))
    return at


@pytest.mark.broker
@pytest.mark.parametrize("how", ["zero-4", "zero-half", "cut"])
def test_a_torn_tail_never_changes_the_release_found(broker_store, how: str, tmp_path: Path) -> None:
    """The 5.5.0 store with enabledAppendPropCRC, its last record torn: the one broken property string at its end
    (its last bytes zeros, no 0x02) is no clue and starts no stretch; the rules stay 5.5's."""
    store = broker_store("5.5.0", "crc")
    root = tmp_path / "store"
    shutil.copytree(store.root, root, copy_function=_link_or_copy)
    _tear(root, how)
    cfg = load_broker_config(store.broker_conf)
    segments, _ = list_segments(str(root), cfg)
    _, rules = resolve_rules(str(root), cfg, segments)
    assert (rules.rules.name, rules.earlier, rules.releases.low if rules.releases else None) == ("5.5", (), (5, 5, 0))


@pytest.mark.broker
def test_a_torn_tail_of_the_crc_store_is_audited_naming_the_torn_record(broker_store, tmp_path: Path) -> None:
    """Audited (exit 1, not 2: the release is found) and the torn record named by its file and offset."""
    store = broker_store("5.5.0", "crc")
    root = tmp_path / "store"
    shutil.copytree(store.root, root, copy_function=_link_or_copy)
    at = _tear(root, "zero-4")
    report = tmp_path / "report"
    argv = ["audit", "--store", str(root), "--broker-config", str(store.broker_conf), "--report", str(report)]
    assert rmqstore_main(argv) == 1
    findings = json.loads((report / "report.json").read_text())["findings"]
    assert [(f["file"], f["commitlog_offset"]) for f in findings if f["severity"] != "info"] == [
        (f"commitlog/{at // (64 << 10) * (64 << 10):020d}", at)
    ]


def test_fewer_than_three_broker_written_strings_tell_no_release() -> None:
    """One or two property strings are no sample: they give no clue; three do."""
    assert releases(StoreFacts(props_records=2)).text == "any release"
    assert releases(StoreFacts(props_records=2, props_ending_02=2)).text == "any release"
    assert releases(StoreFacts(props_records=3)).text == "4.9.1 up to 5.2.0"


def test_a_property_string_ending_in_zeros_is_not_the_brokers() -> None:
    """A delivered copy (REAL_TOPIC) whose string's last bytes are zeros (a torn tail) is not counted; whole ones
    are, ending with 0x02 or not."""
    whole = msg("T", {}, body=b"x")
    ends_02 = format_properties({"REAL_TOPIC": "T", "KEYS": "k"}) + "\x02"
    torn = format_properties({"REAL_TOPIC": "T", "KEYS": "k"})[:-2] + "\0\0"
    records = [dataclasses.replace(whole, properties=p) for p in (ends_02, ends_02.rstrip("\x02"), torn)]
    counts = record_clues(batch_of(records), {})
    assert (counts["props_records"], counts["props_ending_02"]) == (2, 1)
