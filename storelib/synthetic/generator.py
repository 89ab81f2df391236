"""Demo/test store generator: writes a stopped RocketMQ store the way a 4.9.8 broker would, streaming.

CommitLog: records as ``commitlog.encode_message`` writes them into preallocated segments of
``mappedFileSizeCommitLog`` bytes; "a record needs its own length plus 8 spare bytes", else a
BLANK fills the rest of the segment. PREPARED and
ROLLBACK records carry QUEUEOFFSET 0 and take no queue position; every other record takes the
next position of its queue. Properties are in Java ``HashMap`` iteration order with no trailing
separator (4.9.8).

ConsumeQueue and IndexFile: each finished segment is read back with ``SegmentScanner`` and
dispatched by ``dispatch.dispatch_batch``, as the broker's ReputMessageService does. Retention
(``deleted_head_segments``) deletes the first segments; their records are not dispatched, so
queues start with pre-blank units, as after a broker rebuilt them from the surviving segments.

Memory: one open segment, one ConsumeQueue file per queue, the pending IndexFile entries,
and a bounded set of messages awaiting a transaction resolution or a delay delivery.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import heapq
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from storelib.broker.config import BrokerConfig
from storelib.broker.dispatch import dispatch_batch
from storelib.constants import (
    END_FILE_MIN_BLANK_LENGTH,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SCHEDULE_TOPIC,
    TOPIC_V1_MAX_BYTES,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from storelib.formats.checkpoint import Checkpoint
from storelib.formats.commitlog import Message, body_crc, encode_blank, encode_message, format_properties
from storelib.formats.consumequeue import QueueFiles
from storelib.formats.indexfile import IndexFileSeries, IndexHeader
from storelib.formats.javahash import java_hash
from storelib.formats.scanner import SegmentScanner
from storelib.layout import (
    ABORT,
    CHECKPOINT,
    COMMITLOG,
    CONSUMEQUEUE,
    INDEX,
    LOCK,
    deterministic_index_names,
    offset_file_name,
    queue_dir,
)
from storelib.synthetic.spec import GenerateSummary, GeneratorSpec

PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_WAIT = "WAIT"
PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_PGROUP = "PGROUP"
PROPERTY_TENANT = "tenant"  # a user property

BROKER_VERSION = "4.9.8"  # the release whose store this generator writes


#: a topic of 150 bytes: needs the v2 record layout, and is longer than TopicValidator allows
LONG_TOPIC = "LongTopic_" + "v2" * 70

_TOPICS = ("OrderCreated", "Billing_v1", "Audit-Log", "Metrics", "Payments", "Inventory", "Shipping", "Notify")
_TAGS = ("created", "paid", "new||vip", "invoice", "refund", "cpu", "login")
_TAGS_MULTIBYTE = ("订单创建", "📦ship", "Zahlung-ü", "ação", "заказ")  # 📦 is a surrogate pair in Java
_KEYS_MULTIBYTE = ("客户-", "🧾-", "Kunde-ü-")
_TENANTS = ("acme-eu", "globex", "租户-8", "Kunde-ü")
_CLUSTER = "DefaultCluster"
_PRODUCER_GROUP = "DemoTxGroup"
_STORE_HOSTS = ("172.16.5.20:10911", "fd12:3456:789a::20:10911")
_CLIENTS = 64  # born hosts of each address family
_BODY_POOL = 1 << 20
_MAX_PENDING_PER_LEVEL = 2_000  # delay messages awaiting delivery per level; later ones stay undelivered
_TX_RESOLVE_WITHIN = 200  # a transaction is resolved within this many records
_PROGRESS_EVERY = 1 << 16  # records
_CQ_CHUNK = 1 << 16  # ConsumeQueue entries held before they go to the queues' files
_MAX_CQ_BUFFERS = 4 << 30  # one ConsumeQueue file per queue is held in memory
_SYSTEM_QUEUES = 8  # half, op and the schedule queues a workload uses


@functools.cache
def _properties_template(names: tuple[str, ...]) -> tuple[str, tuple[int, ...]]:
    """``format_properties`` of ``names`` in Java ``HashMap`` iteration order, values as ``{}`` fields.

    HashMap order: bucket ``(h ^ h >>> 16) & (cap - 1)`` of ``String.hashCode``, insertion order
    inside a bucket; a fresh map has 16 buckets and doubles when more than 3/4 full.
    Returns the template and the positions of ``names`` in that order.
    """
    cap = 16
    while len(names) > cap * 3 // 4:
        cap *= 2

    def bucket(i: int) -> int:
        h = java_hash(names[i]) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)

    order = tuple(sorted(range(len(names)), key=lambda i: (bucket(i), i)))
    fields = [(names[i].replace("{", "{{").replace("}", "}}"), "{}") for i in order]
    return format_properties(fields), order


def java_properties_string(pairs: list[tuple[str, str]]) -> str:
    """A message's properties as 4.9.8 stores them: HashMap order, ``\\x02``-joined, no trailing separator."""
    template, order = _properties_template(tuple([name for name, _ in pairs]))
    return template.format(*[pairs[i][1] for i in order])


