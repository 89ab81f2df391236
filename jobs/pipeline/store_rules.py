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
    MIN_SAMPLE,
    Clue,
    RecordClues,
    StoreFacts,
    Stretch,
    broker_encoded,
    config_keys,
    record_clues,
    slot_count_clues,
)
from storelib.broker.dispatch import TAG_KEY_INFIX, Dispatch, dispatch_batch
from storelib.broker.rule_choice import BrokerRules, RuleInputs, refuse_mixed_slot_counts, select_stretches
from storelib.broker.segments import Segment, SegmentSummary, by_stretch
from storelib.broker.versions import DEFAULT_RELEASE
from storelib.constants import PROPERTY_INNER_MULTI_QUEUE_OFFSET, PROPERTY_TAGS
from storelib.errors import ConfigError, StoreFormatError
from storelib.formats.consumequeue import CQ_STORE_UNIT_SIZE
from storelib.formats.indexfile import IndexFileReader, IndexHeader, IndexLayout, key_hash_of
from storelib.formats.rocksdbcq import ROCKSDB_CQ_DIRS, is_rocksdb
from storelib.formats.rocksdbcq import batch_cq_topics as rocksdb_batch_cq_topics
from storelib.formats.scanner import DLEDGER_FRAMING, RecordBatch, SegmentScanner, find_properties
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
    index = LiveIndex(fs, root, cfg)
    stretches = find_stretches(fs, segments, index)
    facts = store_facts(fs, root, segments, index, stretches[-1].start if len(stretches) > 1 else None)
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


def find_stretches(fs: pafs.FileSystem, segments: list[Segment], index: LiveIndex) -> tuple[Stretch, ...]:
    """The stretches of the commitlog that releases with other fingerprints wrote in turn (an in-place upgrade,
    storelib.broker.detection.Stretch), oldest first. Each fingerprint speaks for the records it is read off: the
    broker-encoded records' property-string endings (``broker_encoded``), and whether the live IndexFile covering a
    tagged message holds its topic#T#<TAGS> key (``LiveIndex``). Each is read off every segment's head, then, where
    two segments differ, off every record of the earlier one (the active segment is read whole: a release may have
    started since its first record): a boundary of either is a stretch boundary (``_cuts``). Each stretch gets the
    clues of the live IndexFiles lying wholly inside it (``LiveIndex.file_clues``) and the source topics of its
    records with LMQ offsets."""
    read = {seg.name: _fingerprints(fs, seg, HEAD_BYTES, index) for seg in segments}
    if segments:
        read[segments[-1].name] = _fingerprints(fs, segments[-1], segments[-1].size, index)
    first = segments[0].start if segments else 0
    starts = _merged([first], *(_cuts(fs, segments, read, index, field) for field in (ENDS_02, TAG_KEYS)))
    bounds = [*starts[1:], 1 << 63]
    return tuple(
        Stretch(
            lo,
            _value(read, ENDS_02, lo, hi),
            _sources(read, lo, hi),
            _value(read, TAG_KEYS, lo, hi),
            _value(read, SPLIT_PAIRS, lo, hi),
            index.file_clues(lo, hi),
        )
        for lo, hi in zip(starts, bounds)
    )


Mark = tuple[int, bool | None, bool, str, bool | None, bool | None]
#: a Mark: offset, broker-encoded string ends with 0x02 (else None), ends, LMQ source, the covering live IndexFile
#: holds its topic#T#<TAGS> key (None: untagged, or no live IndexFile finds its UNIQ_KEY), its live ConsumeQueue unit
#: shows TAGS read by splitting the pair (None: its TAGS holds no 0x01, or no live unit tells)
ENDS_02, TAG_KEYS, SPLIT_PAIRS = 1, 4, 5
Cut = tuple[int, int, bool]  # a fingerprint's boundary: its window (lo, start] holds the first record of the value


