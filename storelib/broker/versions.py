"""What differs between broker versions, as data: one rule set per range of releases, and how to tell the
range from a store's own bytes.

Rule sets (first release of each row; a version uses the last row at or below it):

- 4.9: index keys ``topic#UNIQ_KEY``, ``topic#<KEYS token>``; LMQ: every INNER_MULTI_DISPATCH name gets an
  offset and no source topic is excluded (the SCHEDULE_TOPIC_XXXX copy of a delayed LMQ message is dispatched
  to the LMQ queues too); no BatchConsumeQueue.
- 5.0: BatchConsumeQueue for ``queue.type=BatchCQ`` topics; LMQ offsets only for ``%LMQ%`` names.
- 5.1.1: LMQ skips ``%RETRY%*`` source topics. 5.1.2: also rmq_sys_wheel_timer and SCHEDULE_TOPIC_XXXX, and
  names holding a path separator.
- 5.2: LMQ skips every ``rmq_sys_*`` source topic; properties end with 0x02; optional ``__CRC32#``.
- 5.5: a third index key ``topic#T#<TAGS>`` after the KEYS tokens.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re

import numpy as np

from storelib.errors import AmbiguousRelease, ConfigError
from storelib.formats.commitlog import MESSAGE_MAGIC_CODE_V2, RecordBatch
from storelib.formats.rocksdbcq import ROCKSDB_FILE, is_rocksdb

CRC32_NAME = b"__CRC32#"
CRC32_PIECE = 20  # CommitLog.CRC32_RESERVED_LEN: __CRC32# 0x01, ten digits least significant first, 0x02
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?\Z")


@dataclasses.dataclass(frozen=True)
class RuleSet:
    """The dispatch rules of a range of broker releases (``first`` = its first release)."""

    name: str
    first: tuple[int, int, int]
    index_tag_keys: bool  # IndexService.buildIndex puts topic#T#<TAGS> (5.5.0+)
    lmq_names_need_prefix: bool  # only %LMQ% names get an INNER_MULTI_QUEUE_OFFSET (5.0.0+)
    lmq_skip_source_prefixes: tuple[str, ...]  # source topics never multi-dispatched (MultiDispatchUtils)
    lmq_skip_source_topics: tuple[str, ...]
    lmq_skip_path_names: bool  # a name holding File.separator is skipped (5.1.2+)
    batch_cq: bool  # queue.type=BatchCQ topics go to batchconsumequeue/ (5.0.0+)
    schedule_tagscode_quirk: bool  # crash recovery may write the TAGS hash into SCHEDULE_TOPIC_XXXX (4.9.x)

    def lmq_source_allowed(self, topic: str) -> bool:
        """Whether records of ``topic`` are multi-dispatched to LMQ queues at all."""
        return topic not in self.lmq_skip_source_topics and not topic.startswith(self.lmq_skip_source_prefixes)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "first_release": version_text(self.first)}


_TIMER, _SCHEDULE = "rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX"
#: what each release range changes from the one before it
_CHANGES: tuple[tuple[str, tuple[int, int, int], dict[str, object]], ...] = (
    ("5.0", (5, 0, 0), {"lmq_names_need_prefix": True, "batch_cq": True, "schedule_tagscode_quirk": False}),
    ("5.1.1", (5, 1, 1), {"lmq_skip_source_prefixes": ("%RETRY%",)}),
    ("5.1.2", (5, 1, 2), {"lmq_skip_source_topics": (_TIMER, _SCHEDULE), "lmq_skip_path_names": True}),
    ("5.2", (5, 2, 0), {"lmq_skip_source_prefixes": ("%RETRY%", "rmq_sys_"), "lmq_skip_source_topics": (_SCHEDULE,)}),
    ("5.5", (5, 5, 0), {"index_tag_keys": True}),
)


def _rule_sets() -> tuple[RuleSet, ...]:
    rows = [RuleSet("4.9", (4, 9, 0), False, False, (), (), False, False, True)]
    for name, first, changes in _CHANGES:
        rows.append(dataclasses.replace(rows[-1], name=name, first=first, **changes))  # type: ignore[arg-type]
    return tuple(rows)


RULE_SETS = _rule_sets()


def parse_version(text: str) -> tuple[int, int, int]:
    """``4.9``, ``5.3.3``, ``5.5.0`` -> (major, minor, patch); a missing patch is 0."""
    m = _VERSION.match(text.strip())
    if not m:
        raise ConfigError(f"broker version {text!r}: expected MAJOR.MINOR or MAJOR.MINOR.PATCH, e.g. 5.5 or 4.9.8")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def version_text(v: tuple[int, int, int] | None) -> str | None:
    """(5, 5, 0) -> "5.5.0"."""
    return ".".join(map(str, v)) if v else None


def rules_for(version: str | tuple[int, int, int]) -> RuleSet:
    """The rule set of a broker release; releases before 4.9 or from 6.0 on are refused (not covered)."""
    v = parse_version(version) if isinstance(version, str) else version
    if not (4, 9, 0) <= v < (6, 0, 0):
        raise ConfigError(f"broker version {'.'.join(map(str, v))} is not supported (4.9.x and 5.x are)")
    return [r for r in RULE_SETS if r.first <= v][-1]


# --- detection -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Clue:
    """One fact read off a store and the release range it implies (``at_least``/``below``, None = open)."""

    clue: str
    detail: str
    at_least: tuple[int, int, int] | None = None
    below: tuple[int, int, int] | None = None

    @property
    def text(self) -> str:
        """The detail and the release range it implies, e.g. "... (5.2.0+)" or "... (before 5.5.0)"."""
        bound = f"{version_text(self.at_least)}+" if self.at_least else f"before {version_text(self.below)}"
        return f"{self.detail} ({bound})"

    def to_dict(self) -> dict[str, object]:
        return {
            "clue": self.clue,
            "detail": self.text,
            "at_least": version_text(self.at_least),
            "below": version_text(self.below),
        }


@dataclasses.dataclass(frozen=True)
class StoreFacts:
    """What detection reads: store-root entries, consumequeue/ entries, the checkpoint, sampled records."""

    root_entries: frozenset[str] = frozenset()
    consumequeue_entries: frozenset[str] = frozenset()  # of consumequeue/ and consumequeue_rocksdb/
    checkpoint: bytes = b""
    v2_records: int = 0  # sampled records with MESSAGE_MAGIC_CODE_V2
    props_records: int = 0  # sampled records with a non-empty properties string
    props_ending_02: int = 0  # ... of which end with 0x02
    crc_property_records: int = 0  # sampled records holding __CRC32#
    tag_keys_found: int | None = None  # sampled tagged records whose topic#T#tags chain leads to them
    tag_keys_checked: int = 0  # sampled tagged records inside a live IndexFile whose UNIQ_KEY was found
    repeated_name_records: int = 0  # sampled records whose properties hold a name twice (repeated_names)
    config_entries: frozenset[str] = frozenset()  # names in config/
    config_keys: frozenset[str] = frozenset()  # config_keys() of the CONFIG_JSON files in config/


def record_clues(b: RecordBatch, counts: dict[str, int]) -> dict[str, int]:
    """``counts`` (StoreFacts record fields) plus a batch of sampled records: V2 magic, properties ending in
    0x02, a ``__CRC32#`` piece as the last 20 bytes, and a property name held twice."""
    record_start = b.props_start + b.props_len - b.total_size
    magic = b.buf[record_start[:, None] + np.arange(4, 8)].view(">i4").ravel()
    props_end = b.props_start + b.props_len
    has_props = b.props_len > 0
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
    out = [Clue(c, f"the store root holds {e}", at_least=v) for c, e, v in _ROOT_ENTRIES if e in f.root_entries]
    out += [Clue(f"config/{e}", f"config/ holds {e}", at_least=v) for e, v in _CONFIG_ENTRIES if e in f.config_entries]
    for key, since in _CONFIG_KEYS:
        if key in f.config_keys:
            name, path = key.split(":")
            out.append(Clue(f"config {path}", f"config/{name} holds {path}", at_least=since))
    return out + _schema_clues(f.config_keys)


