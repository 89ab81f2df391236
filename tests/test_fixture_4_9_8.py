"""Byte equality with a store the real RocketMQ 4.9.8 broker wrote: storelib, and the tests' reference.

clean/ and expired/: every ConsumeQueue file and IndexFile is rebuilt from the commitlog
(scanner -> dispatch_batch -> QueueFiles / IndexFileSeries) and compared with the broker's files;
the scanner's records are compared with the broker's own dump of them. crashed/: the scanner
finds exactly the damage crashed/DAMAGE.md describes. tests.reference, the plain-Python oracle other
tests judge storelib with, is held to the same files here.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from storelib.broker.config import BrokerConfig
from storelib.broker.dispatch import dispatch_batch
from storelib.formats.commitlog import decode_message, encode_message
from storelib.formats.consumequeue import QueueFiles
from storelib.formats.indexfile import IndexFileReader, IndexFileSeries, IndexHeader, query_offsets
from storelib.formats.scanner import DAMAGE_CRC, END_BLANK, END_ZERO_TAIL, SegmentEnd, SegmentScanner
from tests import reference

BLANK_MAGIC = -875286124
EXPECTED = {"clean": "expected", "expired": "expected/expired"}
CHUNK_SIZE = 16 << 10  # several batches per 128 KiB segment: QueueFiles and IndexFileSeries get many adds
#: fields of expected/commitlog_records.jsonl.gz the scanner does not report (decode_message checks them)
NOT_SCANNED = ("bornHost", "storeHost", "propertiesLen")


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@functools.cache
def expected_records(fixture_dir: Path, store: str) -> list[dict]:
    """The broker's dump of every record (read once; callers must not modify it)."""
    return read_jsonl(fixture_dir / EXPECTED[store] / "commitlog_records.jsonl.gz")


@dataclasses.dataclass
class Rebuilt:
    records: list[dict]  # MSG and BLANK lines, as in expected/commitlog_records.jsonl.gz
    crc_ok: dict[int, bool]  # commitlog offset -> BODYCRC matched
    ends: dict[str, SegmentEnd]  # segment file -> where its records end
    damage: list[tuple[str, str, int]]
    consume_queue: dict[str, bytes]  # store-relative path -> file
    index: list[bytes]  # in build order


def record_lines(batch, d) -> list[dict]:
    """One expected-dump line per record of a batch."""
    out = []
    topics, props, tags, keys, uniq_keys = batch.topic, batch.properties, d.tags, d.keys, d.uniq_key
    for i in range(len(batch)):
        p = props[i]
        sys_flag = int(batch.sys_flag[i])
        out.append(
            {
                "type": "MSG",
                "offset": int(batch.physical_offset[i]),
                "size": int(batch.total_size[i]),
                "topic": topics[i],
                "queueId": int(batch.queue_id[i]),
                "queueOffset": int(batch.queue_offset[i]),
                "sysFlag": sys_flag,
                "tranType": sys_flag & 0xC,
                "dispatchedToCQ": bool(d.to_consume_queue[i]),
                "tagsCode": int(d.tags_code[i]),
                "storeTimestamp": int(batch.store_timestamp[i]),
                "bornTimestamp": int(batch.born_timestamp[i]),
                "bodyLen": int(batch.body_length[i]),
                "bodyCRC": int(batch.body_crc[i]),
                "flag": int(batch.flag[i]),
                "reconsumeTimes": int(batch.reconsume_times[i]),
                "preparedTransactionOffset": int(batch.prepared_transaction_offset[i]),
                "tags": tags[i],
                "keys": keys[i],
                "uniqKey": uniq_keys[i],
                "delayLevel": p.get("DELAY"),
                "realTopic": p.get("REAL_TOPIC"),
            }
        )
    return out


