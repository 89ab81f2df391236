"""The release table: what differs between broker releases, one row per release where something changes, and how
to tell the releases apart from a store's own bytes.

Each row (``RuleSet``) holds from its first release up to the next row's: the dispatch rules (IndexFile keys and
hashSlotCount, LMQ, BatchConsumeQueue, the properties parse), which source topics an append gives LMQ offsets, the
commitlog recovery rules (storelib.broker.restart), and ``verified_by``: the real broker releases whose own files a test
compared with ours for that row (tests/test_release_matrix.py; tests/broker/FACTS.md, "Release by release"). A row
no broker checked is unverified: detection never writes bytes with it (``BrokerRules.settle``), and the console line
says so when ``--broker-version`` asks for it.

- 4.0: index keys ``topic#UNIQ_KEY``, ``topic#<KEYS token>``; the IndexFile header's hashSlotCount counts every put;
  ``string2messageProperties`` splits each pair with ``split``: a pair of three parts is no property; no LMQ.
- 4.7.1: hashSlotCount counts occupied slots only. 4.9.1: pairs split at the first 0x01.
- 4.9.3: LMQ: every INNER_MULTI_DISPATCH name gets an offset and no source topic is excluded (the
  SCHEDULE_TOPIC_XXXX copy of a delayed LMQ message is dispatched to the LMQ queues too).
- 5.0: BatchConsumeQueue for ``queue.type=BatchCQ`` topics; LMQ offsets only for ``%LMQ%`` names.
- 5.1.1: LMQ skips ``%RETRY%*`` source topics. 5.1.2: also rmq_sys_wheel_timer and SCHEDULE_TOPIC_XXXX, and
  names holding a path separator.
- 5.2: LMQ skips every ``rmq_sys_*`` source topic; properties end with 0x02; optional ``__CRC32#``.
- 5.4: a third index key ``topic#T#<TAGS>`` after the KEYS tokens.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import re
from collections.abc import Mapping
from typing import Any, TypedDict

import numpy as np

from storelib.errors import AmbiguousRelease, ConfigError
from storelib.formats.commitlog import MESSAGE_MAGIC_CODE_V2, RecordBatch, find_properties
from storelib.formats.rocksdbcq import ROCKSDB_FILE, is_rocksdb

CRC32_NAME = b"__CRC32#"
CRC32_PIECE = 20  # CommitLog.CRC32_RESERVED_LEN: __CRC32# 0x01, ten digits least significant first, 0x02
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?\Z")
Version = tuple[int, int, int]
#: the release whose rules a config without brokerVersion stands for (the shared 4.9.8 format spec)
DEFAULT_RELEASE = "4.9.8"
#: the releases the table covers: 4.0.0 up to (not including) 6.0.0
FIRST: Version = (4, 0, 0)
END: Version = (6, 0, 0)
#: commitlog recovery start rules (storelib.broker.restart)
THIRD_LAST = "third-last"  # mappedFiles.size() - 3, at least 0
CQ_OFFSET = "cq-offset"  # the last segment starting at or before maxPhyOffsetOfConsumeQueue, else the first
TIMESTAMP = "timestamp"  # the last whose first storeTimestamp is not 0 and <= the checkpoint's min timestamp
MATCHED = "matched"  # the last whose first record the ConsumeQueueStore and the IndexService accept


@dataclasses.dataclass(frozen=True)
class RuleSet:
    """One row of the release table: the rules of the releases from ``first`` up to the next row's first."""

    name: str
    first: Version
    verified_by: tuple[str, ...]  # real broker releases whose own files a test compared with ours for this row
    properties_split_pairs: bool  # string2messageProperties: split("\x01") must give two parts (before 4.9.1)
    hash_slot_every_put: bool  # IndexFile.putKey: incHashSlotCount on every put (before 4.7.1)
    multi_dispatch: bool  # LMQ: INNER_MULTI_DISPATCH records go to LMQ queues at all (4.9.3+)
    index_tag_keys: bool  # IndexService.buildIndex puts topic#T#<TAGS> (5.4.0+)
    lmq_names_need_prefix: bool  # only %LMQ% names get an INNER_MULTI_QUEUE_OFFSET (5.0.0+)
    lmq_skip_source_prefixes: tuple[str, ...]  # source topics never multi-dispatched (MultiDispatchUtils)
    lmq_skip_source_topics: tuple[str, ...]
    lmq_skip_path_names: bool  # a name holding File.separator is skipped (5.1.2+)
    lmq_offset_skip_prefixes: tuple[str, ...]  # source topics whose appends get no INNER_MULTI_QUEUE_OFFSET
    lmq_offset_skip_topics: tuple[str, ...]
    batch_cq: bool  # queue.type=BatchCQ topics go to batchconsumequeue/ (5.0.0+)
    schedule_tagscode_quirk: bool  # crash recovery may write the TAGS hash into SCHEDULE_TOPIC_XXXX (4.x)
    recover_normal: str  # CommitLog.recoverNormally's start segment rule
    recover_crash: str  # CommitLog.recoverAbnormally's start segment rule
    recover_max_num: bool  # commitLogRecoverMaxNum bounds how many segments the start search looks at (5.5.0+)
    reput_after_normal: bool  # recoverNormally dispatches nothing; the reput service does, from the CQs' max (4.x)

    @property
    def verified(self) -> bool:
        return bool(self.verified_by)

    def lmq_source_allowed(self, topic: str) -> bool:
        """Whether records of ``topic`` are multi-dispatched to LMQ queues at all."""
        return (
            self.multi_dispatch
            and topic not in self.lmq_skip_source_topics
            and not topic.startswith(self.lmq_skip_source_prefixes)
        )

    def lmq_offsets_given(self, topic: str) -> bool:
        """Whether this release's append gives records of ``topic`` INNER_MULTI_QUEUE_OFFSET."""
        return (
            self.multi_dispatch
            and topic not in self.lmq_offset_skip_topics
            and not topic.startswith(self.lmq_offset_skip_prefixes)
        )

    @property
    def lmq_units_appended(self) -> bool:
        """Appends give LMQ offsets to records of source topics dispatch then skips (5.2.0 … 5.3.0: offsets for
        rmq_sys_* and SCHEDULE_TOPIC_XXXX, whose copies ConsumeQueue.putMessagePositionInfoWrapper never
        multi-dispatches): the next unit's offset is past the queue's write position, and the file ConsumeQueue
        appends it there ("[BUG]logic queue order maybe wrong"), so an LMQ queue holds its units densely. The
        5.2.0 broker's own %LMQ% queues show it (tests/broker/FACTS.md)."""
        prefixes = [p for p in self.lmq_skip_source_prefixes if p not in self.lmq_offset_skip_prefixes]
        topics = [t for t in self.lmq_skip_source_topics if t not in self.lmq_offset_skip_topics]
        return self.multi_dispatch and bool(prefixes or [t for t in topics if not t.startswith(tuple(prefixes))])

    @property
    def recovery(self) -> tuple[str, str, bool, bool]:
        return self.recover_normal, self.recover_crash, self.recover_max_num, self.reput_after_normal

    @property
    def verified_text(self) -> str:
        """ "verified by the 5.3.3 broker's files" or "UNVERIFIED: no broker of these releases checked it"."""
        if self.verified_by:
            return f"verified by the {', '.join(self.verified_by)} broker's files"
        return "UNVERIFIED: no broker of these releases checked this row"

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "first_release": version_text(self.first), "verified_by": list(self.verified_by)}


