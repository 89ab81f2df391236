"""storelib.synthetic.generator and ``rmqstore generate``: a small generated store, scanned back record by record."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import struct
import zlib
from collections import defaultdict
from pathlib import Path

import pytest

from jobs import cli
from jobs import generate as generate_job
from storelib.broker.config import BrokerConfig, load_broker_config
from storelib.constants import (
    FLAG_BORNHOST_V6,
    FLAG_STOREHOST_V6,
    MESSAGE_MAGIC_CODE_V2,
    SCHEDULE_TOPIC,
    TRANS_HALF_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from storelib.errors import RmqStoreError
from storelib.formats.checkpoint import Checkpoint
from storelib.formats.commitlog import Message, decode_message
from storelib.formats.scanner import END_BLANK, END_ZERO_TAIL, SegmentScanner
from storelib.synthetic.generator import LONG_TOPIC, generate_store, java_properties_string
from storelib.synthetic.spec import PRESETS, GeneratorSpec
from tests.builders import SMALL_CFG, SMALL_SPEC
from tests.reference import MAGIC_V1, MAGIC_V2, assert_index_equals_reference, store_files, walk_commitlog
from tests.storecopy import tree_digest


@dataclasses.dataclass
class Segment:
    name: str
    start: int
    data: bytes
    scanner: SegmentScanner
    records: list[Message]  # decoded, in commitlog order
    offsets: list[int]
    batches: list


def scan_store(root: Path, cfg: BrokerConfig) -> list[Segment]:
    out = []
    for path in sorted((root / "commitlog").iterdir()):
        data = path.read_bytes()
        with open(path, "rb") as f:
            scanner = SegmentScanner(f, path.name, int(path.name), cfg.mappedFileSizeCommitLog)
            batches = list(scanner)
        offsets = [int(o) for b in batches for o in b.physical_offset]
        records = [decode_message(data, o - int(path.name)) for o in offsets]
        out.append(Segment(path.name, int(path.name), data, scanner, records, offsets, batches))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, object, list[Segment]]:
    root = tmp_path_factory.mktemp("gen") / "store"
    summary = generate_store(root, SMALL_SPEC, SMALL_CFG)
    return root, summary, scan_store(root, SMALL_CFG)


@pytest.fixture(scope="module")
def expired(tmp_path_factory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("gen") / "expired"
    return root, generate_store(root, dataclasses.replace(SMALL_SPEC, deleted_head_segments=3), SMALL_CFG)


def all_records(segments: list[Segment]) -> list[tuple[int, Message]]:
    return [(o, m) for s in segments for o, m in zip(s.offsets, s.records)]


# --- CommitLog -----------------------------------------------------------------------------


def test_segments_are_full_size_blank_rolled_and_undamaged(store):
    _, summary, segments = store
    size = SMALL_CFG.mappedFileSizeCommitLog
    assert len(segments) == summary.segments > 5
    assert [s.start for s in segments] == [i * size for i in range(len(segments))]
    assert all(len(s.data) == size and not s.scanner.damage for s in segments)
    assert [s.scanner.end.reason for s in segments] == [END_BLANK] * (len(segments) - 1) + [END_ZERO_TAIL]
    assert summary.blanks == len(segments) - 1
    assert sum(len(s.records) for s in segments) == summary.messages == SMALL_SPEC.messages
    last = segments[-1]
    assert last.data[last.scanner.end.offset - last.start :] == bytes(size - (last.scanner.end.offset - last.start))
    assert summary.bytes == last.scanner.end.offset


def test_blank_only_when_the_next_record_plus_8_bytes_does_not_fit(store):
    _, _, segments = store
    for seg, nxt in itertools.pairwise(segments):
        blank = seg.start + len(seg.data) - seg.scanner.end.offset
        first_next = int(nxt.batches[0].total_size[0])
        assert 8 <= blank < first_next + 8, seg.name


def test_records_are_what_the_spec_decodes_at_their_offsets(store):
    """The scanner's records (every other test's view) against a decoder written from the spec's table."""
    root, _, segments = store
    reference = list(walk_commitlog(root / "commitlog"))
    assert [r.offset for r in reference] == [o for o, _ in all_records(segments)]
    for r, (_, m) in zip(reference, all_records(segments)):
        assert (r.physical_offset, r.total_size) == (r.offset, r.length_of_fields), r.offset
        assert r.body_crc == zlib.crc32(r.body) & 0x7FFFFFFF
        assert r.magic == (MAGIC_V2 if len(r.topic.encode()) > 127 else MAGIC_V1), r.offset
        seen = (m.topic, m.queue_id, m.queue_offset, m.sys_flag, m.store_timestamp, m.body, m.property_map())
        assert seen == (r.topic, r.queue_id, r.queue_offset, r.sys_flag, r.store_timestamp, r.body, r.properties)