def _schema_clues(keys: frozenset[str]) -> list[Clue]:
    """A _CONFIG_SCHEMAS file with its newer key: that release or later; without it: an older release."""
    out = []
    for name, every, newer, since in _CONFIG_SCHEMAS:
        if f"{name}:{every}" in keys:
            has = f"{name}:{newer}" in keys
            text = f"config/{name} {'holds' if has else 'has no'} {newer}"
            out.append(Clue(f"config {newer}", text, at_least=since if has else None, below=None if has else since))
    return out


def clues(f: StoreFacts) -> list[Clue]:
    """Every clue the facts hold, in a fixed order."""
    out = file_clues(f)
    v50, v511, v52, v55 = (5, 0, 0), (5, 1, 1), (5, 2, 0), (5, 5, 0)
    rocks = sorted(e for e in f.consumequeue_entries if ROCKSDB_FILE.match(e))
    if is_rocksdb(f.consumequeue_entries):
        out.append(Clue("rocksdb-consumequeue", f"RocksDB files hold the ConsumeQueue ({', '.join(rocks[:3])})", v52))
    cp = f.checkpoint.ljust(48, b"\0")
    for at, name, since in (
        (24, "masterFlushedOffset", v50),
        (32, "confirmPhyOffset", v511),
        (40, "logicsPhysicalOffset", v55),
    ):
        if any(cp[at : at + 8]):
            out.append(Clue(f"checkpoint {name}", f"checkpoint {name} (bytes {at}..{at + 7}) is set", at_least=since))
    if f.v2_records:
        out.append(Clue("v2 magic", f"{f.v2_records} sampled record(s) use MESSAGE_MAGIC_CODE_V2", (5, 1, 0)))
    props = f"{f.props_records} sampled property strings end with 0x02"
    if f.props_records and f.props_ending_02 == f.props_records:
        out.append(Clue("properties end 0x02", f"all {props}", at_least=v52))
    elif f.props_records and f.props_ending_02 == 0:
        out.append(Clue("properties end 0x02", f"none of {props}", below=v52))
    if f.repeated_name_records:
        text = f"{f.repeated_name_records} sampled record(s) hold a property name twice (batch properties appended)"
        out.append(Clue("repeated property", text, below=(5, 4, 0)))
    if f.crc_property_records:
        out.append(Clue("__CRC32#", f"{f.crc_property_records} sampled record(s) hold __CRC32#", at_least=v52))
    if f.tag_keys_checked:
        found, n = f.tag_keys_found or 0, f.tag_keys_checked
        if found == n:
            out.append(Clue("index tag keys", f"topic#T#<TAGS> leads to all {n} sampled tagged messages", v55))
        elif found == 0:
            out.append(
                Clue("index tag keys", f"topic#T#<TAGS> leads to none of {n} sampled tagged messages", below=v55)
            )
    return out