_TIMER, _SCHEDULE = "rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX"
_RETRY, _DLQ, _SYS = "%RETRY%", "%DLQ%", "rmq_sys_"
#: the first row, 4.0.0 (4.3.2 is the oldest release Maven Central serves whole here)
_FIRST_ROW = RuleSet(
    name="4.0",
    first=FIRST,
    verified_by=("4.3.2", "4.5.2", "4.7.0"),
    properties_split_pairs=True,
    hash_slot_every_put=True,
    multi_dispatch=False,
    index_tag_keys=False,
    lmq_names_need_prefix=False,
    lmq_skip_source_prefixes=(),
    lmq_skip_source_topics=(),
    lmq_skip_path_names=False,
    lmq_offset_skip_prefixes=(),
    lmq_offset_skip_topics=(),
    batch_cq=False,
    schedule_tagscode_quirk=True,
    recover_normal=THIRD_LAST,
    recover_crash=TIMESTAMP,
    recover_max_num=False,
    reput_after_normal=True,
)
#: what each row changes from the one before it (name, first release, the real brokers that verified it, changes);
#: the jar facts behind each change: tests/broker/FACTS.md
_CHANGES: tuple[tuple[str, Version, tuple[str, ...], dict[str, object]], ...] = (
    ("4.7.1", (4, 7, 1), ("4.7.1", "4.8.0", "4.9.0"), {"hash_slot_every_put": False}),
    ("4.9.1", (4, 9, 1), ("4.9.1", "4.9.2"), {"properties_split_pairs": False}),
    ("4.9.3", (4, 9, 3), ("4.9.3", "4.9.7"), {"multi_dispatch": True}),
    (
        "5.0",
        (5, 0, 0),
        ("5.0.0", "5.1.0"),
        {
            "lmq_names_need_prefix": True,
            "batch_cq": True,
            "schedule_tagscode_quirk": False,
            "reput_after_normal": False,
        },
    ),
    (
        "5.1.1",
        (5, 1, 1),
        ("5.1.1",),
        {"lmq_skip_source_prefixes": (_RETRY,), "lmq_offset_skip_prefixes": (_RETRY,)},
    ),
    (
        "5.1.2",
        (5, 1, 2),
        ("5.1.3", "5.1.4"),
        {
            "lmq_skip_source_topics": (_TIMER, _SCHEDULE),
            "lmq_skip_path_names": True,
            "lmq_offset_skip_topics": (_TIMER, _SCHEDULE),
        },
    ),
    (
        "5.2",
        (5, 2, 0),
        ("5.2.0", "5.3.0"),
        {
            "lmq_skip_source_prefixes": (_RETRY, _SYS),
            "lmq_skip_source_topics": (_SCHEDULE,),
            "lmq_offset_skip_topics": (),
        },
    ),
    (
        "5.3.1",
        (5, 3, 1),
        ("5.3.1",),
        {"lmq_offset_skip_prefixes": (_RETRY, _SYS), "lmq_offset_skip_topics": (_SCHEDULE,)},
    ),
    ("5.3.2", (5, 3, 2), ("5.3.2", "5.3.3"), {"recover_normal": CQ_OFFSET}),
    ("5.4", (5, 4, 0), ("5.4.0",), {"index_tag_keys": True}),
    (
        "5.5",
        (5, 5, 0),
        ("5.5.0",),
        {
            "recover_normal": MATCHED,
            "recover_crash": MATCHED,
            "recover_max_num": True,
            "lmq_offset_skip_prefixes": (_RETRY, _DLQ, _SYS),
        },
    ),
)