def test_queue_offsets_dense_per_queue_and_zero_for_prepared_and_rollback(store):
    _, _, segments = store
    next_offset: dict[tuple[str, int], int] = defaultdict(int)
    for _, m in all_records(segments):
        tran = m.sys_flag & TRANSACTION_MASK
        if tran in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
            assert m.queue_offset == 0
        else:
            key = (m.topic, m.queue_id)
            assert m.queue_offset == next_offset[key], key
            next_offset[key] += 1


def test_store_timestamps_do_not_decrease_and_born_is_not_after_store(store):
    _, _, segments = store
    stamps = [m.store_timestamp for _, m in all_records(segments)]
    assert stamps == sorted(stamps) and stamps[0] >= SMALL_SPEC.start_timestamp
    assert all(m.born_timestamp <= m.store_timestamp for _, m in all_records(segments))


def test_every_feature_is_present(store):
    _, summary, segments = store
    records = [m for _, m in all_records(segments)]
    by_offset = {o: m for o, m in all_records(segments)}
    props = [m.property_map() for m in records]
    flags = [m.sys_flag for m in records]
    assert {f & TRANSACTION_MASK for f in flags} == {0, 4, 8, 12}
    assert any(f & FLAG_BORNHOST_V6 for f in flags) and any(f & FLAG_STOREHOST_V6 for f in flags)
    assert {"send", "delay", "delivered", "half", "commit", "op", "prepared", "legacy-commit", "rollback", "v2"} == set(
        summary.kinds
    )
    # v2 records for the long topic only
    v2 = [m for m in records if m.v2]
    assert v2 and {m.topic for m in v2} == {LONG_TOPIC} and len(LONG_TOPIC.encode()) > 127
    magic = [
        int.from_bytes(s.data[o - s.start + 4 : o - s.start + 8], "big", signed=True)
        for s in segments
        for o in s.offsets
    ]
    assert magic.count(MESSAGE_MAGIC_CODE_V2) == len(v2)
    # delay messages: SCHEDULE_TOPIC_XXXX, queueId = level - 1; delivered copies keep DELAY/REAL_TOPIC/REAL_QID
    delays = [(m, p) for m, p in zip(records, props) if m.topic == SCHEDULE_TOPIC]
    assert delays and all(m.queue_id == int(p["DELAY"]) - 1 and p["WAIT"] == "true" for m, p in delays)
    delivered = [(m, p) for m, p in zip(records, props) if m.topic != SCHEDULE_TOPIC and "DELAY" in p]
    assert delivered and all(m.topic == p["REAL_TOPIC"] and m.queue_id == int(p["REAL_QID"]) for m, p in delivered)
    # half messages: NOT_TYPE in RMQ_SYS_TRANS_HALF_TOPIC/0; commits point at them and keep their UNIQ_KEY
    halves = [m for m in records if m.topic == TRANS_HALF_TOPIC]
    assert halves and all(m.queue_id == 0 and m.sys_flag & TRANSACTION_MASK == TRANSACTION_NOT_TYPE for m in halves)
    commits = [m for m in records if m.sys_flag & TRANSACTION_MASK == TRANSACTION_COMMIT_TYPE]
    for c in commits:
        origin = by_offset[c.prepared_transaction_offset]
        assert origin.topic == TRANS_HALF_TOPIC or origin.sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED_TYPE
        assert c.property_map().get("UNIQ_KEY") == origin.property_map().get("UNIQ_KEY")
        assert c.body == origin.body
    # properties: 4.9.8 form, UNIQ_KEY of 32 hex characters, odd KEYS, multi-byte tags and keys, an emoji tag
    assert all(not m.properties.endswith("\x02") for m in records)
    uniq = [p["UNIQ_KEY"] for p in props if "UNIQ_KEY" in p]
    assert uniq and all(len(u) == 32 and int(u, 16) >= 0 for u in uniq)
    keys = [p["KEYS"] for p in props if "KEYS" in p]
    assert any("  " in k for k in keys) and any(k.endswith(" ") for k in keys) and any(" " in k.strip() for k in keys)
    assert any(not k.isascii() for k in keys)
    tags = {p["TAGS"] for p in props if "TAGS" in p}
    assert "📦ship" in tags and any(not t.isascii() and t != "📦ship" for t in tags)