def _cuts(
    fs: pafs.FileSystem, segments: list[Segment], read: dict[str, list[Mark]], index: LiveIndex, field: int
) -> list[Cut]:
    """Where a fingerprint (a Mark ``field``) changes, oldest first, starting with its first value claimed from the
    commitlog's start; [] when no record tells it. A change inside a segment is found on its every record; records of
    both values alternating cannot be told apart: refused, naming the range. The later value's first record: for
    the property endings, the first of the records up to its first broker-encoded one that all end as its own do (a
    4.x broker keeps a client's string as sent: the records in between need not tell); for tag keys, its first
    tagged message (the window before it holds no tagged message)."""
    heads = [(seg, told[0]) for seg in segments if (told := _told(read[seg.name], field))]
    if not heads:
        return []
    last, tail = segments[-1], _told(read[segments[-1].name], field)
    if tail and tail[-1][1] != heads[-1][1][1]:
        if field == ENDS_02:
            _enough_to_tell(last, tail)
        heads.append((Segment(last.uri, last.name, last.start + last.size, 0), tail[-1]))
    cuts: list[Cut] = [(-1, heads[0][0].start, heads[0][1][1])]
    for (before, (_, a)), (after, (at_b, b)) in itertools.pairwise(heads):
        if a == b:
            continue
        read[before.name] = _fingerprints(fs, before, before.size, index, every=True)
        marks = read[before.name]
        told = _told(marks, field)
        flips = [k for k in range(1, len(told)) if told[k][1] != told[k - 1][1]]
        if len(flips) > 1 or (flips and told[flips[0]][1] != b):
            what = (
                "property strings end with 0x02" if field == ENDS_02 else "topic#T#<TAGS> keys the live IndexFiles hold"
            )
            raise ConfigError(
                f"{before.rel}: records of both kinds alternate ({what}): the releases that wrote commitlog offsets "
                f"{before.start:,} up to {before.start + before.size:,} cannot be told apart. Nothing was written: "
                "give --broker-version X.Y.Z"
            )
        lo = told[flips[0] - 1][0] if flips else told[-1][0]
        if field == TAG_KEYS:
            cuts.append((lo, told[flips[0]][0] if flips else at_b, b))
            continue
        at = next(k for k, m in enumerate(marks) if m[0] == told[flips[0]][0]) if flips else len(marks)
        k = _first_of_run(marks, at, b)
        start = marks[k][0] if k < len(marks) else after.start
        cuts.append((start - 1, start, b))
    return cuts


def _merged(first: list[int], *channels: list[Cut]) -> list[int]:
    """The stretch starts: every cut's start, where cuts of two fingerprints whose windows overlap are one boundary
    (at the earlier start: it lies in both windows)."""
    cuts = sorted((c for cuts in channels for c in cuts[1:]), key=lambda c: c[1])
    starts = list(first)
    windows: list[tuple[int, int]] = []
    for lo, start, _ in cuts:
        if windows and lo < windows[-1][1] and start > windows[-1][0]:
            windows[-1] = (max(lo, windows[-1][0]), min(start, windows[-1][1]))
            starts[-1] = windows[-1][1]
        else:
            windows.append((lo, start))
            starts.append(start)
    return starts


def _value(read: dict[str, list[Mark]], field: int, lo: int, hi: int) -> bool | None:
    """A fingerprint's value in commitlog offsets [lo, hi): of the records read there that tell it (None: none
    tells, or they disagree)."""
    values = {bool(m[field]) for marks in read.values() for m in marks if lo <= m[0] < hi and m[field] is not None}
    return values.pop() if len(values) == 1 else None


def _enough_to_tell(seg: Segment, told: list[tuple[int, bool]]) -> None:
    """The broker-written records at the end of ``seg`` that end otherwise than its first: at least MIN_SAMPLE of
    them tell a later release; fewer tell nothing, and its rules would be guessed: refused."""
    run = next((k for k, (_, ends) in enumerate(reversed(told)) if ends != told[-1][1]), len(told))
    if run < MIN_SAMPLE:
        raise ConfigError(
            f"{seg.rel}: only the last {run} broker-written record(s) end their property strings "
            f"{'with' if told[-1][1] else 'without'} 0x02, unlike the rest: too few to tell whether another release "
            "wrote them: give --broker-version"
        )


def _first_of_run(marks: list[Mark], at: int, ends_02: bool) -> int:
    """The index of the first record of the run of records ending as ``ends_02``, none broker-encoded, that reaches
    ``at`` (the later release's first broker-encoded record, or the segment's end: ``len(marks)``)."""
    while at > 0 and marks[at - 1][2] == ends_02 and marks[at - 1][1] is None:
        at -= 1
    return at


def _told(marks: list[Mark], field: int) -> list[tuple[int, bool]]:
    """(offset, value) of the records a fingerprint (Mark ``field``) is read off."""
    return [(m[0], bool(m[field])) for m in marks if m[field] is not None]