def rebuild_store(root: Path, cfg: BrokerConfig) -> Rebuilt:
    """Everything storelib derives from ``root/commitlog``, segment by segment, batch by batch."""
    records, crc_ok, ends, damage = [], {}, {}, []
    queues: dict[tuple[str, int], QueueFiles] = {}
    consume_queue: dict[str, bytes] = {}
    series = IndexFileSeries(cfg)
    index = []

    def keep(topic: str, queue_id: int, files) -> None:
        for name, data in files:
            consume_queue[f"consumequeue/{topic}/{queue_id}/{name}"] = data

    for path in sorted((root / "commitlog").iterdir()):
        file = f"commitlog/{path.name}"
        with path.open("rb") as f:
            size = path.stat().st_size
            scanner = SegmentScanner(f, file, int(path.name), size, cfg.checkCRCOnRecover, CHUNK_SIZE)
            for batch in scanner:
                d = dispatch_batch(batch, cfg)
                records += record_lines(batch, d)
                crc_ok.update(zip(batch.physical_offset.tolist(), batch.crc_ok.tolist()))
                by_queue = collections.defaultdict(list)
                topics = batch.topic
                for i in np.flatnonzero(d.to_consume_queue).tolist():
                    by_queue[topics[i], int(batch.queue_id[i])].append(i)
                for (topic, queue_id), rows in by_queue.items():
                    q = queues.setdefault((topic, queue_id), QueueFiles(cfg.cq_file_size))
                    r = np.array(rows)
                    args = (batch.queue_offset[r], batch.physical_offset[r], batch.total_size[r], d.tags_code[r])
                    keep(topic, queue_id, q.add(*args))
                r = d.index_record
                last = int(batch.physical_offset[-1])
                index += series.add(d.index_key_hash, batch.physical_offset[r], batch.store_timestamp[r], last)
        end = ends[file] = scanner.end
        damage += [(x.file, x.kind, x.offset) for x in scanner.damage]
        if end.reason == END_BLANK:
            size = int(path.name) + path.stat().st_size - end.offset
            records.append({"type": "BLANK", "offset": end.offset, "size": size, "magic": BLANK_MAGIC})
    for (topic, queue_id), q in queues.items():
        keep(topic, queue_id, q.finish())
        assert q.findings == []
    index += series.finish()
    return Rebuilt(records, crc_ok, ends, damage, consume_queue, [data for _, data in index])


@pytest.fixture(scope="module", params=["clean", "expired"])
def store(request, fixture_dir: Path, fixture_cfg: BrokerConfig) -> tuple[str, Path, Rebuilt]:
    name = request.param
    return name, fixture_dir / name, rebuild_store(fixture_dir / name, fixture_cfg)


@pytest.fixture(scope="module")
def crashed(fixture_dir: Path, fixture_cfg: BrokerConfig) -> Rebuilt:
    return rebuild_store(fixture_dir / "crashed", fixture_cfg)


def assert_same_lines(got: list[dict], expected: list[dict]) -> None:
    assert len(got) == len(expected)
    bad = [(e, g) for e, g in zip(expected, got) if e != g]
    assert not bad, f"{len(bad)} records differ; first: expected {bad[0][0]}\n got {bad[0][1]}"


def without_unscanned(lines: list[dict]) -> list[dict]:
    return [{k: v for k, v in line.items() if k not in NOT_SCANNED} for line in lines]


# --- clean/ and expired/ -----------------------------------------------------------------------


def test_scanner_output_equals_the_broker_dump(store, fixture_dir: Path) -> None:
    name, _, rebuilt = store
    assert_same_lines(rebuilt.records, without_unscanned(expected_records(fixture_dir, name)))
    assert rebuilt.damage == []
    assert all(rebuilt.crc_ok.values())
    last = max(rebuilt.ends)
    assert (rebuilt.ends[last].reason, rebuilt.ends[last].offset) == (END_ZERO_TAIL, 3444995)  # maxPhyOffset
    assert {e.reason for f, e in rebuilt.ends.items() if f != last} == {END_BLANK}