def test_properties_are_in_java_hashmap_order_like_the_4_9_8_broker():
    """Orders seen in the RocketMQ 4.9.8 sample store (fixture README: properties)."""
    half = [("REAL_TOPIC", "B"), ("REAL_QID", "2"), ("TRAN_MSG", "true"), ("KEYS", "k"), ("UNIQ_KEY", "U")]
    half += [("CLUSTER", "C"), ("PGROUP", "G"), ("WAIT", "true"), ("TAGS", "t")]
    assert java_properties_string(half) == (
        "REAL_TOPIC\x01B\x02KEYS\x01k\x02TRAN_MSG\x01true\x02UNIQ_KEY\x01U\x02CLUSTER\x01C\x02PGROUP\x01G"
        "\x02WAIT\x01true\x02TAGS\x01t\x02REAL_QID\x012"
    )
    # client order: TAGS, KEYS (Message constructor), UNIQ_KEY (send), CLUSTER (broker), then user properties
    send = [("TAGS", "t"), ("KEYS", "k"), ("UNIQ_KEY", "U"), ("CLUSTER", "C"), ("tenant", "x")]
    assert java_properties_string(send) == "KEYS\x01k\x02UNIQ_KEY\x01U\x02CLUSTER\x01C\x02TAGS\x01t\x02tenant\x01x"
    # UNIQ_KEY and CLUSTER share a bucket of 16: insertion order decides between them
    assert java_properties_string([("CLUSTER", "C"), ("UNIQ_KEY", "U")]) == "CLUSTER\x01C\x02UNIQ_KEY\x01U"
    assert java_properties_string([("TAGS", "d"), ("WAIT", "true")]) == "WAIT\x01true\x02TAGS\x01d"


# --- ConsumeQueue, IndexFile, checkpoint -----------------------------------------------------------


def test_consumequeue_and_index_files_equal_an_independent_rebuild(store):
    root, summary, _ = store
    assert_index_equals_reference(root, root, SMALL_CFG)
    generated_index = store_files(root, "index")
    assert len(generated_index) == summary.index_files > 5
    assert len(store_files(root, "consumequeue")) == summary.cq_files > summary.queues
    assert all(len(name.rsplit("/", 1)[1]) == 17 for name in generated_index)


def test_checkpoint_is_last_record_last_dispatched_record_and_last_index_end(store):
    root, _, segments = store
    cp = Checkpoint.unpack((root / "checkpoint").read_bytes())
    records = [m for _, m in all_records(segments)]
    dispatched = [
        m for m in records if m.sys_flag & TRANSACTION_MASK in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
    ]
    last_index = sorted((root / "index").iterdir())[-1].read_bytes()
    assert cp.physic_msg_timestamp == records[-1].store_timestamp
    assert cp.logics_msg_timestamp == dispatched[-1].store_timestamp
    assert cp.index_msg_timestamp == int.from_bytes(last_index[8:16], "big")
    assert not (root / "abort").exists() and not (root / "lock").exists()


def test_deleted_head_segments_leave_pre_blank_queues_like_a_broker_rebuild(expired, store):
    root, summary = expired
    size = SMALL_CFG.mappedFileSizeCommitLog
    assert summary.deleted_segments == 3
    assert sorted(p.name for p in (root / "commitlog").iterdir())[0] == f"{3 * size:020d}"
    # the same records as the full store from segment 3 on
    _, full_summary, full_segments = store
    assert summary.segments == full_summary.segments - 3
    assert [s.data for s in scan_store(root, SMALL_CFG)] == [s.data for s in full_segments[3:]]
    assert_index_equals_reference(root, root, SMALL_CFG)
    blank_unit = struct.pack(">qiq", 0, 0x7FFFFFFF, 0)
    cq = store_files(root, "consumequeue").values()
    assert sum(data[i : i + 20] == blank_unit for data in cq for i in range(0, len(data), 20)) > 0


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    spec = dataclasses.replace(SMALL_SPEC, messages=400)
    a = generate_store(tmp_path / "a", spec, SMALL_CFG)
    generate_store(tmp_path / "b", spec, SMALL_CFG)
    generate_store(tmp_path / "c", dataclasses.replace(spec, seed=8), SMALL_CFG)
    assert tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b")
    assert tree_digest(tmp_path / "a") != tree_digest(tmp_path / "c")
    assert a.messages == 400


def test_target_size_stops_before_the_limit(tmp_path):
    spec = dataclasses.replace(SMALL_SPEC, messages=None, target_bytes=200_000)
    s = generate_store(tmp_path / "s", spec, SMALL_CFG)
    assert 200_000 - 2000 < s.bytes <= 200_000