def _rule_sets() -> tuple[RuleSet, ...]:
    rows = [_FIRST_ROW]
    for name, first, verified_by, changes in _CHANGES:
        rows.append(dataclasses.replace(rows[-1], name=name, first=first, verified_by=verified_by, **changes))  # type: ignore[arg-type]  # RuleSet fields
    return tuple(rows)


#: the release table, oldest row first
RULE_SETS = _rule_sets()


def parse_version(text: str) -> Version:
    """``4.9``, ``5.3.3``, ``5.5.0`` -> (major, minor, patch); a missing patch is 0."""
    m = _VERSION.match(text.strip())
    if not m:
        raise ConfigError(f"broker version {text!r}: expected MAJOR.MINOR or MAJOR.MINOR.PATCH, e.g. 5.5 or 4.9.8")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def version_text(v: Version | None) -> str | None:
    """(5, 5, 0) -> "5.5.0"."""
    return ".".join(map(str, v)) if v else None


def rules_for(version: str | Version) -> RuleSet:
    """The row of a broker release; releases before 4.0 or from 6.0 on are refused (not covered)."""
    v = parse_version(version) if isinstance(version, str) else version
    if not FIRST <= v < END:
        raise ConfigError(f"broker version {'.'.join(map(str, v))} is not supported (4.x and 5.x are)")
    return [r for r in RULE_SETS if r.first <= v][-1]


# --- detection -----------------------------------------------------------------------------------------


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


#: topics only the broker writes records of (transactions, delays, timers)
BROKER_TOPICS = (
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "rmq_sys_wheel_timer",
)


