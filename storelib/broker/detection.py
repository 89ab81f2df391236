"""Detection: the clues a store's own bytes hold about the broker releases that wrote it (store-root entries, config/
files and keys, checkpoint fields, sampled records, live IndexFiles), and the range of releases they allow
(``Releases``), stretch by stretch for a store several releases wrote (``Stretch``). The release table is
storelib.broker.versions; the rule set a store gets, storelib.broker.rule_choice.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import TypedDict

import numpy as np

from storelib.broker.versions import CRC32_PIECE, END, FIRST, RULE_SETS, RuleSet, Version, version_text
from storelib.constants import PROPERTY_CRC32, SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from storelib.errors import ConfigError
from storelib.formats.commitlog import MESSAGE_MAGIC_CODE_V2
from storelib.formats.rocksdbcq import ROCKSDB_FILE, is_rocksdb
from storelib.formats.scanner import RecordBatch, find_properties

Span = tuple[Version, Version]  # releases from the first up to (not including) the second


def span_text(spans: tuple[Span, ...]) -> str:
    """``5.2.0 or later``, ``before 5.0.0``, ``4.9.1 up to 5.2.0``, joined with "or"."""
    out = []
    for lo, hi in spans:
        if hi == END:
            out.append(f"{version_text(lo)} or later" if lo != FIRST else "any release")
        elif lo == FIRST:
            out.append(f"before {version_text(hi)}")
        else:
            out.append(f"{version_text(lo)} up to {version_text(hi)}")
    return " or ".join(out) or "no release"


def intersect(a: tuple[Span, ...], b: tuple[Span, ...]) -> tuple[Span, ...]:
    """The releases in both span lists (each sorted, disjoint)."""
    out = [(max(lo, lo2), min(hi, hi2)) for lo, hi in a for lo2, hi2 in b]
    return tuple(sorted((lo, hi) for lo, hi in out if lo < hi))


@dataclasses.dataclass(frozen=True)
class Clue:
    """One fact read off a store and the releases it allows (``spans``). A ``weak`` clue comes from a file the
    broker does not maintain in the store's mode, or may have left before an upgrade (the reason): it narrows the
    releases only where no stronger clue contradicts it."""

    clue: str
    detail: str
    spans: tuple[Span, ...]
    weak: str = ""
    #: it speaks for every record of the range, its first ones included (a fingerprint read off the records, a
    #: live IndexFile covering the first record); else for the release that ran last only, unless it bounds the
    #: releases from above (``reaches_back``)
    whole: bool = False

    @property
    def reaches_back(self) -> bool:
        """True when it holds for the records an earlier release wrote too: it speaks for every record, or allows
        only releases below one (an in-place upgrade goes forward: what ran before ran below it too)."""
        return self.whole or (len(self.spans) == 1 and self.spans[0][0] == FIRST)

    @classmethod
    def at_least(cls, clue: str, detail: str, since: Version) -> Clue:
        return cls(clue, detail, ((since, END),))

    @classmethod
    def below(cls, clue: str, detail: str, until: Version) -> Clue:
        return cls(clue, detail, ((FIRST, until),))

    @property
    def text(self) -> str:
        """The detail and the releases it allows, e.g. "... (5.2.0 or later)"."""
        return f"{self.detail} ({span_text(self.spans)})"

    def to_dict(self) -> dict[str, object]:
        return {
            "clue": self.clue,
            "detail": self.text,
            "releases": [[version_text(lo), version_text(hi)] for lo, hi in self.spans],
            "weak": self.weak or None,
        }


@dataclasses.dataclass(frozen=True)
class StoreFacts:
    """What detection reads: store-root entries, consumequeue/ entries, the checkpoint, sampled records."""

    root_entries: frozenset[str] = frozenset()
    consumequeue_entries: frozenset[str] = frozenset()  # of consumequeue/ and consumequeue_rocksdb/
    batch_queue_topics: frozenset[str] = frozenset()  # entries of batchconsumequeue/
    checkpoint: bytes = b""
    v2_records: int = 0  # sampled records with MESSAGE_MAGIC_CODE_V2
    props_records: int = 0  # sampled records with a broker-encoded properties string (broker_encoded)
    props_ending_02: int = 0  # ... of which end with 0x02
    crc_property_records: int = 0  # sampled records holding __CRC32#
    tag_keys_found: int | None = None  # sampled tagged records whose topic#T#tags chain leads to them
    tag_keys_checked: int = 0  # sampled tagged records inside a live IndexFile whose UNIQ_KEY was found
    repeated_name_records: int = 0  # sampled records whose properties hold a name twice (repeated_names)
    config_entries: frozenset[str] = frozenset()  # names in config/
    config_keys: frozenset[str] = frozenset()  # config_keys() of the CONFIG_JSON files in config/
    rocksdb_config: bool = False  # storeType=defaultRocksDB: topic configs live in config/topics/, not topics.json
    lmq_sources: tuple[str, ...] = ()  # source topics of sampled records holding both INNER_MULTI_* properties
    upgraded: bool = False  # the commitlog shows several releases (Stretch): an older one may have left config/ files
    #: of the live IndexFiles whose slots count fewer than their puts: (file, hashSlotCount, puts, occupied slots)
    index_slot_counts: tuple[tuple[str, int, int, int], ...] = ()
    #: the live IndexFiles begin at or before the range's first record (their clues speak for all of it)
    index_covers_start: bool = False


#: topics only the broker writes records of (transactions, delays, timers)
BROKER_TOPICS = (SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TIMER_TOPIC)


#: the fewest broker-written property strings (``broker_encoded``) that tell a release: fewer (the one torn record
#: at a log's end) tell nothing
MIN_SAMPLE = 3


def broker_encoded(b: RecordBatch) -> np.ndarray:
    """Records whose property string the broker's own MessageDecoder wrote: of BROKER_TOPICS, delivered copies
    (REAL_TOPIC), transaction commits and rollbacks; not those holding INNER_MULTI_DISPATCH (5.2.0 writes their
    offsets after the string: no 0x02 end). A 4.x broker keeps a client's single message's string as the client
    sent it (the 4.5.2 store: its 4.9.8 client's strings end without 0x02, the broker's own with 0x02), so only
    these tell the broker's release. A string that ends with a zero byte is not one the broker wrote whole (it ends
    with 0x02 or a value's last character): a torn record, whose tail a power loss left as the file's zeros."""
    values = find_properties(b.buf, b.props_start, b.props_len, ("REAL_TOPIC", "INNER_MULTI_DISPATCH"))
    topics = np.isin(b.topic_code, [c for c, t in enumerate(b.topic_names) if t in BROKER_TOPICS])
    ended = (b.sys_flag & 0x8) != 0  # TransactionCommit (8) or Rollback (12)
    made = topics | (values["REAL_TOPIC"][0] >= 0) | ended
    whole = b.buf[np.maximum(b.props_start + b.props_len - 1, 0)] != 0
    return made & (values["INNER_MULTI_DISPATCH"][0] < 0) & (b.props_len > 0) & whole


class RecordClues(TypedDict, total=False):
    """The StoreFacts fields counted over sampled records (``record_clues``)."""

    v2_records: int
    props_records: int
    props_ending_02: int
    crc_property_records: int
    repeated_name_records: int


def record_clues(b: RecordBatch, counts: RecordClues) -> RecordClues:
    """``counts`` (StoreFacts record fields) plus a batch of sampled records: V2 magic, broker-encoded property
    strings (``broker_encoded``) ending in 0x02, a ``__CRC32#`` piece as the last 20 bytes, and a property name held
    twice."""
    record_start = b.props_start + b.props_len - b.total_size
    magic = b.buf[record_start[:, None] + np.arange(4, 8)].view(">i4").ravel()
    props_end = b.props_start + b.props_len
    has_props = broker_encoded(b)
    tail = b.buf[np.maximum(props_end - CRC32_PIECE, 0)[:, None] + np.arange(len(PROPERTY_CRC32.encode()))]
    crc = (tail == np.frombuffer(PROPERTY_CRC32.encode(), np.uint8)).all(axis=1) & (b.props_len >= CRC32_PIECE)
    return {
        "v2_records": counts.get("v2_records", 0) + int((magic == MESSAGE_MAGIC_CODE_V2).sum()),
        "props_records": counts.get("props_records", 0) + int(has_props.sum()),
        "props_ending_02": counts.get("props_ending_02", 0) + int((has_props & (b.buf[props_end - 1] == 2)).sum()),
        "crc_property_records": counts.get("crc_property_records", 0) + int(crc.sum()),
        "repeated_name_records": counts.get("repeated_name_records", 0) + repeated_names(b),
    }


def repeated_names(b: RecordBatch) -> int:
    """Records whose properties hold a name twice. Up to 5.3.x ``MessageExtEncoder.encode(MessageExtBatch)``
    appends the batch's own properties (WAIT, CLUSTER, ...) to every member's, which hold WAIT too; from 5.4.0 a
    member keeps only its own, and single messages are written from a map (a name once). ``__CRC32#`` is left
    out: the encoder appends it to what a client sent, which may hold one already."""
    n = 0
    for start, size in zip(b.props_start[b.props_len > 0].tolist(), b.props_len[b.props_len > 0].tolist()):
        pairs = b.buf[start : start + size].tobytes().split(b"\x02")
        names = [p.partition(b"\x01")[0] for p in pairs if p and not p.startswith(PROPERTY_CRC32.encode())]
        n += len(names) != len(set(names))
    return n


#: config/ files whose key paths detection reads (ConfigManager.persist of TopicConfigManager,
#: ConsumerOffsetManager, LmqConsumerOffsetManager and the consumer order info manager)
CONFIG_JSON = ("topics.json", "consumerOffset.json", "lmqConsumerOffset.json", "consumerOrderInfo.json")
_V50, _V51, _V52, _V54, _V55 = (5, 0, 0), (5, 1, 0), (5, 2, 0), (5, 4, 0), (5, 5, 0)
#: store-root entries a release writes whatever the workload (clue name, entry, first release; tests/broker/FACTS.md)
_ROOT_ENTRIES = (
    ("batchconsumequeue/", "batchconsumequeue", _V50),
    ("timerlog/", "timerlog", _V50),
    ("timerwheel", "timerwheel", _V50),
    ("abort.bak", "abort.bak", _V50),  # DefaultMessageStore.createTempFile: MixAll.string2File over the empty abort
    ("compaction/", "compaction", _V51),  # CompactionStore: compaction/position-checkpoint at shutdown
    ("rocksdbstore/", "rocksdbstore", _V54),  # DefaultMessageStore.<init>: MessageRocksDBStorage
)
#: config/ files only these releases write (BrokerPathConfigHelper names; the class that persists them)
_CONFIG_ENTRIES = (
    ("timercheck", _V50),  # TimerCheckpoint
    ("timermetrics", _V50),  # TimerMetrics
    ("consumerOrderInfo.json", _V50),  # ConsumerOrderInfoManager
    ("transactionMetrics", _V52),  # TransactionMetrics (TransactionMetricsFlushService)
)
#: config/ key paths only these releases write: a system topic TopicConfigManager.<init> always adds
_CONFIG_KEYS = (("topics.json:topicConfigTable.RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC", _V54),)
#: (file, a key every release writes in it, a key only releases from ``since`` write, since): fastjson
#: properties (public getters) of the object ConfigManager.encode serializes, never null from that release on; a
#: file holding the first key without the second was written by an older release
_CONFIG_SCHEMAS = (
    ("topics.json", "dataVersion", "dataVersion.stateVersion", _V50),  # DataVersion.getStateVersion
    ("consumerOffset.json", "offsetTable", "dataVersion", _V50),  # ConsumerOffsetManager.getDataVersion
    ("lmqConsumerOffset.json", "offsetTable", "dataVersion", _V50),
    ("consumerOrderInfo.json", "table", "orderedConsumptionLevel", _V54),  # QueueLevelConsumerManager
    ("consumerOrderInfo.json", "table", "orderInfoCount", _V55),
    ("consumerOffset.json", "offsetTable", "pullOffsetTable", _V55),  # ConsumerOffsetManager.getPullOffsetTable
    ("lmqConsumerOffset.json", "offsetTable", "pullOffsetTable", _V55),
)
# fastjson writes Integer map keys bare: offsetTable {0:61}, delayOffset.json {1:9}
_BARE_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def config_keys(name: str, text: str) -> frozenset[str]:
    """The key paths ``name:key`` and ``name:key.subkey`` of a config/ file as the broker's fastjson writes it
    (bare integer map keys allowed); none when it is not a JSON object."""
    try:
        doc = json.loads(_BARE_KEY.sub(r'\1"\2"\3', text))
    except ValueError:
        return frozenset()
    if not isinstance(doc, dict):
        return frozenset()
    inner = {f"{name}:{k}.{sub}" for k, v in doc.items() if isinstance(v, dict) for sub in v}
    return frozenset({f"{name}:{k}" for k in doc} | inner)


def file_clues(f: StoreFacts) -> list[Clue]:
    """Clues from what a release writes outside commitlog/, index/, consumequeue/ and the checkpoint: store-root
    entries, config/ files and their JSON key paths (each written only from the release named)."""
    out = [Clue.at_least(c, f"the store root holds {e}", v) for c, e, v in _ROOT_ENTRIES if e in f.root_entries]
    out += [Clue.at_least(f"config/{e}", f"config/ holds {e}", v) for e, v in _CONFIG_ENTRIES if e in f.config_entries]
    for key, since in _CONFIG_KEYS:
        if key in f.config_keys:
            name, path = key.split(":")
            out.append(Clue.at_least(f"config {path}", f"config/{name} holds {path}", since))
    out += _schema_clues(f.config_keys)
    if f.upgraded:  # a file without a newer release's key may be one an older release left
        why = "the commitlog shows an upgrade: an older release may have left this file"
        out = [dataclasses.replace(c, weak=why) if c.spans[0][0] == FIRST else c for c in out]
    if f.rocksdb_config:  # RocksDBTopicConfigManager: topics.json is not the broker's (an operator's or an old one)
        why = "storeType=defaultRocksDB keeps topic configs in config/topics/, not config/topics.json"
        out = [dataclasses.replace(c, weak=why) if "topics.json" in c.detail else c for c in out]
    return out


def _schema_clues(keys: frozenset[str]) -> list[Clue]:
    """A _CONFIG_SCHEMAS file with its newer key: that release or later; without it: an older release."""
    out = []
    for name, every, newer, since in _CONFIG_SCHEMAS:
        if f"{name}:{every}" in keys:
            has = f"{name}:{newer}" in keys
            text = f"config/{name} {'holds' if has else 'has no'} {newer}"
            make = Clue.at_least if has else Clue.below
            out.append(make(f"config {newer}", text, since))
    return out


def first_with(field: str) -> Version:
    """The first release of the first row whose ``field`` is true."""
    return next(r.first for r in RULE_SETS if getattr(r, field))


#: the releases whose records' property strings end with 0x02 (MessageDecoder.messageProperties2String appends
#: 0x02 after every pair up to 4.9.0 and from 5.2.0, and deletes the last one from 4.9.1 to 5.1.4: jars, FACTS.md)
PROPERTIES_END_02: tuple[Span, ...] = ((FIRST, (4, 9, 1)), ((5, 2, 0), END))


def _complement(spans: tuple[Span, ...]) -> tuple[Span, ...]:
    edges = [FIRST, *(e for span in spans for e in span), END]
    return tuple((lo, hi) for lo, hi in zip(edges[::2], edges[1::2]) if lo < hi)


def clues(f: StoreFacts) -> list[Clue]:
    """Every clue the facts hold, in a fixed order."""
    out = file_clues(f)
    v50, v511, v52, v55 = (5, 0, 0), (5, 1, 1), (5, 2, 0), (5, 5, 0)
    rocks = sorted(e for e in f.consumequeue_entries if ROCKSDB_FILE.match(e))
    if is_rocksdb(f.consumequeue_entries):
        text = f"RocksDB files hold the ConsumeQueue ({', '.join(rocks[:3])})"
        out.append(Clue.at_least("rocksdb-consumequeue", text, v52))
    cp = f.checkpoint.ljust(48, b"\0")
    for at, name, since in (
        (24, "masterFlushedOffset", v50),
        (32, "confirmPhyOffset", v511),
        (40, "logicsPhysicalOffset", v55),
    ):
        if any(cp[at : at + 8]):
            out.append(Clue.at_least(f"checkpoint {name}", f"checkpoint {name} (bytes {at}..{at + 7}) is set", since))
    if f.v2_records:
        text = f"{f.v2_records} sampled record(s) use MESSAGE_MAGIC_CODE_V2"
        out.append(Clue.at_least("v2 magic", text, (5, 1, 0)))
    props = f"{f.props_records} sampled broker-written property strings end with 0x02"
    if f.props_records >= MIN_SAMPLE and f.props_ending_02 == f.props_records:  # fewer tell nothing
        out.append(Clue("properties end 0x02", f"all {props}", PROPERTIES_END_02, whole=True))
    elif f.props_records >= MIN_SAMPLE and f.props_ending_02 == 0:
        out.append(Clue("properties end 0x02", f"none of {props}", _complement(PROPERTIES_END_02), whole=True))
    if f.repeated_name_records:
        text = f"{f.repeated_name_records} sampled record(s) hold a property name twice (batch properties appended)"
        out.append(Clue.below("repeated property", text, (5, 4, 0)))
    if f.crc_property_records:
        out.append(Clue.at_least("__CRC32#", f"{f.crc_property_records} sampled record(s) hold __CRC32#", v52))
    index = slot_count_clues(f.index_slot_counts)
    if f.tag_keys_checked:
        found, n, since = f.tag_keys_found or 0, f.tag_keys_checked, first_with("index_tag_keys")
        if found == n:
            text = f"a live IndexFile's topic#T#<TAGS> keys lead to all {n} sampled tagged messages"
            index.append(Clue.at_least("index tag keys", text, since))
        elif found == 0:
            text = f"a live IndexFile's topic#T#<TAGS> keys lead to none of {n} sampled tagged messages"
            index.append(Clue.below("index tag keys", text, since))
    return out + [dataclasses.replace(c, whole=f.index_covers_start) for c in index]


def slot_count_clues(counts: tuple[tuple[str, int, int, int], ...]) -> list[Clue]:
    """A live IndexFile whose header's hashSlotCount equals its puts (indexCount - 1), more than its occupied slots:
    written by a release that counts every put (IndexFile.putKey before 4.7.1); one that equals its occupied
    slots: by a later one. Other counts (a damaged header) tell nothing."""
    since = next(r.first for r in RULE_SETS if not r.hash_slot_every_put)
    out = []
    for name, count, puts, occupied in counts:
        if count == puts:
            text = f"index/{name}'s hashSlotCount {count:,} counts every put ({occupied:,} slots occupied)"
            out.append(Clue.below("index hashSlotCount", text, since))
        elif count == occupied:
            text = f"index/{name}'s hashSlotCount {count:,} counts occupied slots ({puts:,} puts)"
            out.append(Clue.at_least("index hashSlotCount", text, since))
    return out[:1]


@dataclasses.dataclass(frozen=True)
class Releases:
    """The broker releases a store's clues allow (``spans``, oldest first), the clues, and the weak clues set
    aside because a stronger one contradicts them."""

    spans: tuple[Span, ...]
    clues: tuple[Clue, ...] = ()
    set_aside: tuple[Clue, ...] = ()
    #: the releases that may have written some part of the range: the clues that reach back (``Clue.reaches_back``)
    #: up to the last release ``spans`` allows (None: ``spans``). A clue of the release that ran last (config/,
    #: the store root, the checkpoint, a sampled record) says nothing of what an older one wrote before an
    #: in-place upgrade, which leaves no other trace where the records of both read alike.
    any_part: tuple[Span, ...] | None = None
    #: RuleSet fields in which the rows allowed write nothing different for this store, as its live files show
    #: (``alike``)
    alike: frozenset[str] = frozenset()

    @classmethod
    def between(cls, low: Version, high: Version | None = None) -> Releases:
        return cls(((low, high or END),))

    @property
    def low(self) -> Version:
        return self.spans[0][0]

    @property
    def high(self) -> Version | None:
        """The end of the last span, None for 6.0 (any later release)."""
        return None if self.spans[-1][1] == END else self.spans[-1][1]

    def holds(self, v: Version) -> bool:
        return any(lo <= v < hi for lo, hi in self.spans)

    @property
    def widened(self) -> Releases:
        """The releases that may have written some part of the range (``any_part``), with these clues."""
        if self.any_part is None or self.any_part == self.spans:
            return self
        return dataclasses.replace(self, spans=self.any_part, any_part=None)

    @property
    def candidates(self) -> tuple[RuleSet, ...]:
        """The rows of the releases allowed, oldest first."""
        return tuple(RULE_SETS[k] for k in self.rows_meeting([r.first for r in RULE_SETS]))

    def rows_meeting(self, firsts: list[Version]) -> list[int]:
        """Of a table of rows by first release (each row holds until the next one's), those that hold for some
        release allowed."""
        ends = [*firsts[1:], END]
        return [k for k, (a, b) in enumerate(zip(firsts, ends)) if intersect(((a, b),), self.spans)]

    def lowest_of(self, row: RuleSet) -> Version:
        """The oldest allowed release of a row."""
        k = RULE_SETS.index(row)
        end = RULE_SETS[k + 1].first if k + 1 < len(RULE_SETS) else END
        return intersect(((row.first, end),), self.spans)[0][0]

    @property
    def text(self) -> str:
        """``5.2.0 or later``, ``before 4.9.1 or 5.2.0 up to 5.4.0``."""
        return span_text(self.spans)


def releases(f: StoreFacts) -> Releases:
    """The releases every strong clue allows (no clue: every release the table covers), narrowed by each weak clue
    that leaves some release; strong clues that contradict each other are refused: give ``--broker-version``."""
    found = tuple(clues(f))
    spans: tuple[Span, ...] = ((FIRST, END),)
    for c in found:
        if not c.weak:
            spans = intersect(spans, c.spans)
    if not spans:
        raise ConfigError(
            "the store's clues for the whole commitlog (or, in a store several releases wrote, for its last stretch) "
            f"contradict each other ({'; '.join(c.text for c in found)}). Nothing was written: give the release "
            "that wrote the store last with --broker-version X.Y.Z"
        )
    aside = []
    for c in found:
        if c.weak:
            narrower = intersect(spans, c.spans)
            if narrower:
                spans = narrower
            else:
                aside.append(c)
    back: tuple[Span, ...] = ((FIRST, spans[-1][1]),)
    for c in found:
        if c.reaches_back and not c.weak:
            back = intersect(back, c.spans)
    return Releases(spans, found, tuple(aside), back, alike(f))  # every strong clue narrows spans: inside back


def alike(f: StoreFacts) -> frozenset[str]:
    """RuleSet fields whose rows write alike for this store, as its live files show. ``hash_slot_every_put``: no
    live IndexFile from the first record on has a slot two keys share, so every put occupies its own.
    ``batch_cq``: every topic of batchconsumequeue/ lacks a consumequeue/ directory (a release before 5.0.0 puts
    a BatchCQ topic's records there), so every release that wrote its records wrote them to batchconsumequeue/."""
    out = set(alike_everywhere(f))
    if f.index_covers_start and not f.index_slot_counts:
        out.add("hash_slot_every_put")
    return frozenset(out)


def alike_everywhere(f: StoreFacts) -> frozenset[str]:
    """The ``alike`` fields the live files show for every stretch of a store several releases wrote: ``batch_cq``
    (the queue directories are the whole store's; the IndexFiles' ``hash_slot_every_put`` speaks for the range
    they cover only)."""
    files = f.consumequeue_entries and not is_rocksdb(f.consumequeue_entries)
    if files and f.batch_queue_topics and not f.batch_queue_topics & f.consumequeue_entries:
        return frozenset({"batch_cq"})
    return frozenset()


def tag_key_spans(found: bool) -> tuple[Span, ...]:
    """The releases that put (``found``) or do not put a topic#T#<TAGS> IndexFile key (IndexService.buildIndex)."""
    since = first_with("index_tag_keys")
    return ((since, END),) if found else ((FIRST, since),)


@dataclasses.dataclass(frozen=True)
class Stretch:
    """A run of the commitlog one release wrote (an in-place upgrade leaves several): where its first record is, and
    the fingerprints that tell it from the next (None: nothing in the stretch tells): whether its broker-written
    records' property strings end with 0x02 (PROPERTIES_END_02), whether the live IndexFiles covering its tagged
    messages hold their topic#T#<TAGS> keys, whether the live ConsumeQueue units of its records whose TAGS value
    holds 0x01 show the pair split (before 4.9.1: no TAGS); ``files``: clues of live files lying wholly inside it
    (an IndexFile's hashSlotCount); the source topics of its records with LMQ offsets read (see BrokerRules)."""

    start: int
    ends_02: bool | None
    lmq_sources: tuple[str, ...] = ()
    tag_keys: bool | None = None
    split_pairs: bool | None = None
    files: tuple[Clue, ...] = ()

    @property
    def clues(self) -> tuple[Clue, ...]:
        out = []
        if self.ends_02 is not None:
            spans = PROPERTIES_END_02 if self.ends_02 else _complement(PROPERTIES_END_02)
            end = "end" if self.ends_02 else "do not end"
            text = f"from commitlog offset {self.start:,} the records' property strings {end} with 0x02"
            out.append(Clue("stretch", text, spans))
        if self.tag_keys is not None:
            hold = "hold" if self.tag_keys else "do not hold"
            text = (
                f"from commitlog offset {self.start:,} the live IndexFiles {hold} the tagged messages' topic#T#<TAGS>"
            )
            out.append(Clue("stretch index tag keys", text, tag_key_spans(self.tag_keys)))
        if self.split_pairs is not None:
            read = "as no TAGS (a pair split in three)" if self.split_pairs else "whole"
            text = f"from commitlog offset {self.start:,} the live ConsumeQueues read TAGS holding 0x01 {read}"
            make = Clue.below if self.split_pairs else Clue.at_least
            out.append(
                make("stretch TAGS split", text, next(r.first for r in RULE_SETS if not r.properties_split_pairs))
            )
        return (*out, *self.files)

    @property
    def clue(self) -> Clue:
        """Every clue of the stretch as one: the releases all of them allow."""
        spans: tuple[Span, ...] = ((FIRST, END),)
        for c in self.clues:
            spans = intersect(spans, c.spans)
        return Clue(
            "stretch", "; ".join(c.detail for c in self.clues) or f"from commitlog offset {self.start:,}", spans
        )


def earlier_releases(stretch: Stretch, later: Releases, end: int, same: frozenset[str] = frozenset()) -> Releases:
    """The releases that can have written a stretch (up to commitlog offset ``end``) before one ``later`` allows:
    its fingerprints', up to the last release the later stretch allows (an upgrade goes forward); ``same``: the
    store's ``alike_everywhere``."""
    spans = intersect(stretch.clue.spans, ((FIRST, later.spans[-1][1]),))
    if not spans:
        raise ConfigError(
            f"{stretch.clue.text}, which no release before {later.text} writes: the releases that wrote commitlog "
            f"offsets {stretch.start:,} up to {end:,} cannot be told: give --broker-version X.Y.Z (the release that "
            "wrote the store last; each earlier stretch is then told by its own records)"
        )
    return Releases(spans, stretch.clues, alike=same)