@dataclasses.dataclass(frozen=True)
class Releases:
    """The broker releases a store's clues allow: ``low`` up to (not including) ``high``, None = up to 6.0."""

    low: tuple[int, int, int]
    high: tuple[int, int, int] | None
    clues: tuple[Clue, ...] = ()

    @property
    def candidates(self) -> tuple[RuleSet, ...]:
        """The rule sets of the releases in the range, oldest first."""
        return tuple(RULE_SETS[k] for k in self.rows_meeting([r.first for r in RULE_SETS]))

    def rows_meeting(self, firsts: list[tuple[int, int, int]]) -> list[int]:
        """Of a table of rows by first release (each row holds until the next one's), those that hold for some
        release in the range."""
        ends = [*firsts[1:], _END]
        return [k for k, (first, end) in enumerate(zip(firsts, ends)) if first < (self.high or _END) and end > self.low]

    @property
    def text(self) -> str:
        """``5.2.0 up to 5.5.0`` or ``5.2.0 or later``."""
        low = version_text(self.low)
        return f"{low} or later" if self.high is None else f"{low} up to (not including) {version_text(self.high)}"


_END = (6, 0, 0)


def releases(f: StoreFacts) -> Releases:
    """The release range every clue allows (no clue: every supported release); clues that contradict each other
    (a lower bound at or above an upper bound) are refused: give ``--broker-version``."""
    found = tuple(clues(f))
    low = max((c.at_least for c in found if c.at_least), default=(4, 9, 0))
    high = min((c.below for c in found if c.below), default=None)
    if high is not None and low >= high:
        raise ConfigError(
            "the store's clues contradict each other (" + "; ".join(c.text for c in found) + "): give --broker-version"
        )
    return Releases(low, high, found)


# --- which rules matter for a store ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RuleInputs:
    """A store's records that the rule sets of different releases dispatch differently (counted by the parse)."""

    tagged_index_records: int = 0  # records put into the IndexFile that hold TAGS (5.5.0 adds topic#T#<TAGS>)
    batch_cq_records: int = 0  # ConsumeQueue records of queue.type=BatchCQ topics (5.0.0+: batchconsumequeue/)
    lmq_sources: tuple[tuple[str, int], ...] = ()  # (source topic, records) with both INNER_MULTI_* properties
    lmq_unprefixed_names: int = 0  # INNER_MULTI_DISPATCH names without %LMQ% (5.0.0+ skip them)
    lmq_path_names: int = 0  # names holding "/" (5.1.2+ skip them)

    def __add__(self, other: RuleInputs) -> RuleInputs:
        sources = collections.Counter(dict(self.lmq_sources))
        sources.update(dict(other.lmq_sources))
        return RuleInputs(
            self.tagged_index_records + other.tagged_index_records,
            self.batch_cq_records + other.batch_cq_records,
            tuple(sorted(sources.items())),
            self.lmq_unprefixed_names + other.lmq_unprefixed_names,
            self.lmq_path_names + other.lmq_path_names,
        )

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> RuleInputs:
        sources = tuple((str(t), int(n)) for t, n in d.get("lmq_sources") or ())  # type: ignore[attr-defined]
        return cls(**{**d, "lmq_sources": sources})  # type: ignore[arg-type]