@functools.cache
def _needs_v2(topic: str) -> bool:
    """A topic longer than 127 bytes needs the v2 record layout (2-byte topic length)."""
    return len(topic.encode("utf-8")) > TOPIC_V1_MAX_BYTES


class _Workload:
    """The message stream of a busy broker: sends, delays and their deliveries, transactions."""

    def __init__(self, spec: GeneratorSpec, cfg: BrokerConfig) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)
        self.now = spec.start_timestamp
        start = datetime.datetime.fromtimestamp(spec.start_timestamp / 1000, tz=datetime.UTC)
        self.month_start = int(start.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp() * 1000)
        self.topics = [_TOPICS[i] if i < len(_TOPICS) else f"Topic-{i}" for i in range(spec.topics)]
        self.key_prefix = {t: t[:3].lower() for t in self.topics}
        self.delays_ms = cfg.delay_levels_ms
        pool = max(_BODY_POOL, 2 * spec.body_size[1])
        self.body_pool = np.random.default_rng(spec.seed).integers(32, 127, pool, dtype=np.uint8).tobytes()
        self.clients_v4 = [self._client(i, v6=False) for i in range(_CLIENTS)]
        self.clients_v6 = [self._client(i, v6=True) for i in range(_CLIENTS)]
        self.uniq_counter = 0
        self.serial: Counter[str] = Counter()  # per key prefix
        self.records = 0
        self.by_record: list[tuple[int, int, str, Message]] = []  # heap: (due record, seq, kind, origin)
        self.by_time: list[tuple[int, int, str, Message]] = []  # heap: (due time, seq, kind, origin)
        self.pending_per_level: Counter[int] = Counter()
        self.seq = 0

    @staticmethod
    def _client(i: int, v6: bool) -> tuple[str, str]:
        """Client ``i``'s born host and MessageClientIDSetter prefix: IPv4 4 bytes, pid 2, class loader hash 4."""
        v4 = (10, 8, i // 8, i * 37 % 250 + 1)
        ip = f"2001:db8:42:{i * 2741 % 65536:x}::{i + 1:x}" if v6 else ".".join(map(str, v4))
        prefix = "".join(f"{b:02X}" for b in v4) + f"{4000 + i:04X}{0x6C922978 + i:08X}"
        return f"{ip}:{20000 + i * 613 % 40000}", prefix

    # --- drawing -----------------------------------------------------------------------

    def _chance(self, p: float) -> bool:
        return self.rng.random() < p

    def _pick(self, seq: Sequence[str]) -> str:
        return seq[int(self.rng.random() * len(seq))]

    def _store_host(self) -> str:
        return _STORE_HOSTS[self._chance(self.spec.ipv6_fraction)]

    def _uniq_key(self, prefix: str) -> str:
        """MessageClientIDSetter: prefix + 4 bytes of ms since the month began + a 2-byte counter, 32 hex."""
        self.uniq_counter += 1
        return f"{prefix}{(self.now - self.month_start) & 0xFFFFFFFF:08X}{self.uniq_counter & 0xFFFF:04X}"

    def _keys(self, topic: str) -> str:
        """1..max_keys space-separated keys; an empty key in the collection gives a double or trailing space."""
        prefix = self.key_prefix.get(topic, "k")
        self.serial[prefix] += 1
        keys = [f"{prefix}-{self.serial[prefix]}"]
        for _ in range(int(self.rng.random() * self.spec.max_keys)):
            if self._chance(self.spec.multibyte_fraction):
                keys.append(f"{self._pick(_KEYS_MULTIBYTE)}{int(self.rng.random() * 500)}")
            else:
                keys.append(f"cust-{int(self.rng.random() * 1000)}")
        if self._chance(self.spec.odd_keys_fraction):
            keys.insert(len(keys) if self._chance(0.5) else 1, "")  # trailing space, or a double one
        return " ".join(keys)

    def _body(self) -> bytes:
        lo, hi = self.spec.body_size
        n = lo + int(self.rng.random() * (hi - lo + 1))
        at = int(self.rng.random() * (len(self.body_pool) - n))
        return self.body_pool[at : at + n]

    def _send(self, topic: str, queue_id: int, extra: list[tuple[str, str]], real_topic: str = "") -> Message:
        """A client send: KEYS, UNIQ_KEY, CLUSTER, TAGS and user properties (no WAIT: the broker drops it).

        ``real_topic``: the business topic of a message stored elsewhere (delay, half message).
        """
        spec, rnd = self.spec, self.rng.random
        clients = self.clients_v6 if rnd() < spec.ipv6_fraction else self.clients_v4
        host, prefix = clients[int(rnd() * _CLIENTS)]
        pairs: list[tuple[str, str]] = []
        if rnd() < spec.keyed_fraction:
            pairs.append((PROPERTY_KEYS, self._keys(real_topic or topic)))
        if rnd() < spec.uniq_key_fraction:
            pairs.append((PROPERTY_UNIQ_KEY, self._uniq_key(prefix)))
        pairs.append((PROPERTY_CLUSTER, _CLUSTER))
        if rnd() < spec.tagged_fraction:
            tags = _TAGS_MULTIBYTE if rnd() < spec.multibyte_fraction else _TAGS
            pairs.append((PROPERTY_TAGS, tags[int(rnd() * len(tags))]))
        if rnd() < 0.05:
            pairs.append((PROPERTY_TENANT, _TENANTS[int(rnd() * len(_TENANTS))]))
        pairs.extend(extra)
        body = self._body()
        return Message(
            topic=topic,
            body=body,
            properties=java_properties_string(pairs),
            queue_id=queue_id,
            flag=int(rnd() * 8) if rnd() < 0.01 else 0,
            born_timestamp=self.now - int(rnd() * 5),
            born_host=host,
            store_host=self._store_host(),
            body_crc=body_crc(body),
            v2=_needs_v2(topic),
        )

    def _follow_up(self, origin: Message, kind: str, topic: str, queue_id: int, sys_flag: int) -> Message:
        """A record the broker writes from an earlier one: same body, properties and born fields."""
        return dataclasses.replace(
            origin,
            topic=topic,
            queue_id=queue_id,
            sys_flag=sys_flag,
            store_host=self._store_host(),
            prepared_transaction_offset=origin.physical_offset if kind != "delivered" else 0,
            v2=_needs_v2(topic),
        )

    def _op(self, half: Message) -> Message:
        """The op record of a resolved half message: tag ``d``, body = the half message's queue offset."""
        body = str(half.queue_offset).encode()
        store = self._store_host()
        return Message(
            topic=TRANS_OP_HALF_TOPIC,
            body=body,
            properties=java_properties_string([(PROPERTY_WAIT, "true"), (PROPERTY_TAGS, "d")]),
            born_timestamp=self.now,
            born_host=store,
            store_host=store,
            body_crc=body_crc(body),
        )

    def _later(self, heap: list, due: int, kind: str, origin: Message) -> None:
        self.seq += 1
        heapq.heappush(heap, (due, self.seq, kind, origin))

    # --- the stream ----------------------------------------------------------------------

    def next(self) -> tuple[str, Message]:
        """The next record to store: (kind, message). Its store timestamp is set; offsets are not."""
        self.now += int(self.rng.random() * 3)
        self.records += 1
        kind, m = self._due() or self._new()
        m.store_timestamp = self.now
        return kind, m

    def _due(self) -> tuple[str, Message] | None:
        if self.by_record and self.by_record[0][0] <= self.records:
            _, _, kind, origin = heapq.heappop(self.by_record)
        elif self.by_time and self.by_time[0][0] <= self.now:
            _, _, kind, origin = heapq.heappop(self.by_time)
            self.pending_per_level[origin.queue_id] -= 1
        else:
            return None
        props = origin.property_map()
        if kind == "commit":
            self._later(self.by_record, self.records, "op", origin)
            real_topic, real_qid = props[PROPERTY_REAL_TOPIC], int(props[PROPERTY_REAL_QID])
            return kind, self._follow_up(origin, kind, real_topic, real_qid, TRANSACTION_COMMIT_TYPE)
        if kind == "op":
            return kind, self._op(origin)
        if kind == "delivered":
            real_topic, real_qid = props[PROPERTY_REAL_TOPIC], int(props[PROPERTY_REAL_QID])
            return kind, self._follow_up(origin, kind, real_topic, real_qid, TRANSACTION_NOT_TYPE)
        sys_flag = TRANSACTION_COMMIT_TYPE if kind == "legacy-commit" else TRANSACTION_ROLLBACK_TYPE
        return kind, self._follow_up(origin, kind, origin.topic, origin.queue_id, sys_flag)

    def _new(self) -> tuple[str, Message]:
        spec = self.spec
        if spec.long_topic and self._chance(0.02):
            return "v2", self._send(LONG_TOPIC, int(self.rng.random() * spec.queues_per_topic), [])
        topic = self._pick(self.topics)
        queue_id = int(self.rng.random() * spec.queues_per_topic)
        r = self.rng.random()
        if r < spec.delay_fraction:
            return "delay", self._delay(topic, queue_id)
        r -= spec.delay_fraction
        if r < spec.transaction_fraction:
            real = [(PROPERTY_REAL_TOPIC, topic), (PROPERTY_REAL_QID, str(queue_id)), (PROPERTY_TRAN_MSG, "true")]
            extra = [*real, (PROPERTY_PGROUP, _PRODUCER_GROUP), (PROPERTY_WAIT, "true")]
            m = self._send(TRANS_HALF_TOPIC, 0, extra, real_topic=topic)
            due = self.records + 1 + int(self.rng.random() * _TX_RESOLVE_WITHIN)
            self._later(self.by_record, due, "commit" if self._chance(0.7) else "op", m)
            return "half", m
        r -= spec.transaction_fraction
        if r < spec.legacy_transaction_fraction:
            m = self._send(topic, queue_id, [(PROPERTY_TRAN_MSG, "true"), (PROPERTY_PGROUP, _PRODUCER_GROUP)])
            m.sys_flag = TRANSACTION_PREPARED_TYPE
            due = self.records + 1 + int(self.rng.random() * _TX_RESOLVE_WITHIN)
            self._later(self.by_record, due, "legacy-commit" if self._chance(0.6) else "rollback", m)
            return "prepared", m
        return "send", self._send(topic, queue_id, [])

    def _delay(self, topic: str, queue_id: int) -> Message:
        """Stored in SCHEDULE_TOPIC_XXXX, queueId = level - 1; short levels are delivered back later."""
        levels = len(self.delays_ms)
        if self._chance(0.6):  # 1s 5s 10s by default
            level = 1 + int(self.rng.random() * min(3, levels))
        else:  # 1h 2h by default
            level = max(1, levels - int(self.rng.random() * 2))
        extra = [
            (PROPERTY_REAL_TOPIC, topic),
            (PROPERTY_REAL_QID, str(queue_id)),
            (PROPERTY_DELAY, str(level)),
            (PROPERTY_WAIT, "true"),
        ]
        m = self._send(SCHEDULE_TOPIC, level - 1, extra, real_topic=topic)
        if self.pending_per_level[m.queue_id] < _MAX_PENDING_PER_LEVEL:
            self.pending_per_level[m.queue_id] += 1
            self._later(self.by_time, self.now + self.delays_ms[level - 1], "delivered", m)
        return m


class _SegmentWriter:
    """Appends records to fixed-size segments; a record needs its length + 8 spare bytes, else a BLANK rolls."""

    def __init__(self, directory: Path, segment_size: int, on_finished: Callable[[Path, int], None]) -> None:
        self.directory = directory
        self.size = segment_size
        self.on_finished = on_finished
        self.offset = 0  # the next record's physical offset
        self.start = 0  # current segment's start offset
        self.file: BinaryIO | None = None
        self.segments: list[Path] = []
        self.blanks = 0

    def place(self, length: int) -> int:
        """Physical offset a record of ``length`` bytes goes to: here, or at the start of the next segment."""
        if length + END_FILE_MIN_BLANK_LENGTH > self.size:
            raise ValueError(f"a record of {length} bytes does not fit in a {self.size}-byte commitlog segment")
        left = self.start + self.size - self.offset
        return self.offset if length + END_FILE_MIN_BLANK_LENGTH <= left else self.start + self.size

    def write(self, data: bytes, at: int) -> None:
        if at != self.offset:  # the next segment: a BLANK ends this one
            self._current().write(encode_blank(at - self.offset))
            self.blanks += 1
            self._close()
            self.start = self.offset = at
        if self.file is None:
            path = self.directory / offset_file_name(self.start)
            self.segments.append(path)
            self.file = open(path, "wb", buffering=8 << 20)  # noqa: SIM115 - kept open across calls
        self.file.write(data)
        self.offset += len(data)

    def _current(self) -> BinaryIO:
        assert self.file is not None, "no segment is open"
        return self.file

    def _close(self) -> None:
        f = self._current()
        f.truncate(self.size)  # preallocated: zero-filled after the last record
        f.close()
        self.file = None
        self.on_finished(self.segments[-1], self.start)

    def finish(self) -> None:
        if self.file is not None:
            self._close()


class _Dispatcher:
    """ReputMessageService for the generator: reads each finished segment back and writes CQ and index files.

    ConsumeQueue entries are handed to each queue's QueueFiles in chunks of up to _CQ_CHUNK entries.
    """

    def __init__(self, root: Path, cfg: BrokerConfig) -> None:
        self.root = root
        self.cfg = cfg
        self.queues: dict[tuple[str, int], QueueFiles] = {}
        self.pending: dict[tuple[str, int], list[tuple[np.ndarray, ...]]] = {}
        self.pending_entries = 0
        self.index = IndexFileSeries(cfg)
        self.index_begins: list[int] = []
        self.logics_timestamp = 0
        self.index_timestamp = 0

    def segment(self, path: Path, start: int) -> None:
        with open(path, "rb") as f:
            scanner = SegmentScanner(f, path.name, start, self.cfg.mappedFileSizeCommitLog, check_crc=False)
            for batch in scanner:
                self._batch(batch)
        assert scanner.end is not None  # set when the scan is done
        if not scanner.end.clean or scanner.damage:
            raise RuntimeError(f"generator wrote a bad segment: {scanner.end} {scanner.damage[:1]}")

    def _batch(self, batch) -> None:
        d = dispatch_batch(batch, self.cfg)
        cq = np.flatnonzero(d.to_consume_queue)
        groups: dict[tuple[str, int], list[int]] = {}
        topics, queue_ids = batch.topic, batch.queue_id.tolist()
        for i in cq.tolist():
            groups.setdefault((topics[i], queue_ids[i]), []).append(i)
        for key, rows in groups.items():
            idx = np.asarray(rows)
            entries = (batch.queue_offset[idx], batch.physical_offset[idx], batch.total_size[idx], d.tags_code[idx])
            self.pending.setdefault(key, []).append(entries)
        self.pending_entries += len(cq)
        if self.pending_entries >= _CQ_CHUNK:
            self._flush_queues()
        if len(cq):
            self.logics_timestamp = int(batch.store_timestamp[cq[-1]])
        rec = d.index_record
        last = int(batch.physical_offset[-1])
        self._write_index(
            self.index.add(d.index_key_hash, batch.physical_offset[rec], batch.store_timestamp[rec], last)
        )

    def _flush_queues(self) -> None:
        for key, parts in self.pending.items():
            q = self.queues.setdefault(key, QueueFiles(self.cfg.cq_file_size))
            for name, data in q.add(*(np.concatenate(column) for column in zip(*parts))):
                self._write_cq(key, name, data)
        self.pending.clear()
        self.pending_entries = 0

    def _write_cq(self, key: tuple[str, int], name: str, data: bytes) -> None:
        topic, queue_id = key
        rel = queue_dir(topic, queue_id)
        directory = self.root / rel
        directory.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)

    def _write_index(self, files: list[tuple[IndexHeader, bytes]]) -> None:
        for header, data in files:
            self.index_begins.append(header.begin_timestamp)
            name = deterministic_index_names(self.index_begins)[-1]
            (self.root / "index" / name).write_bytes(data)
            self.index_timestamp = header.end_timestamp

    def finish(self) -> None:
        self._flush_queues()
        for key, q in self.queues.items():
            for name, data in q.finish():
                self._write_cq(key, name, data)
        self._write_index(self.index.finish())