def broker_encoded(b: RecordBatch) -> np.ndarray:
    """Records whose property string the broker's own MessageDecoder wrote: of BROKER_TOPICS, delivered copies
    (REAL_TOPIC), transaction commits and rollbacks; not those holding INNER_MULTI_DISPATCH (5.2.0 writes their
    offsets after the string: no 0x02 end). A 4.x broker keeps a client's single message's string as the client
    sent it (the 4.5.2 store: its 4.9.8 client's strings end without 0x02, the broker's own with 0x02), so only
    these tell the broker's release."""
    values = find_properties(b.buf, b.props_start, b.props_len, ("REAL_TOPIC", "INNER_MULTI_DISPATCH"))
    topics = np.isin(b.topic_code, [c for c, t in enumerate(b.topic_names) if t in BROKER_TOPICS])
    ended = (b.sys_flag & 0x8) != 0  # TransactionCommit (8) or Rollback (12)
    made = topics | (values["REAL_TOPIC"][0] >= 0) | ended
    return made & (values["INNER_MULTI_DISPATCH"][0] < 0) & (b.props_len > 0)


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
    tail = b.buf[np.maximum(props_end - CRC32_PIECE, 0)[:, None] + np.arange(len(CRC32_NAME))]
    crc = (tail == np.frombuffer(CRC32_NAME, np.uint8)).all(axis=1) & (b.props_len >= CRC32_PIECE)
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
        names = [p.partition(b"\x01")[0] for p in pairs if p and not p.startswith(CRC32_NAME)]
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
    if f.props_records and f.props_ending_02 == f.props_records:
        out.append(Clue("properties end 0x02", f"all {props}", PROPERTIES_END_02))
    elif f.props_records and f.props_ending_02 == 0:
        out.append(Clue("properties end 0x02", f"none of {props}", _complement(PROPERTIES_END_02)))
    if f.repeated_name_records:
        text = f"{f.repeated_name_records} sampled record(s) hold a property name twice (batch properties appended)"
        out.append(Clue.below("repeated property", text, (5, 4, 0)))
    if f.crc_property_records:
        out.append(Clue.at_least("__CRC32#", f"{f.crc_property_records} sampled record(s) hold __CRC32#", v52))
    out += _slot_count_clues(f.index_slot_counts)
    if f.tag_keys_checked:
        found, n, since = f.tag_keys_found or 0, f.tag_keys_checked, first_with("index_tag_keys")
        if found == n:
            text = f"a live IndexFile's topic#T#<TAGS> keys lead to all {n} sampled tagged messages"
            out.append(Clue.at_least("index tag keys", text, since))
        elif found == 0:
            text = f"a live IndexFile's topic#T#<TAGS> keys lead to none of {n} sampled tagged messages"
            out.append(Clue.below("index tag keys", text, since))
    return out


def _slot_count_clues(counts: tuple[tuple[str, int, int, int], ...]) -> list[Clue]:
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
            "the store's clues contradict each other (" + "; ".join(c.text for c in found) + "): give --broker-version"
        )
    aside = []
    for c in found:
        if c.weak:
            narrower = intersect(spans, c.spans)
            if narrower:
                spans = narrower
            else:
                aside.append(c)
    return Releases(spans, found, tuple(aside))


@dataclasses.dataclass(frozen=True)
class Stretch:
    """A run of the commitlog one release wrote (an in-place upgrade leaves several): where its first record is,
    and whether its records' property strings end with 0x02 (PROPERTIES_END_02), the fingerprint that tells it
    from the next; the source topics of its records with LMQ offsets that were read (see BrokerRules)."""

    start: int
    ends_02: bool
    lmq_sources: tuple[str, ...] = ()

    @property
    def clue(self) -> Clue:
        spans = PROPERTIES_END_02 if self.ends_02 else _complement(PROPERTIES_END_02)
        end = "end" if self.ends_02 else "do not end"
        text = f"from commitlog offset {self.start:,} the records' property strings {end} with 0x02"
        return Clue("stretch", text, spans)


def earlier_releases(stretch: Stretch, later: Releases) -> Releases:
    """The releases that can have written a stretch before one ``later`` allows: its fingerprint's, up to the last
    release the later stretch allows (an upgrade goes forward)."""
    spans = intersect(stretch.clue.spans, ((FIRST, later.spans[-1][1]),))
    if not spans:
        raise ConfigError(f"{stretch.clue.text}, which no release before {later.text} writes: give --broker-version")
    return Releases(spans, (stretch.clue,))