def _sources(read: dict[str, list[Mark]], lo: int, hi: int) -> tuple[str, ...]:
    return tuple(sorted({m[3] for marks in read.values() for m in marks if lo <= m[0] < hi and m[3]}))


#: a scan that does not locate a boundary reads the tag keys and ConsumeQueue units of this many tagged records at
#: each end of what it reads (a record's lookup walks an IndexFile chain and reads a unit: a 1 GiB segment holds
#: millions)
ENDS_LOOKED_UP = 64


def _fingerprints(fs: pafs.FileSystem, seg: Segment, size: int, index: LiveIndex, every: bool = False) -> list[Mark]:
    """Each record with properties in the first ``size`` bytes of a segment (streamed): its Mark; the live files are
    asked about ``every`` record, else about ENDS_LOOKED_UP at each end."""
    path = _segment_path(seg)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return []
    with fs.open_input_stream(path) as stream:
        size = min(size, seg.size)
        scanner = SegmentScanner(stream, seg.name, seg.start, size, False, framing=seg.framing)
        return _scan_fingerprints(scanner, index, every)


def _scan_fingerprints(scanner: SegmentScanner, index: LiveIndex, every: bool) -> list[Mark]:
    out: list[Mark] = []
    asked: dict[int, list[int]] = {TAG_KEYS: [], SPLIT_PAIRS: []}  # positions in ``out`` of records to ask about
    questions: dict[tuple[int, int], object] = {}
    for b in scanner:
        ends = b.buf[b.props_start + b.props_len - 1] == 2
        lmq = find_properties(b.buf, b.props_start, b.props_len, (PROPERTY_INNER_MULTI_QUEUE_OFFSET,))
        has_lmq = lmq[PROPERTY_INNER_MULTI_QUEUE_OFFSET][0] >= 0
        topics, made = b.topic, broker_encoded(b)
        d = dispatch_batch(b, index.dispatch_cfg)
        tagged = dict(index.tagged(b, d)) if index.headers else {}
        units = index.split_units(b, d)
        for i in np.flatnonzero(b.props_len > 0).tolist():
            end, at = bool(ends[i]), int(b.physical_offset[i])
            for field, question in ((TAG_KEYS, tagged.get(at)), (SPLIT_PAIRS, units.get(i))):
                if question is not None:
                    asked[field].append(len(out))
                    questions[field, len(out)] = question
            out.append((at, end if made[i] else None, end, topics[i] if has_lmq[i] else "", None, None))
    for field, positions in asked.items():
        if not every and len(positions) > 2 * ENDS_LOOKED_UP:
            positions = positions[:ENDS_LOOKED_UP] + positions[-ENDS_LOOKED_UP:]
        for k in positions:
            answer = index.answer(field == TAG_KEYS, out[k][0], questions[field, k])
            out[k] = (*out[k][:field], answer, *out[k][field + 1 :])  # type: ignore[assignment]  # a Mark
    return out