def test_consume_queue_files_are_byte_identical(store) -> None:
    _, root, rebuilt = store
    live = {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "consumequeue").rglob("*")) if p.is_file()}
    assert sorted(rebuilt.consume_queue) == sorted(live)
    assert [path for path, data in rebuilt.consume_queue.items() if live[path] != data] == []


def test_index_files_are_byte_identical(store, fixture_dir: Path) -> None:
    name, root, rebuilt = store
    live = [p.read_bytes() for p in sorted((root / "index").iterdir())]
    assert len(rebuilt.index) == len(live)
    assert [i for i, (a, b) in enumerate(zip(rebuilt.index, live)) if a != b] == []
    headers = [IndexHeader.unpack(data) for data in rebuilt.index]
    expected = read_jsonl(fixture_dir / EXPECTED[name] / "index_files.jsonl")
    assert headers == [
        IndexHeader(
            h["beginTimestamp"],
            h["endTimestamp"],
            h["beginPhyOffset"],
            h["endPhyOffset"],
            h["hashSlotCount"],
            h["indexCount"],
        )
        for h in expected
    ]


def test_the_reference_dispatch_writes_the_broker_files(store, fixture_dir: Path, fixture_cfg: BrokerConfig) -> None:
    """tests.reference, the oracle of test_generate and test_rebuild, against the real broker: its walk and
    tagsCode equal the broker's dump, its ConsumeQueue files and IndexFiles the broker's bytes."""
    name, root, _ = store
    dump = [r for r in expected_records(fixture_dir, name) if r["type"] == "MSG"]
    delays = reference.delay_table_ms(fixture_cfg.messageDelayLevel)
    walked = [
        (r.offset, r.total_size, r.topic, r.queue_offset, reference.tags_code(r, delays))
        for r in reference.walk_commitlog(root / "commitlog")
    ]
    assert walked == [(r["offset"], r["size"], r["topic"], r["queueOffset"], r["tagsCode"]) for r in dump]
    reference.assert_index_equals_reference(root, root, fixture_cfg)


def test_dump_summary(store, fixture_dir: Path) -> None:
    name, _, rebuilt = store
    summary = json.loads((fixture_dir / EXPECTED[name] / "dump_summary.json").read_text())
    messages = [r for r in rebuilt.records if r["type"] == "MSG"]
    assert len(messages) == summary["messages"]
    assert len(rebuilt.records) - len(messages) == summary["blankRecords"]
    assert sum(r["dispatchedToCQ"] for r in messages) == summary["cqEntries"]
    assert len(rebuilt.index) == summary["indexFiles"]
    assert collections.Counter(r["topic"] for r in messages) == summary["messagesByTopic"]


def test_decode_and_encode_every_real_record(store, fixture_dir: Path) -> None:
    """decode_message reads every record as the broker does, and encode_message rewrites it byte for byte."""
    name, root, _ = store
    segments = {int(p.name): p.read_bytes() for p in (root / "commitlog").iterdir()}
    expected = [r for r in expected_records(fixture_dir, name) if r["type"] == "MSG"]
    bad = []
    for r in expected:
        start = r["offset"] // 131072 * 131072
        data = segments[start]
        pos = r["offset"] - start
        m = decode_message(data, pos)
        got = (
            m.born_host,
            m.store_host,
            len(m.properties.encode()),
            m.topic,
            len(m.body),
            m.body_crc,
            m.physical_offset,
        )
        want = (r["bornHost"], r["storeHost"], r["propertiesLen"], r["topic"], r["bodyLen"], r["bodyCRC"], r["offset"])
        if got != want or encode_message(m) != data[pos : pos + r["size"]]:
            bad.append((r["offset"], got, want))
    assert bad == []


def index_readers(root: Path, cfg: BrokerConfig, drop_last: int = 0) -> list[IndexFileReader]:
    paths = sorted((root / "index").iterdir())
    return [IndexFileReader(p.read_bytes(), cfg, str(p)) for p in paths[: len(paths) - drop_last]]