# --- which rules matter for a store ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RuleInputs:
    """A store's records that the rule sets of different releases dispatch differently (counted by the parse)."""

    tagged_index_records: int = 0  # records put into the IndexFile that hold TAGS (5.4.0 adds topic#T#<TAGS>)
    batch_cq_records: int = 0  # ConsumeQueue records of queue.type=BatchCQ topics (5.0.0+: batchconsumequeue/)
    lmq_sources: tuple[tuple[str, int], ...] = ()  # (source topic, records) with both INNER_MULTI_* properties
    lmq_unprefixed_names: int = 0  # INNER_MULTI_DISPATCH names without %LMQ% (5.0.0+ skip them)
    lmq_path_names: int = 0  # names holding "/" (5.1.2+ skip them)
    index_records: int = 0  # records put into the IndexFile (hashSlotCount counts every put before 4.7.1)
    split_pair_records: int = 0  # records with a dispatched property value holding 0x01 (before 4.9.1: no property)

    def __add__(self, other: RuleInputs) -> RuleInputs:
        sources = collections.Counter(dict(self.lmq_sources))
        sources.update(dict(other.lmq_sources))
        return RuleInputs(
            self.tagged_index_records + other.tagged_index_records,
            self.batch_cq_records + other.batch_cq_records,
            tuple(sorted(sources.items())),
            self.lmq_unprefixed_names + other.lmq_unprefixed_names,
            self.lmq_path_names + other.lmq_path_names,
            self.index_records + other.index_records,
            self.split_pair_records + other.split_pair_records,
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RuleInputs:  # a JSON object
        sources = tuple((str(t), int(n)) for t, n in d.get("lmq_sources") or ())
        return cls(**{**d, "lmq_sources": sources})


def differences(a: RuleSet, b: RuleSet, inputs: RuleInputs) -> list[str]:
    """Why rule sets ``a`` and ``b`` write different files for a store with ``inputs``."""
    out = []
    later = version_text(max(a.first, b.first))
    since = f"from {later} on"
    if a.index_tag_keys != b.index_tag_keys and inputs.tagged_index_records:
        out.append(f"{inputs.tagged_index_records:,} tagged message(s) get a topic#T#<TAGS> IndexFile key {since}")
    if a.hash_slot_every_put != b.hash_slot_every_put and inputs.index_records:
        out.append(f"the IndexFile header's hashSlotCount counts occupied slots, not every put, {since}")
    if a.properties_split_pairs != b.properties_split_pairs and inputs.split_pair_records:
        n = inputs.split_pair_records
        out.append(f"{n:,} record(s) hold a property whose value has 0x01 (a pair split in three: none before {later})")
    if a.batch_cq != b.batch_cq and inputs.batch_cq_records:
        out.append(f"{inputs.batch_cq_records:,} record(s) of BatchCQ topics go to batchconsumequeue/ {since}")
    moved = [t for t, _ in inputs.lmq_sources if a.lmq_source_allowed(t) != b.lmq_source_allowed(t)]
    if moved:
        by = a.name if a.lmq_source_allowed(moved[0]) else b.name
        out.append(f"LMQ copies of {', '.join(moved)} records are dispatched by rule set {by} only")
    sources = any(a.lmq_source_allowed(t) or b.lmq_source_allowed(t) for t, _ in inputs.lmq_sources)
    if sources and a.lmq_names_need_prefix != b.lmq_names_need_prefix and inputs.lmq_unprefixed_names:
        out.append(f"{inputs.lmq_unprefixed_names:,} LMQ name(s) without %LMQ% are skipped {since}")
    if sources and a.lmq_skip_path_names != b.lmq_skip_path_names and inputs.lmq_path_names:
        out.append(f"{inputs.lmq_path_names:,} LMQ name(s) holding '/' are skipped {since}")
    return out


def lmq_writers(found: Releases, inputs: RuleInputs) -> tuple[tuple[RuleSet, ...], str]:
    """The rows of the releases in ``found`` whose appends give LMQ offsets to every source topic whose records
    hold them in this store (a release that gives a source none cannot have written its offsets), and why."""
    sources = [t for t, _ in inputs.lmq_sources]
    writers = tuple(r for r in found.candidates if all(r.lmq_offsets_given(t) for t in sources))
    if len(writers) == len(found.candidates):
        return writers, ""
    names = ", ".join(r.name for r in writers) or "no rule set"
    return writers, f"LMQ offsets on records of {', '.join(sources)}: appended under rule sets {names} only"


@dataclasses.dataclass(frozen=True)
class BrokerRules:
    """The rules a run uses, and why: given (``--broker-version``) or detected from the store's clues.

    Detected rules are ``settled`` once no two rule sets the clues allow write different files for this store
    (``settle``, after the parse has counted the records that tell them apart); until then the parse uses the
    oldest verified one of them.
    """

    rules: RuleSet
    source: str  # "--broker-version" or "detected"
    why: str
    releases: Releases | None = None  # detected: the releases the clues allow
    settled: bool = True
    version: str = ""  # the given release
    #: a store several releases wrote: the rules of each stretch before the last (its first record's offset,
    #: rules); these rules are the last stretch's, from ``start``
    earlier: tuple[tuple[int, BrokerRules], ...] = ()
    start: int = 0

    @property
    def candidates(self) -> tuple[RuleSet, ...]:
        return self.releases.candidates if self.releases else (self.rules,)

    def settle(self, inputs: RuleInputs) -> BrokerRules:
        """These rules, once shown to write the same files as every rule set that could have written the store
        (the releases allowed, less those whose appends give no LMQ offsets to the store's multi-dispatched
        source topics); else AmbiguousRelease, naming what differs and the releases to choose from. Rules no
        broker verified are never the ones that write (AmbiguousRelease when only they are left)."""
        if self.settled:
            return self
        assert self.releases is not None
        writers, because = lmq_writers(self.releases, inputs)
        if not writers:
            raise ConfigError(f"the store's records contradict its clues ({self.why}; {because}): give the release")
        rules = self.rules
        chain = [rules, *(r for r in writers if r is not rules)]  # each difference said once, where it changes
        diffs = list(dict.fromkeys(d for a, b in itertools.pairwise(chain) for d in differences(a, b, inputs)))
        classes: list[RuleSet] = []  # one row of each set of writers that write the same files
        for r in writers:
            if all(differences(c, r, inputs) for c in classes):
                classes.append(r)
        choices = [version_text(self.releases.lowest_of(r)) or "" for r in classes]
        if diffs:
            raise AmbiguousRelease(
                f"the store cannot tell which broker release wrote it: its clues allow {self.releases.text} "
                f"({self.why}{'; ' + because if because else ''}), and those releases write different files for "
                f"this store: {'; '.join(diffs)}. Nothing was written: give the release with --broker-version",
                choices,
            )
        if not rules.verified:
            raise AmbiguousRelease(
                f"the store's clues allow {self.releases.text} ({self.why}) only, whose rule sets "
                f"{', '.join(r.name for r in writers)} no real broker verified. Nothing was written: give the "
                "release with --broker-version to use them",
                choices,
            )
        why = self.why + (f"; {because}" if because else "")
        why += f"; rule sets {', '.join(r.name for r in writers)} write the same files for this store"
        return dataclasses.replace(self, settled=True, why=why)

    @property
    def lowest_release(self) -> str:
        """The oldest release these rules stand for: of the rule set, within the releases the clues allow."""
        low = self.releases.lowest_of(self.rules) if self.releases else self.rules.first
        return version_text(low) or ""

    @property
    def settled_all(self) -> bool:
        return self.settled and all(r.settled for _, r in self.earlier)

    @property
    def line(self) -> str:
        """The one console line: which rules, why, and which broker verified them (per stretch of an upgraded
        store: "from offset N:")."""
        out = [f"from commitlog offset {start:,}: {r.own_line}" for start, r in self.earlier]
        own = self.own_line
        return "; ".join([*out, f"from commitlog offset {self.start:,}: {own}"]) if out else own

    @property
    def own_line(self) -> str:
        source = f"detected, releases {self.releases.text}" if self.releases else self.source
        aside = self.releases.set_aside if self.releases else ()
        why = self.why + "".join(f"; set aside: {c.text}, a weak clue ({c.weak})" for c in aside)
        return f"broker rules {self.rules.name} ({source}; {self.rules.verified_text}): {why}"

    @property
    def stretches(self) -> tuple[tuple[int, str], ...]:
        """BrokerConfig.releaseStretches of these rules: each later stretch's start and the release its parse uses."""
        return (
            tuple((start, r.lowest_release) for start, r in [*self.earlier[1:], (self.start, self)])
            if self.earlier
            else ()
        )

    def to_dict(self) -> dict[str, object]:
        return {
            **self.rules.to_dict(),
            "source": self.source,
            "why": self.why,
            "version": self.version or None,
            "releases": self.releases.text if self.releases else None,
            "clues": [c.to_dict() for c in self.releases.clues] if self.releases else [],
            "set_aside": [c.to_dict() for c in self.releases.set_aside] if self.releases else [],
            "stretches": [{"start": start, **r.to_dict()} for start, r in self.earlier]
            + ([{"start": self.start, "name": self.rules.name}] if self.earlier else []),
        }


def _against_clues(version: Version, facts: StoreFacts) -> str:
    """A warning when a given release lies outside the releases the store's clues allow, else ""."""
    try:
        found = releases(facts)
    except ConfigError:
        return ""
    if found.holds(version):
        return ""
    return f" (WARNING: the store's clues allow {found.text}: {'; '.join(c.text for c in found.clues)})"


def given_releases(version: str) -> Releases:
    """The releases a ``--broker-version`` names: one release (``5.3.3``) or a whole line (``4.9``: 4.9.0 up to
    4.10.0)."""
    v = parse_version(version)
    rules_for(v)
    line = version.strip().count(".") == 1
    return Releases.between(v, (v[0], v[1] + 1, 0) if line else (v[0], v[1], v[2] + 1))


def select(version: str, facts: StoreFacts) -> BrokerRules:
    """The rules to use: a given ``--broker-version`` wins over detection from the store (a line, ``4.9``, is
    narrowed by the clues and settled like detection when its releases' rows differ). Detected rules are the
    oldest verified rule set the clues allow, settled at once when the clues allow only one."""
    if version:
        why = f"--broker-version {version}" + _against_clues(parse_version(version), facts)
        given = given_releases(version)
        if len(given.candidates) == 1:
            return BrokerRules(rules_for(version), "--broker-version", why, version=version)
        try:
            narrowed = intersect(given.spans, releases(facts).spans) or given.spans
        except ConfigError:
            narrowed = given.spans
        return _unsettled(Releases(narrowed), facts, "--broker-version", why, version)
    found = releases(facts)
    why = "; ".join(c.text for c in found.clues if c not in found.set_aside) or "no clue in the store"
    return _unsettled(found, facts, "detected", why, "")


def select_stretches(version: str, facts: StoreFacts, stretches: tuple[Stretch, ...]) -> BrokerRules:
    """``select`` for a store several releases wrote in turn (``stretches``, oldest first): the last stretch's rules
    from every clue (config/ files that only an older release may have left are weak: the upgrade may not have
    rewritten them) or from ``--broker-version``, each earlier stretch's from its own records."""
    if len(stretches) < 2:
        return select(version, facts)
    last = select(version, dataclasses.replace(facts, upgraded=True))
    later = given_releases(version) if last.releases is None else last.releases  # given: the last stretch's
    earlier = []
    for stretch in reversed(stretches[:-1]):
        found = earlier_releases(stretch, later)
        lmq = StoreFacts(lmq_sources=stretch.lmq_sources)
        earlier.append((stretch.start, _unsettled(found, lmq, "detected", stretch.clue.text, "")))
        later = found
    return dataclasses.replace(last, earlier=tuple(reversed(earlier)), start=stretches[-1].start)


def _unsettled(found: Releases, facts: StoreFacts, source: str, why: str, version: str) -> BrokerRules:
    """The rules the parse uses: the oldest verified row whose appends give LMQ offsets to the source topics of
    the sampled records that hold them (no other row can have written them), settled when it is the only row."""
    cands = found.candidates
    writers = [r for r in cands if all(r.lmq_offsets_given(t) for t in facts.lmq_sources)] or list(cands)
    rules = ([r for r in writers if r.verified] or writers)[0]
    settled = len(cands) == 1 and rules.verified
    return BrokerRules(rules, source, why, found, settled=settled, version=version)
