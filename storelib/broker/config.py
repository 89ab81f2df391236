"""The broker's own properties file (``broker.conf``): the settings that shape store files.

Java ``Properties`` syntax: ``key=value`` or ``key: value``, ``#``/``!`` comments,
backslash line continuations. Settings the file does not set take the 4.9.x defaults (the 5.x ones agree).
Topic attributes (``queue.type=BatchCQ``) come from the store's ``config/topics.json``.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import javaproperties
import numpy as np

from storelib.broker.versions import DEFAULT_RELEASE, RuleSet, rules_for
from storelib.constants import INT32_MAX, LMQ_PREFIX
from storelib.errors import ConfigError
from storelib.formats.batchcq import BCQ_STORE_UNIT_SIZE
from storelib.formats.consumequeue import CQ_STORE_UNIT_SIZE
from storelib.formats.indexfile import IndexLayout

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_TIME_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: a broker.conf is a few KB; more than this is not one (and /dev/zero never ends)
MAX_CONFIG_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class BrokerConfig:
    """Store settings, named as in ``MessageStoreConfig``."""

    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024
    mappedFileSizeConsumeQueue: int = 300_000 * CQ_STORE_UNIT_SIZE
    maxHashSlotNum: int = 5_000_000
    maxIndexNum: int = 5_000_000 * 4
    messageIndexEnable: bool = True
    enableConsumeQueueExt: bool = False
    checkCRCOnRecover: bool = True
    messageIndexSafe: bool = False  # crash recovery also waits for the checkpoint's indexMsgTimestamp
    commitLogRecoverMaxNum: int = 10  # 5.5.0: recovery looks back at most this many segments (<= 0: 10)
    forceVerifyPropCRC: bool = False  # 5.2+: recovery checks __CRC32# instead of BODYCRC
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    #: hashSlotCount rule: "occupied" (current brokers) or "every-put" (very old brokers)
    hashSlotCountRule: str = "occupied"
    enableMultiDispatch: bool = False
    enableLmq: bool = False
    rocksdbCQDoubleWriteEnable: bool = False
    combineCQUseRocksdbForLmq: bool = False  # with the above, 5.5.0 writes no LMQ units into file queues
    mapperFileSizeBatchConsumeQueue: int = 300_000 * BCQ_STORE_UNIT_SIZE
    mappedFileSizeTimerLog: int = 104_857_600  # 5.x timerlog/ files
    timerPrecisionMs: int = 1000  # 5.x: the time a timer wheel slot spans
    appendTopicForTimerDeleteKey: bool = False  # 5.4.0+: a timer delete key is REAL_TOPIC+UNIQ_KEY, not UNIQ_KEY
    storeType: str = ""  # "" = not set: defaultRocksDB when the store's consumequeue/ holds a RocksDB, else default
    #: the log is DLedger's (dledger-<selfId>/data/): set by broker.conf or by the store's own directories
    enableDLegerCommitLog: bool = False
    #: the broker release whose rules apply (``--broker-version``); "" = not given: DEFAULT_RELEASE unless detected
    brokerVersion: str = ""
    #: topics whose ``queue.type`` is BatchCQ (config/topics.json or a batchconsumequeue/<topic> directory)
    batchCQTopics: tuple[str, ...] = ()
    #: BatchCQ topics of the RocksDB config/topics/ of a store with a RocksDB ConsumeQueue (5.2+): their records'
    #: queue offsets advance by INNER_NUM (no INNER_BASE), whatever storeType the broker now runs with
    rocksdbBatchCQTopics: tuple[str, ...] = ()
    #: a store written by several releases in turn (an in-place upgrade): (commitlog offset where a later release's
    #: records start, that release); records before the first start are brokerVersion's (detection.Stretch)
    releaseStretches: tuple[tuple[int, str], ...] = ()

    @property
    def rules(self) -> RuleSet:
        """The dispatch rules of ``brokerVersion`` (storelib.broker.versions)."""
        return rules_for(self.brokerVersion or DEFAULT_RELEASE)

    def stretch_parts(self, offsets: np.ndarray) -> list[tuple[int, int, int, BrokerConfig]]:
        """(stretch number, first, end) of each run of ``offsets`` (commitlog offsets, ascending) in one stretch of
        releaseStretches, with the config of the release that wrote it."""
        if not self.releaseStretches:
            return [(0, 0, len(offsets), self)]
        starts = np.array([start for start, _ in self.releaseStretches], np.int64)
        which = np.searchsorted(starts, offsets, side="right")
        cuts = [0, *(np.flatnonzero(np.diff(which)) + 1).tolist(), len(offsets)]
        versions = [self.brokerVersion] + [v for _, v in self.releaseStretches]
        return [
            (int(which[lo]), lo, hi, dataclasses.replace(self, brokerVersion=versions[which[lo]], releaseStretches=()))
            for lo, hi in itertools.pairwise(cuts)
            if hi > lo
        ]

    @property
    def hash_slot_every_put(self) -> bool:
        """The IndexFile header's hashSlotCount counts every put (releases before 4.7.1, or hashSlotCountRule)."""
        return self.hashSlotCountRule == "every-put" or self.rules.hash_slot_every_put

    @property
    def rocksdb_consume_queue(self) -> bool:
        return self.storeType == "defaultRocksDB"

    def is_batch_cq(self, topic: str) -> bool:
        """The topic's units go to a BatchConsumeQueue: a BatchCQ topic under 5.0+ rules, in a file store."""
        return self.rules.batch_cq and not self.rocksdb_consume_queue and topic in self.batchCQTopics

    def dense_queue_offsets(self, topic: str) -> bool:
        """Queue offsets advance by one per record, except a BatchCQ topic's in a RocksDB store, or once in one (by
        INNER_NUM), and in a DLedger store (by INNER_NUM too, while its records lack INNER_BASE: every unit says
        batchSize 1)."""
        degraded = self.rocksdb_consume_queue or self.enableDLegerCommitLog
        return not (degraded and topic in self.batchCQTopics) and topic not in self.rocksdbBatchCQTopics

    @property
    def appended_topics(self) -> tuple[str, ...]:
        """RocksDB-era BatchCQ topics a broker with storeType=default (rolled back) holds in plain ConsumeQueues (not
        BatchCQ in topics.json): their records' queue offsets step by INNER_NUM, and the file ConsumeQueue writes
        each unit at the queue's write position, so unit n of such a queue is its n-th record."""
        if self.rocksdb_consume_queue:
            return ()
        return tuple(t for t in self.rocksdbBatchCQTopics if t not in self.batchCQTopics)

    @property
    def appended_lmq(self) -> bool:
        """LMQ queues go into file ConsumeQueues at their write position: a release of the store's whose row says
        its broker's LMQ offsets may repeat or leave one out (RuleSet.lmq_at_write_position)."""
        releases = [self.brokerVersion or DEFAULT_RELEASE, *(v for _, v in self.releaseStretches)]
        return self.multi_dispatch_to_files and any(rules_for(v).lmq_at_write_position for v in releases)

    def at_write_position(self, topic: str) -> bool:
        """The queues of ``topic`` are written unit by unit at the queue's write position in dispatch (commitlog)
        order, whatever queue offset a record carries (QueueFiles ``at_write_position``): appended_topics, and
        LMQ queues under appended_lmq."""
        return topic in self.appended_topics or (topic.startswith(LMQ_PREFIX) and self.appended_lmq)

    @property
    def multi_dispatch_to_files(self) -> bool:
        """LMQ units go into file ConsumeQueues: ``enableMultiDispatch``, unless 5.5.0 keeps LMQ in RocksDB."""
        return self.enableMultiDispatch and not (self.rocksdbCQDoubleWriteEnable and self.combineCQUseRocksdbForLmq)

    @property
    def cq_file_size(self) -> int:
        """ConsumeQueue file size, rounded up to a multiple of 20 as ``ConsumeQueue`` does."""
        size = self.mappedFileSizeConsumeQueue
        return -(-size // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        """Delay of each level (level 1 first), in ms, parsed as ``ScheduleMessageService`` does."""
        return parse_delay_levels(self.messageDelayLevel)

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def parse_delay_levels(text: str) -> tuple[int, ...]:
    levels = []
    for word in text.split():
        unit = word[-1:]
        if unit not in _TIME_UNITS_MS or not word[:-1].isdigit():
            raise ConfigError(f"messageDelayLevel: cannot read level {word!r}")
        levels.append(int(word[:-1]) * _TIME_UNITS_MS[unit])
    return tuple(levels)


def parse_properties(text: str, where: str = "") -> dict[str, str]:
    """Java ``Properties.load`` (javaproperties: escapes, ``\\uXXXX`` and continuation lines included); a later
    duplicate key wins. A malformed ``\\u`` escape is a ConfigError naming ``where``, as Properties.load fails."""
    try:
        return javaproperties.loads(text)
    except javaproperties.InvalidUEscapeError as exc:
        raise ConfigError(f"{where}{': ' if where else ''}malformed \\uxxxx escape {exc.escape!r}") from None


def _coerce(field: dataclasses.Field, name: str, value: str) -> object:
    if field.type in ("int", int):
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{name}={value!r} is not an integer") from None
    if field.type in ("bool", bool):
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"{name}={value!r} is not true or false")
        return value.lower() == "true"
    return value