#: what a store root holds (config/ aside); generate_store refuses a root that has any of them
STORE_ENTRIES = (COMMITLOG, CONSUMEQUEUE, INDEX, CHECKPOINT, ABORT, LOCK)


def generate_store(
    root: str | Path,
    spec: GeneratorSpec,
    cfg: BrokerConfig,
    progress: Callable[[int, int], None] | None = None,
) -> GenerateSummary:
    """Write a stopped store (no ``abort``, no ``lock``) under ``root``; ``progress(bytes, messages)`` now and then."""
    t0 = time.monotonic()
    root = Path(root)
    _make_root(root, spec, cfg)
    dispatcher = _Dispatcher(root, cfg)
    k = spec.deleted_head_segments

    def finished(path: Path, start: int) -> None:
        if start // cfg.mappedFileSizeCommitLog >= k:
            dispatcher.segment(path, start)

    writer = _SegmentWriter(root / "commitlog", cfg.mappedFileSizeCommitLog, finished)
    written, kinds, last_store_timestamp = _write_messages(writer, spec, cfg, progress)
    writer.finish()
    deleted = writer.segments[: min(k, len(writer.segments) - 1)]
    for path in writer.segments[len(deleted) : k]:  # a head segment kept after all: the last one
        dispatcher.segment(path, int(path.name))
    dispatcher.finish()
    for path in deleted:
        os.remove(path)
    checkpoint = Checkpoint(last_store_timestamp, dispatcher.logics_timestamp, dispatcher.index_timestamp)
    (root / CHECKPOINT).write_bytes(checkpoint.pack())
    if progress is not None:
        progress(writer.offset, written)
    return GenerateSummary(
        messages=written,
        segments=len(writer.segments) - len(deleted),
        deleted_segments=len(deleted),
        bytes=writer.offset,
        blanks=writer.blanks,
        queues=len(dispatcher.queues),
        cq_files=sum(q.files for q in dispatcher.queues.values()),
        index_files=len(dispatcher.index.headers),
        index_entries=dispatcher.index.entries,
        seconds=time.monotonic() - t0,
        kinds=dict(sorted(kinds.items())),
    )