def test_refuses_an_existing_store_and_impossible_settings_and_keeps_the_last_segment(tmp_path, store):
    root, _, _ = store
    with pytest.raises(FileExistsError):
        generate_store(root, SMALL_SPEC, SMALL_CFG)
    one = generate_store(
        tmp_path / "x", dataclasses.replace(SMALL_SPEC, messages=50, deleted_head_segments=2), SMALL_CFG
    )
    assert (one.segments, one.deleted_segments, one.index_files) == (1, 0, 1)  # the last segment is always kept
    assert_index_equals_reference(tmp_path / "x", tmp_path / "x", SMALL_CFG)
    assert len(store_files(tmp_path / "x", "consumequeue")) == one.cq_files > 0
    with pytest.raises(ValueError, match="does not fit"):
        big = dataclasses.replace(SMALL_SPEC, body_size=(70_000, 70_000))
        generate_store(tmp_path / "y", big, SMALL_CFG)
    with pytest.raises(ValueError):
        GeneratorSpec(delay_fraction=0.7, transaction_fraction=0.5)
    with pytest.raises(ValueError):
        GeneratorSpec(messages=None, target_bytes=None)


# --- the verb ---------------------------------------------------------------------------------


def run_verb(*argv: str) -> int:
    """``rmqstore generate ARGV``'s exit code, an error said and mapped as the CLI does (jobs.cli.failed; not
    cli.main, which stops the test session's Spark)."""
    p = argparse.ArgumentParser()
    generate_job.add_arguments(p)
    try:
        return generate_job.run(p.parse_args(argv))
    except (RmqStoreError, OSError) as exc:
        return cli.failed("generate", list(argv), exc)


def test_parse_size_and_body_size():
    assert generate_job.parse_size("2GiB") == 2 << 30
    assert generate_job.parse_size("512 MiB") == 512 << 20
    assert generate_job.parse_size("1.5GB") == 1_500_000_000
    assert generate_job.parse_size("1000") == 1000
    assert generate_job.parse_body_size("128") == (128, 128)
    assert generate_job.parse_body_size("64-512") == (64, 512)
    for bad in ("2 parsecs", "", "1e9"):
        with pytest.raises(argparse.ArgumentTypeError):
            generate_job.parse_size(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        generate_job.parse_body_size("512-64")


def test_verb_writes_a_store_and_its_broker_config_and_refuses_a_non_empty_dir(tmp_path, capsys):
    out, conf = tmp_path / "out", tmp_path / "broker.conf"
    args = ["--out", str(out), "--messages", "300", "--deleted-head-segments", "0", "--body-size", "64-128"]
    assert run_verb(*args, "--write-broker-config", str(conf), "--seed", "3", "--topics", "2", "--queues", "3") == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(f"generated {out}: 300 messages") and "MB/s" in line
    cfg = load_broker_config(conf)
    assert cfg.mappedFileSizeCommitLog == int(PRESETS["demo"].broker["mappedFileSizeCommitLog"])
    assert cfg.maxIndexNum == 4000 and cfg.cq_file_size == 6000
    topics = {p.name for p in (out / "consumequeue").iterdir()}
    assert {"OrderCreated", "Billing_v1"} <= topics and "Audit-Log" not in topics
    before = tree_digest(out)
    assert run_verb(*args) == 1  # not empty
    assert tree_digest(out) == before
    (out / "notes.txt").write_text("kept")
    assert run_verb(*args, "--force", "--seed", "4") == 0
    assert tree_digest(out) != before and (out / "notes.txt").read_text() == "kept"


def test_verb_uses_the_broker_config_file(tmp_path, capsys):
    conf = tmp_path / "b.conf"
    conf.write_text(
        "mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=1000\nmaxIndexNum=100\nmaxHashSlotNum=7\n"
    )
    out = tmp_path / "o"
    assert run_verb("--out", str(out), "--broker-config", str(conf), "--size", "300KiB", "--transactions", "0") == 0
    segments = sorted((out / "commitlog").iterdir())
    assert len(segments) == 4 and all(p.stat().st_size == 65536 for p in segments)  # 5 written, 1 deleted (demo)
    assert all(p.stat().st_size == 1000 for p in (out / "consumequeue").rglob("0000*"))
    assert "generated" in capsys.readouterr().out


def test_verb_keeps_the_last_segment_and_says_so(tmp_path, capsys):
    assert run_verb("--out", str(tmp_path / "o"), "--messages", "50") == 0  # demo preset: 1 head segment deleted
    captured = capsys.readouterr()
    assert "note: only 0 of 1 head segments deleted" in captured.err
    assert "1 segments (0 deleted)" in captured.out
    assert run_verb("--out", str(tmp_path / "p"), "--messages", "10", "--topics", "0") == 2
    assert "topics, queues per topic and max keys must be at least 1" in capsys.readouterr().err