#: BrokerConfig fields that come from the store (config/topics.json), never from broker.conf
_FROM_STORE = ("batchCQTopics", "rocksdbBatchCQTopics", "releaseStretches")
#: the names releases before 4.5.0 read (``MessageStoreConfig.setMapedFileSizeCommitLog``, 4.3.2 and 4.4.0 jars;
#: 4.5.2 has the new ones): taken when the file does not set the new name
OLD_NAMES = {
    "mapedFileSizeCommitLog": "mappedFileSizeCommitLog",
    "mapedFileSizeConsumeQueue": "mappedFileSizeConsumeQueue",
}


def with_new_names(props: dict[str, str]) -> dict[str, str]:
    """``props`` with each OLD_NAMES setting under its new name, unless the new name is set too."""
    return {**{new: props[old] for old, new in OLD_NAMES.items() if old in props}, **props}


def broker_config_from_properties(props: dict[str, str]) -> BrokerConfig:
    """Take the settings BrokerConfig knows (the OLD_NAMES of releases before 4.5.0 too); everything else in the
    file is ignored."""
    props = with_new_names(props)
    fields = {f.name: f for f in dataclasses.fields(BrokerConfig) if f.name not in _FROM_STORE}
    kwargs: dict[str, Any] = {  # each value coerced to its field's type
        name: _coerce(fields[name], name, value) for name, value in props.items() if name in fields
    }
    cfg = BrokerConfig(**kwargs)
    validate(cfg)
    return cfg