def _make_root(root: Path, spec: GeneratorSpec, cfg: BrokerConfig) -> None:
    """The store's empty commitlog/, consumequeue/ and index/; refused when ``root`` holds a store, or when the
    queues' ConsumeQueue buffers would not fit in memory."""
    queues = spec.topics * spec.queues_per_topic * (2 if spec.long_topic else 1) + _SYSTEM_QUEUES
    if queues * cfg.cq_file_size > _MAX_CQ_BUFFERS:
        raise ValueError(
            f"{queues} queues of {cfg.cq_file_size}-byte ConsumeQueue files need more than {_MAX_CQ_BUFFERS >> 30} GiB "
            "of buffers: use fewer topics or queues, or a smaller mappedFileSizeConsumeQueue"
        )
    existing = [name for name in STORE_ENTRIES if (root / name).exists()]
    if existing:
        raise FileExistsError(f"{root} already holds a store ({', '.join(existing)})")
    (root / "commitlog").mkdir(parents=True)
    (root / "consumequeue").mkdir()
    (root / "index").mkdir()


def _write_messages(
    writer: _SegmentWriter, spec: GeneratorSpec, cfg: BrokerConfig, progress: Callable[[int, int], None] | None
) -> tuple[int, Counter[str], int]:
    """The workload's messages into the segments, each at its commitlog offset with its queue offset (prepared and
    rolled-back transaction messages take none): how many, how many of each kind, the last store timestamp."""
    workload = _Workload(spec, cfg)
    queue_offsets: Counter[tuple[str, int]] = Counter()
    kinds: Counter[str] = Counter()
    written = 0
    last_store_timestamp = 0
    while spec.messages is None or written < spec.messages:
        kind, m = workload.next()
        key = (m.topic, m.queue_id)
        takes_position = m.sys_flag & TRANSACTION_MASK not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
        m.queue_offset = queue_offsets[key] if takes_position else 0
        m.physical_offset = writer.offset
        data = encode_message(m)
        at = writer.place(len(data))
        if spec.target_bytes is not None and at + len(data) > spec.target_bytes:
            break
        if at != m.physical_offset:
            m.physical_offset = at
            data = encode_message(m)
        writer.write(data, at)
        if takes_position:
            queue_offsets[key] += 1
        kinds[kind] += 1
        written += 1
        last_store_timestamp = m.store_timestamp
        if progress is not None and written % _PROGRESS_EVERY == 0:
            progress(writer.offset, written)
    return written, kinds, last_store_timestamp
