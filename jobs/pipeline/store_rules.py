"""The store's rules, on the driver, before the parse: BatchCQ topics (config/topics.json, batchconsumequeue/, a
RocksDB's config/topics/), the store type, and the broker release's rule set (``--broker-version``, else detected
from the store's clues: storelib.broker.detection), which ``store_rules`` returns in a new Run (the config holding them
and the rules); detected rules are settled after the parse by what it counted (``settle_rules``).
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import sys
from collections.abc import Iterable
from typing import TypedDict

import numpy as np
import pyarrow.fs as pafs

from jobs.pipeline.context import Run
from storelib.broker.config import BrokerConfig, batch_cq_topics, with_store_mode
from storelib.broker.detection import (
    CONFIG_JSON,
    RecordClues,
    StoreFacts,
    Stretch,
    broker_encoded,
    config_keys,
    record_clues,
)
from storelib.broker.dispatch import TAG_KEY_INFIX, dispatch_batch
from storelib.broker.rule_choice import BrokerRules, RuleInputs, select_stretches
from storelib.broker.segments import Segment, SegmentSummary, by_stretch
from storelib.broker.versions import DEFAULT_RELEASE
from storelib.constants import PROPERTY_INNER_MULTI_QUEUE_OFFSET
from storelib.errors import ConfigError, StoreFormatError
from storelib.formats.indexfile import IndexFileReader, IndexHeader, IndexLayout, key_hash_of
from storelib.formats.rocksdbcq import ROCKSDB_CQ_DIRS, is_rocksdb
from storelib.formats.rocksdbcq import batch_cq_topics as rocksdb_batch_cq_topics
from storelib.formats.scanner import DLEDGER_FRAMING, SegmentScanner, find_properties
from storelib.layout import BATCH_CONSUMEQUEUE, CHECKPOINT, CONSUMEQUEUE, INDEX, is_index_name
from udfs.fs import join, map_file, read_file, resolve

#: the property an append gives LMQ records (whose source topics tell which releases can have written them)
LMQ_OFFSET_NAME = b"INNER_MULTI_QUEUE_OFFSET"
#: detection reads this much of each of at most SAMPLE_SEGMENTS segments, until it has this many tagged messages and
#: the source topic of a record with LMQ offsets
SAMPLE_BYTES = 4 << 20


SAMPLE_SEGMENTS = 8


TAG_KEY_SAMPLE = 32


def store_rules(run: Run, store: str, segments: list[Segment]) -> Run:
    """``run`` with the store's settings and rules (``resolve_rules``), resolved once per run and store (``run``
    itself when it has them: ``run.broker_rules``); detected rules are settled after the parse (``settle_rules``)."""
    if store in run.broker_rules:
        return run
    cfg, rules = resolve_rules(store, run.cfg, segments)
    if run.progress and rules.settled_all:
        print(rules.line, file=sys.stderr)
    return run.with_rules(store, rules, cfg)


def resolve_rules(store: str, cfg: BrokerConfig, segments: list[Segment]) -> tuple[BrokerConfig, BrokerRules]:
    """The store's BatchCQ topics, store type and broker rules, and the config that holds them.

    Store type: the config's ``storeType`` when it sets one (``default`` on a RocksDB store: rolled back to file
    ConsumeQueues, which the broker then rebuilds from the commitlog), else ``defaultRocksDB`` when a RocksDB is in
    consumequeue/ (or consumequeue_rocksdb/): every queue is then rebuilt as a ConsumeQueue, what that RocksDB
    holds (storelib.formats.rocksdbcq); a RocksDB beside a file topic config is the double-write store's
    (storelib.broker.config.with_store_mode), whose file ConsumeQueues are rebuilt. BatchCQ topics:
    ``queue.type=BatchCQ`` in config/topics.json, every ``batchconsumequeue/<topic>``, and under defaultRocksDB the
    RocksDB config/topics/ (RocksDBTopicConfigManager; a broker in file mode reads topics.json only: rolled back,
    ``rocksdbBatchCQTopics``). Rules: ``--broker-version`` when given, else what the store's clues say
    (storelib.broker.rule_choice.select).
    """
    fs, root = resolve(store)
    topics_json = join(root, "config", "topics.json")
    topics = set()
    if fs.get_file_info(topics_json).type == pafs.FileType.File:
        topics |= set(batch_cq_topics(read_file(fs, topics_json).decode("utf-8", "replace")))
    topics |= {i.base_name for i in _entries(fs, join(root, BATCH_CONSUMEQUEUE)) if i.type == pafs.FileType.Directory}
    topics_db = join(root, "config", "topics")
    rocksdb_config = fs.get_file_info(join(topics_db, "CURRENT")).type == pafs.FileType.File
    cfg, rocksdb = _store_mode(fs, root, cfg, rocksdb_config)
    store_type = cfg.storeType
    rocksdb_topics: tuple[str, ...] = ()
    if (rocksdb or store_type == "defaultRocksDB") and rocksdb_config:
        rocksdb_topics = rocksdb_batch_cq_topics(topics_db)
        topics |= set(rocksdb_topics) if store_type == "defaultRocksDB" else set()
    dledger = cfg.enableDLegerCommitLog or any(s.framing is DLEDGER_FRAMING for s in segments)
    cfg = dataclasses.replace(
        cfg,
        batchCQTopics=tuple(sorted(topics)),
        rocksdbBatchCQTopics=rocksdb_topics,
        storeType=store_type,
        enableDLegerCommitLog=dledger,
    )
    stretches = find_stretches(fs, segments)
    facts = store_facts(fs, root, segments, cfg, stretches[-1].start if len(stretches) > 1 else None)
    rules = select_stretches(cfg.brokerVersion, facts, stretches)
    first = rules.earlier[0][1] if rules.earlier else rules
    given = first.source == "--broker-version" and first.releases is None
    version = cfg.brokerVersion if given else first.lowest_release
    return dataclasses.replace(cfg, brokerVersion=version, releaseStretches=rules.stretches), rules


def _store_mode(fs: pafs.FileSystem, root: str, cfg: BrokerConfig, rocksdb_config: bool) -> tuple[BrokerConfig, bool]:
    """``cfg`` with the store's ConsumeQueue mode (storelib.broker.config.with_store_mode), and whether a RocksDB
    ConsumeQueue is in the store."""
    rocksdb = any(is_rocksdb({i.base_name for i in _entries(fs, join(root, d))}) for d in ROCKSDB_CQ_DIRS)
    file_config = fs.get_file_info(join(root, "config", "topics.json")).type == pafs.FileType.File
    queue_dirs = frozenset(
        i.base_name for i in _entries(fs, join(root, CONSUMEQUEUE)) if i.type == pafs.FileType.Directory
    )
    return with_store_mode(cfg, rocksdb, file_config and not rocksdb_config, queue_dirs), rocksdb


#: how much of each segment's head ``find_stretches`` reads for its first record with properties
HEAD_BYTES = 64 << 10


def find_stretches(fs: pafs.FileSystem, segments: list[Segment]) -> tuple[Stretch, ...]:
    """The stretches of the commitlog that releases with other property-string endings wrote in turn (an in-place
    upgrade, storelib.broker.detection.Stretch), oldest first, told by the broker-encoded records (``broker_encoded``):
    each segment's first one, then, where two segments differ, every record of the earlier segment (the active
    segment is read whole: a release may have started since its first record). The later release starts at the
    first of the records, up to its first broker-encoded one (in the earlier segment or at the next one's start),
    that all end as its own do (a 4.x broker keeps a
    client's string as sent: the records in between need not tell). With the source topics of the records with LMQ
    offsets read in each stretch. Broker-encoded records of both kinds interleaved in one segment cannot be told
    apart: refused (give --broker-version)."""
    read = {seg.name: _fingerprints(fs, seg, HEAD_BYTES) for seg in segments}
    if segments:
        read[segments[-1].name] = _fingerprints(fs, segments[-1], segments[-1].size)
    heads = [(seg, told[0][1]) for seg in segments if (told := _told(read[seg.name]))]
    if not heads:
        return (Stretch(segments[0].start if segments else 0, False, _sources(read, 0, 1 << 63)),)
    last, tail = segments[-1], _told(read[segments[-1].name])
    if tail and tail[-1][1] != heads[-1][1]:
        heads.append((Segment(last.uri, last.name, last.start + last.size, 0), tail[-1][1]))
    starts, ends = [heads[0][0].start], [heads[0][1]]
    for (before, a), (after, b) in itertools.pairwise(heads):
        if a == b:
            continue
        if before.name != last.name:
            read[before.name] = _fingerprints(fs, before, before.size)
        marks = read[before.name]
        told = _told(marks)
        flips = [k for k in range(1, len(told)) if told[k][1] != told[k - 1][1]]
        if len(flips) > 1 or (flips and told[flips[0]][1] != b):
            raise ConfigError(
                f"{before.rel}: broker-written records whose property strings end with 0x02 and records whose do "
                "not alternate: the releases that wrote the store cannot be told apart: give --broker-version"
            )
        at = next(k for k, m in enumerate(marks) if m[0] == told[flips[0]][0]) if flips else len(marks)
        first = _first_of_run(marks, at, b)  # the later release's first record may lie before the segment's end
        starts.append(marks[first][0] if first < len(marks) else after.start)
        ends.append(b)
    bounds = [*starts[1:], 1 << 63]
    return tuple(Stretch(lo, e, _sources(read, lo, hi)) for lo, e, hi in zip(starts, ends, bounds))


Mark = tuple[int, bool | None, bool, str]  # offset, broker-encoded string ends with 0x02 (else None), ends, LMQ source


def _first_of_run(marks: list[Mark], at: int, ends_02: bool) -> int:
    """The index of the first record of the run of records ending as ``ends_02``, none broker-encoded, that reaches
    ``at`` (the later release's first broker-encoded record, or the segment's end: ``len(marks)``)."""
    while at > 0 and marks[at - 1][2] == ends_02 and marks[at - 1][1] is None:
        at -= 1
    return at


def _told(marks: list[Mark]) -> list[tuple[int, bool]]:
    """(offset, ends with 0x02) of the broker-encoded records."""
    return [(m[0], m[1]) for m in marks if m[1] is not None]


def _sources(read: dict[str, list[Mark]], lo: int, hi: int) -> tuple[str, ...]:
    return tuple(sorted({m[3] for marks in read.values() for m in marks if lo <= m[0] < hi and m[3]}))


def _fingerprints(fs: pafs.FileSystem, seg: Segment, size: int) -> list[Mark]:
    """Each record with properties in the first ``size`` bytes of a segment (streamed): its offset, whether its
    string ends with 0x02 if broker-encoded (else None) and at all, and its topic if it holds LMQ offsets."""
    path = _segment_path(seg)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return []
    with fs.open_input_stream(path) as stream:
        size = min(size, seg.size)
        return _scan_fingerprints(SegmentScanner(stream, seg.name, seg.start, size, False, framing=seg.framing))


def _scan_fingerprints(scanner: SegmentScanner) -> list[Mark]:
    out = []
    for b in scanner:
        ends = b.buf[b.props_start + b.props_len - 1] == 2
        lmq = find_properties(b.buf, b.props_start, b.props_len, (PROPERTY_INNER_MULTI_QUEUE_OFFSET,))
        has_lmq = lmq[PROPERTY_INNER_MULTI_QUEUE_OFFSET][0] >= 0
        topics, made = b.topic, broker_encoded(b)
        for i in np.flatnonzero(b.props_len > 0).tolist():
            end = bool(ends[i])
            out.append((int(b.physical_offset[i]), end if made[i] else None, end, topics[i] if has_lmq[i] else ""))
    return out


def settle_rules(run: Run, store: str, summaries: Iterable[SegmentSummary]) -> BrokerRules:
    """The store's rules (``run.broker_rules``) once the parse has counted what tells the allowed rule sets apart
    (AmbiguousRelease when they would write different files), said in one console line; ``run.with_rules`` holds
    them."""
    rules = run.broker_rules[store]
    if not rules.settled_all:
        summaries = list(summaries)
        if rules.earlier:  # by stretch; a summary without stretch inputs lies in the first stretch
            parts = by_stretch(s.stretch_inputs or ((0, s.rule_inputs),) for s in summaries)
            inputs = dict(parts)
            earlier = tuple(
                (start, r.settle(inputs.get(k, RuleInputs()))) for k, (start, r) in enumerate(rules.earlier)
            )
            last = rules.settle(inputs.get(len(rules.earlier), RuleInputs()))
            rules = dataclasses.replace(last, earlier=earlier)
        else:
            rules = rules.settle(sum((s.rule_inputs for s in summaries), RuleInputs()))
        if run.progress:
            print(rules.line, file=sys.stderr)
    return rules


def _entries(fs: pafs.FileSystem, path: str) -> list[pafs.FileInfo]:
    return sorted(fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)), key=lambda i: i.base_name)


def read_at(fs: pafs.FileSystem, path: str, offset: int, size: int) -> bytes:
    """Up to ``size`` bytes from ``offset``; b"" when the file is missing or shorter."""
    if fs.get_file_info(path).type != pafs.FileType.File:
        return b""
    with fs.open_input_file(path) as f:
        return f.read_at(min(size, f.size() - offset), offset) if f.size() > offset else b""


def store_facts(
    fs: pafs.FileSystem, root: str, segments: list[Segment], cfg: BrokerConfig, since: int | None = None
) -> StoreFacts:
    """The clues detection reads: root, config/ and consumequeue/ entries, the key paths of config/ JSON files, the
    checkpoint, and the first SAMPLE_BYTES of up to SAMPLE_SEGMENTS segments (``sampled_segments``) until
    TAG_KEY_SAMPLE tagged messages and a record with LMQ offsets are found; the tag keys are looked up in the live
    IndexFiles (a local IndexFile is memory-mapped, a remote one read whole), whose hashSlotCount is read too.
    ``since``: the last stretch's first offset in a store several releases wrote (its records only are sampled)."""
    index_dir = join(root, INDEX)
    index = [i.path for i in _entries(fs, index_dir) if is_index_name(i.base_name) and i.size > IndexLayout.HEADER_SIZE]
    headers = [IndexHeader.unpack(read_at(fs, p, 0, 40)) for p in index]
    cfg49 = dataclasses.replace(cfg, brokerVersion=DEFAULT_RELEASE)  # the sample's dispatch: keys, tags, LMQ
    counts: RecordClues = {}
    tagged: list[tuple[int, str, str]] = []  # (commitlog offset, topic#UNIQ_KEY, topic#T#tags)
    lmq_sources: set[str] = set()
    for seg in sampled_segments(segments, headers[-1].end_phy_offset if headers else None):
        data = read_at(fs, _segment_path(seg), 0, SAMPLE_BYTES)
        if len(tagged) >= TAG_KEY_SAMPLE and (lmq_sources or LMQ_OFFSET_NAME not in data):
            continue  # enough tagged messages: only records with LMQ offsets are still looked for
        scanner = SegmentScanner(io.BytesIO(data), seg.name, seg.start, len(data), check_crc=False, framing=seg.framing)
        for b in scanner:
            if since is not None:  # an upgraded store: the clues of the last release's records only
                b = b.part(int(np.searchsorted(b.physical_offset, since)), len(b))
                if not len(b):
                    continue
            d = dispatch_batch(b, cfg49)
            counts.update(record_clues(b, counts))
            lmq_sources.update(topic for topic, _ in d.lmq_sources)
            topics, tags, uniq = b.topic, d.tags, d.uniq_key
            for i in np.flatnonzero(d.to_consume_queue).tolist():
                if tags[i] and uniq[i] and len(tagged) < TAG_KEY_SAMPLE:
                    t = topics[i]
                    tagged.append((int(b.physical_offset[i]), f"{t}#{uniq[i]}", f"{t}#{TAG_KEY_INFIX}{tags[i]}"))
    found, checked = _tag_keys_found(fs, index, headers, tagged, cfg)
    slot_counts = _slot_counts(fs, index, headers, cfg)
    return StoreFacts(
        root_entries=frozenset(i.base_name for i in _entries(fs, root)),
        consumequeue_entries=frozenset(i.base_name for d in ROCKSDB_CQ_DIRS for i in _entries(fs, join(root, d))),
        checkpoint=read_at(fs, join(root, CHECKPOINT), 0, 48),
        **counts,
        tag_keys_found=found,
        tag_keys_checked=checked,
        **_config_facts(fs, root),
        rocksdb_config=cfg.storeType == "defaultRocksDB",
        lmq_sources=tuple(sorted(lmq_sources)),
        index_slot_counts=slot_counts,
    )


def _slot_counts(
    fs: pafs.FileSystem, index: list[str], headers: list[IndexHeader], cfg: BrokerConfig
) -> tuple[tuple[str, int, int, int], ...]:
    """(name, hashSlotCount, puts, occupied slots) of the first live IndexFile whose puts (indexCount - 1) are more
    than its occupied slots: what tells a release that counts every put
    (storelib.broker.detection._slot_count_clues)."""
    for path, h in zip(index, headers):
        slots = np.frombuffer(read_at(fs, path, *IndexLayout.of(cfg).slot_table), ">i4")
        occupied, puts = int(np.count_nonzero(slots)), h.index_count - 1
        if len(slots) == cfg.maxHashSlotNum and occupied < puts:
            return ((path.rsplit("/", 1)[-1], h.hash_slot_count, puts, occupied),)
    return ()


class _ConfigFacts(TypedDict):
    config_entries: frozenset[str]
    config_keys: frozenset[str]


def _config_facts(fs: pafs.FileSystem, root: str) -> _ConfigFacts:
    """StoreFacts ``config_entries`` (the names in config/) and ``config_keys`` (of its CONFIG_JSON files)."""
    entries = _entries(fs, join(root, "config"))
    files = [i for i in entries if i.base_name in CONFIG_JSON and i.type == pafs.FileType.File]
    keys = [config_keys(i.base_name, read_file(fs, i.path).decode("utf-8", "replace")) for i in files]
    return {"config_entries": frozenset(i.base_name for i in entries), "config_keys": frozenset().union(*keys)}


def sampled_segments(segments: list[Segment], index_end: int | None) -> list[Segment]:
    """The segments detection samples, at most SAMPLE_SEGMENTS: the one holding ``index_end`` (the newest live
    IndexFile's last entry; else the last segment) and those before it, newest first."""
    end = segments[-1].start if index_end is None else index_end
    upto = [s for s in segments if s.start <= end] or segments[:1]
    return upto[::-1][:SAMPLE_SEGMENTS]


def _segment_path(seg: Segment) -> str:
    return resolve(seg.uri)[1]


def _index_reader(fs: pafs.FileSystem, path: str, cfg: BrokerConfig) -> IndexFileReader | None:
    """A live IndexFile to look keys up in (memory-mapped when local); None when it does not fit the settings."""
    try:
        return IndexFileReader(map_file(fs, path), cfg, path)
    except StoreFormatError:
        return None


def _tag_keys_found(
    fs: pafs.FileSystem,
    index: list[str],
    headers: list[IndexHeader],
    tagged: list[tuple[int, str, str]],
    cfg: BrokerConfig,
) -> tuple[int, int]:
    """Of the tagged messages whose ``topic#UNIQ_KEY`` the live IndexFile covering them finds, how many have a
    ``topic#T#tags`` entry too: (found, checked). An IndexFile that does not fit the settings (the audit names it)
    tells nothing."""
    readers: dict[int, IndexFileReader | None] = {}
    found = checked = 0
    for offset, uniq_key, tag_key in tagged:
        k = next((k for k, h in enumerate(headers) if h.begin_phy_offset <= offset <= h.end_phy_offset), None)
        if k is None:
            continue
        if k not in readers:
            readers[k] = _index_reader(fs, index[k], cfg)
        r = readers[k]
        hashes = r.message_key_hashes(uniq_key, offset) if r is not None else None
        if hashes is not None:
            checked += 1
            found += key_hash_of(tag_key) in hashes
    return found, checked