def validate(cfg: BrokerConfig) -> None:
    """The broker's own limits: positive Java ints, and every store file within one MappedByteBuffer."""
    for name in (
        "mappedFileSizeCommitLog",
        "mappedFileSizeConsumeQueue",
        "maxHashSlotNum",
        "maxIndexNum",
        "mappedFileSizeTimerLog",
        "timerPrecisionMs",
    ):
        if not 0 < getattr(cfg, name) <= INT32_MAX:
            raise ConfigError(f"{name} must be between 1 and {INT32_MAX} (a Java int), got {getattr(cfg, name)}")
    if cfg.maxIndexNum < 2:
        raise ConfigError("maxIndexNum must be at least 2 (entry 0 of an IndexFile is never used)")
    if cfg.cq_file_size > INT32_MAX:
        raise ConfigError(f"mappedFileSizeConsumeQueue {cfg.mappedFileSizeConsumeQueue} is over {INT32_MAX} bytes")
    index_size = IndexLayout.of(cfg).size
    if index_size > INT32_MAX:
        raise ConfigError(
            f"an IndexFile of maxHashSlotNum {cfg.maxHashSlotNum} and maxIndexNum {cfg.maxIndexNum} would be "
            f"{index_size:,} bytes: the broker maps it in one buffer of at most {INT32_MAX:,} bytes"
        )
    if cfg.hashSlotCountRule not in ("occupied", "every-put"):
        raise ConfigError("hashSlotCountRule must be 'occupied' or 'every-put'")
    cfg.delay_levels_ms  # noqa: B018 - raises on an unreadable messageDelayLevel
    cfg.rules  # noqa: B018 - raises on an unreadable or unsupported brokerVersion
    if cfg.mapperFileSizeBatchConsumeQueue <= 0 or cfg.mapperFileSizeBatchConsumeQueue % BCQ_STORE_UNIT_SIZE:
        raise ConfigError("mapperFileSizeBatchConsumeQueue must be a positive multiple of the 46-byte unit")