def test_index_queries(store, fixture_dir: Path, fixture_cfg: BrokerConfig) -> None:
    """IndexService.queryOffset order and the 64 cap, as the broker answered the 46 sample queries."""
    name, root, rebuilt = store
    files = index_readers(root, fixture_cfg)
    rebuilt_files = [IndexFileReader(data, fixture_cfg) for data in rebuilt.index]
    queries = read_jsonl(fixture_dir / EXPECTED[name] / "index_queries.jsonl")
    assert len(queries) == 46
    for q in queries:
        args = (q["indexKey"], q["maxNum"], q["begin"], q["end"])
        got = query_offsets(files, *args)
        assert got == q["rawQueryOffsetOrder"], q["indexKey"]
        assert query_offsets(rebuilt_files, *args) == got
        assert sorted(got) == q["queryMessageOffsets"]  # clean stores: every offset is a live message


@pytest.mark.parametrize(("topic", "key"), [("OrderCreated", "vip-ALL"), ("Metrics", "host-7")])
def test_query_cap(store, fixture_dir, fixture_cfg, topic: str, key: str) -> None:
    """maxNum caps the newest-first walk; a larger maxNum finds every message carrying the key."""
    name, root, _ = store
    carrying = [
        r["offset"]
        for r in expected_records(fixture_dir, name)
        if r.get("topic") == topic and key in (r.get("keys") or "").split(" ")
    ]
    if name == "clean":
        assert len(carrying) > 64  # 86 and 106 messages
    newest_first = sorted(carrying, reverse=True)
    files = index_readers(root, fixture_cfg)
    assert query_offsets(files, f"{topic}#{key}", 64, 0, 2**63 - 1) == newest_first[:64]
    assert query_offsets(files, f"{topic}#{key}", 10_000, 0, 2**63 - 1) == newest_first


# --- crashed/ ----------------------------------------------------------------------------------------


def test_crashed_scan_reports_exactly_the_damage(crashed: Rebuilt, fixture_dir: Path) -> None:
    assert crashed.damage == [
        ("commitlog/00000000000001835008", DAMAGE_CRC, 1965519),
        ("commitlog/00000000000001835008", DAMAGE_CRC, 1965763),
    ]
    assert [o for o, ok in crashed.crc_ok.items() if not ok] == [1965519, 1965763]
    zero = crashed.ends["commitlog/00000000000003538944"]
    assert (zero.reason, zero.offset) == (END_ZERO_TAIL, 3538944)
    last_real = crashed.ends["commitlog/00000000000003407872"]
    assert (last_real.reason, last_real.offset) == (END_ZERO_TAIL, 3444995)
    damaged = crashed.ends["commitlog/00000000000001835008"]
    assert (damaged.reason, damaged.offset) == (END_BLANK, 1966027)  # the 53-byte BLANK after them
    # the scan goes on past the bad bodies: every record of clean/ is there, fields unchanged
    assert_same_lines(crashed.records, without_unscanned(expected_records(fixture_dir, "clean")))


def test_crashed_recovery_queries(fixture_dir: Path, fixture_cfg: BrokerConfig) -> None:
    """crashed/ after the broker's recovery: its last IndexFile deleted, the one with indexCount 2900 kept."""
    files = index_readers(fixture_dir / "crashed", fixture_cfg, drop_last=1)
    assert [f.header.index_count for f in files] == [3000] * 4 + [2900] + [3000] * 3
    queries = read_jsonl(fixture_dir / "expected" / "crashed-recovery" / "index_queries.jsonl")
    clean = {
        q["indexKey"]: q["rawQueryOffsetOrder"] for q in read_jsonl(fixture_dir / "expected" / "index_queries.jsonl")
    }
    changed = 0
    for q in queries:
        got = query_offsets(files, q["indexKey"], q["maxNum"], q["begin"], q["end"])
        assert got == q["rawQueryOffsetOrder"], q["indexKey"]
        changed += got != clean[q["indexKey"]]
    assert changed > 0