def differences(a: RuleSet, b: RuleSet, inputs: RuleInputs) -> list[str]:
    """Why rule sets ``a`` and ``b`` (the next one) write different files for a store with ``inputs``."""
    out = []
    since = f"from {version_text(b.first)} on"
    if a.index_tag_keys != b.index_tag_keys and inputs.tagged_index_records:
        out.append(f"{inputs.tagged_index_records:,} tagged message(s) get a topic#T#<TAGS> IndexFile key {since}")
    if a.batch_cq != b.batch_cq and inputs.batch_cq_records:
        out.append(f"{inputs.batch_cq_records:,} record(s) of BatchCQ topics go to batchconsumequeue/ {since}")
    moved = [t for t, _ in inputs.lmq_sources if a.lmq_source_allowed(t) != b.lmq_source_allowed(t)]
    if moved:
        out.append(f"LMQ copies of {', '.join(moved)} records are dispatched before {version_text(b.first)}, not after")
    sources = any(a.lmq_source_allowed(t) or b.lmq_source_allowed(t) for t, _ in inputs.lmq_sources)
    if sources and a.lmq_names_need_prefix != b.lmq_names_need_prefix and inputs.lmq_unprefixed_names:
        out.append(f"{inputs.lmq_unprefixed_names:,} LMQ name(s) without %LMQ% are skipped {since}")
    if sources and a.lmq_skip_path_names != b.lmq_skip_path_names and inputs.lmq_path_names:
        out.append(f"{inputs.lmq_path_names:,} LMQ name(s) holding '/' are skipped {since}")
    return out


#: the source topics whose records a release's CommitLog append gives no INNER_MULTI_QUEUE_OFFSET, by first release
#: (prefixes, exact names): 4.9.7 MultiDispatch.isMultiDispatchMsg and 5.0.0/5.1.0 ConsumeQueue.assignQueueOffset skip
#: none; 5.1.1 and 5.1.3/5.1.4 assignQueueOffset call isNeedHandleMultiDispatch (5.1.2's store jar is not on Maven
#: Central: its change is the dispatch rule's, 5.1.2 in the 5.x spec); 5.2.0 and 5.3.0 CommitLog.isMultiDispatchMsg
#: skip %RETRY% only; 5.3.1 MultiDispatchUtils.isNeedHandleMultiDispatch; 5.3.2 … 5.4.0 MixAll.topicAllowsLMQ,
#: which 5.5.0 extends by %DLQ%.
LMQ_OFFSET_SKIPS: tuple[tuple[tuple[int, int, int], tuple[str, ...], tuple[str, ...]], ...] = (
    ((4, 9, 0), (), ()),
    ((5, 1, 1), ("%RETRY%",), ()),
    ((5, 1, 2), ("%RETRY%",), (_TIMER, _SCHEDULE)),
    ((5, 2, 0), ("%RETRY%",), ()),
    ((5, 3, 1), ("%RETRY%", "rmq_sys_"), (_SCHEDULE,)),
    ((5, 5, 0), ("%RETRY%", "%DLQ%", "rmq_sys_"), (_SCHEDULE,)),
)


def lmq_writers(found: Releases, inputs: RuleInputs) -> tuple[tuple[RuleSet, ...], str]:
    """The rule sets of the releases in ``found`` whose appends give LMQ offsets to every source topic whose
    records hold them in this store (a release that skips a source cannot have written its offsets), and why."""
    sources = [t for t, _ in inputs.lmq_sources]
    ends = [first for first, _, _ in LMQ_OFFSET_SKIPS[1:]] + [_END]
    spans = [
        (max(first, found.low), min(end, found.high or _END))
        for (first, prefixes, names), end in zip(LMQ_OFFSET_SKIPS, ends)
        if not any(t.startswith(prefixes) or t in names for t in sources)
    ]
    spans = _merged([(lo, hi) for lo, hi in spans if lo < hi])
    writers = tuple(r for r in found.candidates if any(r in Releases(lo, hi).candidates for lo, hi in spans))
    if len(writers) == len(found.candidates):
        return writers, ""
    skipped = [t for t in sources if any(t.startswith(p) or t in n for _, p, n in LMQ_OFFSET_SKIPS)]
    ranges = ", ".join(f"{version_text(lo)} up to {version_text(hi)}" for lo, hi in spans) or "no release"
    return writers, f"LMQ offsets on records of {', '.join(skipped)}: appended by {ranges} only"