def with_store_mode(
    cfg: BrokerConfig, rocksdb_cq: bool, file_config: bool, queue_dirs: frozenset[str] = frozenset()
) -> BrokerConfig:
    """``cfg`` with the store's ConsumeQueue mode: broker.conf's ``storeType`` and CombineConsumeQueueStore settings,
    else what the store shows.

    ``rocksdb_cq``: a RocksDB in consumequeue/ (or consumequeue_rocksdb/); ``file_config``: the broker keeps topic
    configs in config/topics.json (no RocksDB config/topics/, which a ``storeType=defaultRocksDB`` broker writes);
    ``queue_dirs``: the topic directories of consumequeue/ (file queues). A RocksDB ConsumeQueue beside file
    queues and a file config is the 5.5.0 ``rocksdbCQDoubleWriteEnable`` store (CombineConsumeQueueStore: the file
    ConsumeQueues stay the broker's primary, the RocksDB one is written beside them); its LMQ queues are in RocksDB
    only (``combineCQUseRocksdbForLmq``: MultiDispatchUtils.checkMultiDispatchQueue) when no ``%LMQ%`` directory
    is a file queue. Any other RocksDB ConsumeQueue is ``defaultRocksDB``'s, unless broker.conf says ``storeType``.
    """
    told = rocksdb_cq and file_config and bool(queue_dirs) and cfg.storeType != "defaultRocksDB"
    if not (cfg.rocksdbCQDoubleWriteEnable or told):
        return dataclasses.replace(cfg, storeType=cfg.storeType or ("defaultRocksDB" if rocksdb_cq else "default"))
    lmq_files = any(d.startswith(LMQ_PREFIX) for d in queue_dirs)
    lmq_in_rocksdb = cfg.combineCQUseRocksdbForLmq if cfg.rocksdbCQDoubleWriteEnable else not lmq_files
    return dataclasses.replace(
        cfg,
        storeType=cfg.storeType or "default",
        rocksdbCQDoubleWriteEnable=True,
        combineCQUseRocksdbForLmq=lmq_in_rocksdb,
    )


def batch_cq_topics(topics_json: str) -> tuple[str, ...]:
    """Topics of ``config/topics.json`` whose attribute ``queue.type`` is BatchCQ (TopicAttributes).

    ``topicConfigTable.<topic>.attributes = {"queue.type": "BatchCQ"}``; the default is SimpleCQ.
    """
    try:
        table = json.loads(topics_json).get("topicConfigTable") or {}
    except (ValueError, AttributeError):
        raise ConfigError("config/topics.json is not a TopicConfigSerializeWrapper JSON object") from None
    return tuple(
        sorted(t for t, c in table.items() if ((c or {}).get("attributes") or {}).get("queue.type") == "BatchCQ")
    )


def load_broker_config(path: str | Path | None) -> BrokerConfig:
    """Read a broker properties file; ``None`` gives the defaults."""
    return _broker_config(read_properties(path), path) if path is not None else BrokerConfig()


def _broker_config(props: dict[str, str], path: str | Path | None) -> BrokerConfig:
    try:
        return broker_config_from_properties(props)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}" if path is not None else str(exc)) from None


def read_properties(path: str | Path) -> dict[str, str]:
    """The properties of a broker config file: at most MAX_CONFIG_BYTES, never a device (``/dev/zero``)."""
    try:
        mode = os.stat(path).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise ConfigError(f"broker config {path} is not a regular file")
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read broker config {path}: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"broker config {path} is over {MAX_CONFIG_BYTES:,} bytes: not a properties file")
    return parse_properties(data.decode("latin-1"), f"broker config {path}")  # load(InputStream): ISO 8859-1


def segment_size_of(sizes: Iterable[int]) -> int | None:
    """The segment size the commitlog files show: the most common size, the larger on a tie (only damage makes a
    segment shorter); None without files."""
    counts = collections.Counter(sizes)
    return max(counts, key=lambda size: (counts[size], size)) if counts else None


def load_store_config(path: str | Path | None, segment_sizes: Iterable[int]) -> tuple[BrokerConfig, str | None]:
    """The broker config of a store whose commitlog segments have ``segment_sizes``, and a note on their size.

    Every segment file of a store is mappedFileSizeCommitLog bytes (preallocated). A config that does not set it
    takes it from the files (the note says so); one that sets it otherwise is kept, and the note names the
    contradiction.
    """
    props = with_new_names(read_properties(path)) if path is not None else {}
    cfg = _broker_config(props, path)
    size = segment_size_of(segment_sizes)
    if size is None or size == cfg.mappedFileSizeCommitLog:
        return cfg, None
    if "mappedFileSizeCommitLog" in props:
        return cfg, (
            f"mappedFileSizeCommitLog is {cfg.mappedFileSizeCommitLog} in {path}, but the segment files are "
            f"{size} bytes: the config contradicts the store"
        )
    cfg = dataclasses.replace(cfg, mappedFileSizeCommitLog=size)
    validate(cfg)
    where = f"in {path}" if path is not None else "(no --broker-config)"
    return cfg, f"mappedFileSizeCommitLog is not set {where}: {size} bytes, read off the segment files"