class LiveIndex:
    """The live IndexFiles of a store (headers read once, each file mapped when first needed): whether the one
    covering a tagged message holds its topic#T#<TAGS> key, and the clues each file's header holds for the commitlog
    range it covers."""

    def __init__(self, fs: pafs.FileSystem, root: str, cfg: BrokerConfig) -> None:
        index_dir = join(root, INDEX)
        entries = _entries(fs, index_dir)
        self.fs, self.root, self.cfg = fs, root, cfg
        self.dispatch_cfg = dataclasses.replace(cfg, brokerVersion=DEFAULT_RELEASE)  # keys, tags, LMQ of a record
        self.paths = [i.path for i in entries if is_index_name(i.base_name) and i.size > IndexLayout.HEADER_SIZE]
        self.headers = [IndexHeader.unpack(read_at(fs, p, 0, 40)) for p in self.paths]
        self._readers: dict[int, IndexFileReader | None] = {}

    def tagged(self, b: RecordBatch, d: Dispatch) -> list[tuple[int, tuple[str, str]]]:
        """(offset, (topic#UNIQ_KEY, topic#T#tags)) of a batch's tagged messages that go to a ConsumeQueue (``d``:
        their dispatch by ``dispatch_cfg``)."""
        topics, tags, uniq = b.topic, d.tags, d.uniq_key
        return [
            (int(b.physical_offset[i]), (f"{topics[i]}#{uniq[i]}", f"{topics[i]}#{TAG_KEY_INFIX}{tags[i]}"))
            for i in np.flatnonzero(d.to_consume_queue).tolist()
            if tags[i] and uniq[i]
        ]

    def holds_tag_key(self, offset: int, uniq_key: str, tag_key: str) -> bool | None:
        """Whether the live IndexFile covering ``offset`` holds the message's ``tag_key`` beside its ``uniq_key``, or
        the next one at its start (a full file: the 5.4.0 DLedger store's message at 917,552 has its UNIQ_KEY in
        one file, its topic#T#<TAGS> key first in the next); None when no live IndexFile that fits the settings
        finds the ``uniq_key`` (it tells nothing)."""
        k = next((k for k, h in enumerate(self.headers) if h.begin_phy_offset <= offset <= h.end_phy_offset), None)
        r = self._reader(k)
        hashes = r.message_key_hashes(uniq_key, offset) if r is not None else None
        if hashes is None:
            return None
        if key_hash_of(tag_key) in hashes:
            return True
        after = self._reader(k + 1) if k is not None and k + 1 < len(self.headers) else None
        return after is not None and key_hash_of(tag_key) in after.leading_key_hashes(offset)

    def _reader(self, k: int | None) -> IndexFileReader | None:
        """The reader of the k-th live IndexFile (None: no such file, or it does not fit the settings)."""
        if k is None:
            return None
        if k not in self._readers:
            self._readers[k] = _index_reader(self.fs, self.paths[k], self.cfg)
        return self._readers[k]

    def split_units(self, b: RecordBatch, d: Dispatch) -> dict[int, tuple[str, int, int]]:
        """Of a batch's records that go to a ConsumeQueue with a TAGS value holding 0x01 (a pair of three parts:
        ``string2messageProperties`` before 4.9.1 drops it, tagsCode 0; from 4.9.1 the value is read whole): record
        position -> (its live ConsumeQueue file, the unit's position in it, the tagsCode read whole), for
        ``split_read``."""
        start, length = d.values[PROPERTY_TAGS]
        ones = np.concatenate(([0], np.cumsum(b.buf == 1)))
        held = (start >= 0) & d.to_consume_queue & ~d.batch_cq
        held[held] = ones[start[held] + length[held]] > ones[start[held]]
        size, out = self.cfg.cq_file_size, {}
        for i in np.flatnonzero(held & (d.tags_code != 0)).tolist():
            at = int(b.queue_offset[i]) * CQ_STORE_UNIT_SIZE
            path = join(self.root, CONSUMEQUEUE, b.topic[i], str(int(b.queue_id[i])), f"{at // size * size:020d}")
            out[i] = (path, at % size, int(d.tags_code[i]))
        return out

    def split_read(self, offset: int, path: str, at: int, whole: int) -> bool | None:
        """Whether the live ConsumeQueue unit of the record at ``offset`` shows its TAGS pair split (tagsCode 0)
        rather than read whole (``whole``); None when there is no such unit or it holds neither. The 4.8.0 broker's
        batch members show the split (tests/broker/FACTS.md)."""
        unit = read_at(self.fs, path, at, CQ_STORE_UNIT_SIZE)
        if len(unit) != CQ_STORE_UNIT_SIZE or int.from_bytes(unit[:8], "big") != offset:
            return None
        code = int.from_bytes(unit[12:], "big", signed=True)
        return code == 0 if code in (0, whole) else None

    def answer(self, tag_keys: bool, offset: int, question: object) -> bool | None:
        """``holds_tag_key`` (``tag_keys``) or ``split_read`` of the record at ``offset``."""
        if tag_keys:
            return self.holds_tag_key(offset, *question)  # type: ignore[misc]  # (uniq_key, tag_key)
        return self.split_read(offset, *question)  # type: ignore[misc]  # (path, at, whole)

    def file_clues(self, lo: int, hi: int) -> tuple[Clue, ...]:
        """The hashSlotCount clue of the first live IndexFile lying wholly in commitlog offsets [lo, hi) whose puts
        outnumber its occupied slots (storelib.broker.detection.slot_count_clues)."""
        inside = [
            (p, h) for p, h in zip(self.paths, self.headers) if lo <= h.begin_phy_offset and h.end_phy_offset < hi
        ]
        return tuple(slot_count_clues(_slot_counts(self.fs, [p for p, _ in inside], [h for _, h in inside], self.cfg)))