def _merged(spans: list[tuple[tuple[int, int, int], tuple[int, int, int]]]) -> list[tuple[tuple, tuple]]:
    """Release ranges in order, those that touch joined into one."""
    out: list[tuple[tuple, tuple]] = []
    for lo, hi in spans:
        if out and out[-1][1] == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


@dataclasses.dataclass(frozen=True)
class BrokerRules:
    """The rules a run uses, and why: given (``--broker-version``) or detected from the store's clues.

    Detected rules are ``settled`` once no two rule sets the clues allow write different files for this store
    (``settle``, after the parse has counted the records that tell them apart); until then the parse uses the
    oldest of them.
    """

    rules: RuleSet
    source: str  # "--broker-version" or "detected"
    why: str
    releases: Releases | None = None  # detected: the range the clues allow
    settled: bool = True
    version: str = ""  # the given release

    @property
    def candidates(self) -> tuple[RuleSet, ...]:
        return self.releases.candidates if self.releases else (self.rules,)

    def settle(self, inputs: RuleInputs) -> BrokerRules:
        """These rules, once shown to write the same files as every rule set that could have written the store
        (the clues' range, less the releases whose appends give no LMQ offsets to the store's multi-dispatched
        source topics); else AmbiguousRelease, naming what differs and the releases to choose from."""
        if self.settled:
            return self
        assert self.releases is not None
        writers, because = lmq_writers(self.releases, inputs)
        if not writers:
            raise ConfigError(f"the store's records contradict its clues ({self.why}; {because}): give the release")
        diffs = list(dict.fromkeys(d for r in writers for d in differences(self.rules, r, inputs)))
        if diffs:
            raise AmbiguousRelease(
                f"the store cannot tell which broker release wrote it: its clues allow {self.releases.text} "
                f"({self.why}{'; ' + because if because else ''}), and those releases write different files for "
                f"this store: {'; '.join(diffs)}. Nothing was written: give the release with --broker-version",
                [version_text(max(r.first, self.releases.low)) or "" for r in writers],
            )
        why = self.why + (f"; {because}" if because else "")
        why += f"; rule sets {', '.join(r.name for r in writers)} write the same files for this store"
        return dataclasses.replace(self, settled=True, why=why)

    @property
    def lowest_release(self) -> str:
        """The oldest release these rules stand for: of the rule set, within the range the clues allow."""
        low = max(self.rules.first, self.releases.low) if self.releases else self.rules.first
        return version_text(low) or ""

    @property
    def line(self) -> str:
        """The one console line: which rules, and why."""
        source = f"detected, releases {self.releases.text}" if self.releases else self.source
        return f"broker rules {self.rules.name} ({source}): {self.why}"

    def to_dict(self) -> dict[str, object]:
        return {
            **self.rules.to_dict(),
            "source": self.source,
            "why": self.why,
            "version": self.version or None,
            "releases": self.releases.text if self.releases else None,
            "clues": [c.to_dict() for c in self.releases.clues] if self.releases else [],
        }


def _against_clues(version: tuple[int, int, int], facts: StoreFacts) -> str:
    """A warning when a given release lies outside the range the store's clues allow, else ""."""
    try:
        found = releases(facts)
    except ConfigError:
        return ""
    if found.low <= version < (found.high or _END):
        return ""
    return f" (WARNING: the store's clues allow {found.text}: {'; '.join(c.text for c in found.clues)})"


def select(version: str, facts: StoreFacts) -> BrokerRules:
    """The rules to use: a given ``--broker-version`` wins over detection from the store. Detected rules are
    the oldest rule set the clues allow, settled at once when the clues allow only one."""
    if version:
        why = f"--broker-version {version}" + _against_clues(parse_version(version), facts)
        return BrokerRules(rules_for(version), "--broker-version", why, version=version)
    found = releases(facts)
    cands = found.candidates
    why = "; ".join(c.text for c in found.clues) or "no 5.x clue in the store"
    return BrokerRules(cands[0], "detected", why, found, settled=len(cands) == 1)