def settle_rules(run: Run, store: str, summaries: Iterable[SegmentSummary]) -> BrokerRules:
    """The store's rules (``run.broker_rules``) once the parse has counted what tells the allowed rule sets apart
    (AmbiguousRelease when they would write different files), said in one console line; ``run.with_rules`` holds
    them."""
    rules = run.broker_rules[store]
    if not rules.settled_all:
        summaries = sorted(summaries, key=lambda s: s.segment)  # commitlog order: RuleInputs add up in it
        if rules.earlier:  # by stretch; a summary without stretch inputs lies in the first stretch
            parts = by_stretch(s.stretch_inputs or ((0, s.rule_inputs),) for s in summaries)
            inputs = dict(parts)
            earlier = tuple(
                (start, r.settle_earlier(inputs.get(k, RuleInputs()))) for k, (start, r) in enumerate(rules.earlier)
            )
            last = rules.settle(inputs.get(len(rules.earlier), RuleInputs()))
            refuse_mixed_slot_counts([*earlier, (last.start, last)], inputs)
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
    fs: pafs.FileSystem, root: str, segments: list[Segment], index: LiveIndex, since: int | None = None
) -> StoreFacts:
    """The clues detection reads: root, config/ and consumequeue/ entries, the key paths of config/ JSON files, the
    checkpoint, and the first SAMPLE_BYTES of up to SAMPLE_SEGMENTS segments (``sampled_segments``) until
    TAG_KEY_SAMPLE tagged messages and a record with LMQ offsets are found; the tag keys are looked up in the live
    IndexFiles (``LiveIndex``), whose hashSlotCount is read too. ``since``: the last stretch's first offset in a
    store several releases wrote (its records and the IndexFiles reaching into it only are sampled)."""
    headers, cfg = index.headers, index.cfg
    counts: RecordClues = {}
    tagged: list[tuple[int, tuple[str, str]]] = []  # (commitlog offset, (topic#UNIQ_KEY, topic#T#tags))
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
            counts.update(record_clues(b, counts))
            d = dispatch_batch(b, index.dispatch_cfg)
            lmq_sources.update(topic for topic, _ in d.lmq_sources)
            tagged += index.tagged(b, d)[: TAG_KEY_SAMPLE - len(tagged)]
    held = [h for offset, keys in tagged if (h := index.holds_tag_key(offset, *keys)) is not None]
    live = [(p, h) for p, h in zip(index.paths, headers) if since is None or h.end_phy_offset >= since]
    first = since if since is not None else _first_record(fs, segments[0]) if segments else 0
    return StoreFacts(
        root_entries=frozenset(i.base_name for i in _entries(fs, root)),
        consumequeue_entries=frozenset(i.base_name for d in ROCKSDB_CQ_DIRS for i in _entries(fs, join(root, d))),
        batch_queue_topics=frozenset(i.base_name for i in _entries(fs, join(root, BATCH_CONSUMEQUEUE))),
        checkpoint=read_at(fs, join(root, CHECKPOINT), 0, 48),
        **counts,
        tag_keys_found=sum(held),
        tag_keys_checked=len(held),
        **_config_facts(fs, root),
        rocksdb_config=cfg.storeType == "defaultRocksDB",
        lmq_sources=tuple(sorted(lmq_sources)),
        index_slot_counts=_slot_counts(fs, [p for p, _ in live], [h for _, h in live], cfg),
        index_covers_start=bool(live) and live[0][1].begin_phy_offset <= first,
    )


def _first_record(fs: pafs.FileSystem, seg: Segment) -> int:
    """The commitlog offset of a segment's first record (a DLedger entry's body lies past its header); the
    segment's start when none frames in its head."""
    data = read_at(fs, _segment_path(seg), 0, HEAD_BYTES)
    scanner = SegmentScanner(io.BytesIO(data), seg.name, seg.start, len(data), check_crc=False, framing=seg.framing)
    return next((int(b.physical_offset[0]) for b in scanner if len(b)), seg.start)


def _slot_counts(
    fs: pafs.FileSystem, index: list[str], headers: list[IndexHeader], cfg: BrokerConfig
) -> tuple[tuple[str, int, int, int], ...]:
    """(name, hashSlotCount, puts, occupied slots) of the first live IndexFile whose puts (indexCount - 1) are more
    than its occupied slots: what tells a release that counts every put
    (storelib.broker.detection.slot_count_clues)."""
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
