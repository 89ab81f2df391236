"""A broker's dispatch written from the spec, record by record, sharing no code with storelib.

The oracle for tests that judge storelib's ConsumeQueue and IndexFile files (test_generate, test_rebuild,
test_indexfile): a plain-Python commitlog walk (``CommitLog.checkMessageAndReturnSize``), the dispatch rules,
``ConsumeQueue.putMessagePositionInfo`` with its pre-blank units, and ``IndexService.buildIndex`` /
``IndexFile.putKey`` statement by statement. test_fixture_4_9_8 checks it against the real 4.9.8 broker's
files, so a test that agrees with it agrees with the broker.
"""

from __future__ import annotations

import dataclasses
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

from storelib.broker.config import BrokerConfig

INT_MAX = 2**31 - 1
MAGIC_V1, MAGIC_V2, MAGIC_BLANK = -626843481, -626843477, -875286124
ROLLBACK, PREPARED = 0xC, 0x4
UNIT = 20
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode``: ``31*h + unit`` over UTF-16 code units, as a signed int32."""
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def index_key_hash(key: str) -> int:
    """An IndexFile entry's keyHash: ``abs(key.hashCode())``, 0 for Integer.MIN_VALUE (abs stays negative)."""
    h = java_string_hash(key)
    return 0 if h == -(2**31) else abs(h)


def index_keys(topic: str, uniq: str | None, keys: str | None) -> list[str]:
    """The keys ``IndexService.buildIndex`` puts for a message: ``topic#UNIQ_KEY``, then ``topic#k`` for every
    non-empty token of KEYS split on single spaces."""
    tokens = [uniq] if uniq is not None else []
    tokens += [k for k in (keys or "").split(" ") if k]
    return [f"{topic}#{k}" for k in tokens]


def parse_message_properties(text: str) -> dict[str, str]:
    """``name \\x01 value \\x02`` pieces; pieces without a separator or with an empty value are skipped."""
    out = {}
    for piece in text.split("\x02"):
        name, sep, value = piece.partition("\x01")
        if sep and value:
            out[name] = value
    return out


@dataclasses.dataclass
class Record:
    """The fields of one message record that dispatch reads."""

    offset: int  # where the record starts (commitlog offset)
    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    queue_offset: int
    physical_offset: int  # the PHYSICALOFFSET field
    sys_flag: int
    store_timestamp: int
    body: bytes
    topic: str
    properties: dict[str, str]
    length_of_fields: int  # what the fields add up to: must equal total_size


def decode_record(buf: bytes, pos: int, offset: int) -> Record:
    """The message record at ``buf[pos:]`` (the CommitLog table of the spec), field by field."""
    total, magic, crc, qid, _flag, qoff, phys, sysflag, _born = struct.unpack_from(">iiiiiqqiq", buf, pos)
    p = pos + 48 + (20 if sysflag & 0x10 else 8)  # BORNHOST
    (store_ts,) = struct.unpack_from(">q", buf, p)
    p += 8 + (20 if sysflag & 0x20 else 8) + 4 + 8  # STOREHOST, RECONSUMETIMES, PREPARED TRANSACTION OFFSET
    (body_len,) = struct.unpack_from(">i", buf, p)
    body = bytes(buf[p + 4 : p + 4 + body_len])
    p += 4 + body_len
    if magic == MAGIC_V2:
        (topic_len,) = struct.unpack_from(">h", buf, p)
        p += 2
    else:
        (topic_len,) = struct.unpack_from(">b", buf, p)
        p += 1
    topic = bytes(buf[p : p + topic_len]).decode()
    p += topic_len
    (props_len,) = struct.unpack_from(">h", buf, p)
    props = bytes(buf[p + 2 : p + 2 + props_len]).decode()
    p += 2 + props_len
    fields = (offset, total, magic, crc, qid, qoff, phys, sysflag, store_ts, body, topic)
    return Record(*fields, parse_message_properties(props), p - pos)


def walk_commitlog(commitlog: Path) -> Iterator[Record]:
    """Every message record of the segments in name order: a BLANK ends a segment, zero bytes end the log."""
    for path in sorted(commitlog.iterdir()):
        buf, start, pos = path.read_bytes(), int(path.name), 0
        while pos + 8 <= len(buf):
            total, magic = struct.unpack_from(">ii", buf, pos)
            if magic == MAGIC_BLANK:
                break
            if total == 0 or magic == 0:
                return
            assert magic in (MAGIC_V1, MAGIC_V2), f"{path.name} @ {pos}: magic {magic}"
            yield decode_record(buf, pos, start + pos)
            pos += total


def delay_table_ms(levels: str) -> list[int]:
    """``messageDelayLevel`` ("1s 5s ... 2h"): the delay of level 1, 2, ... in ms."""
    return [int(word[:-1]) * DELAY_UNITS_MS[word[-1]] for word in levels.split()]


def tags_code(r: Record, delays: list[int]) -> int:
    """TAGS hashCode (0 without tags); a SCHEDULE_TOPIC_XXXX record with DELAY > 0: its deliver time."""
    code = java_string_hash(r.properties["TAGS"]) if r.properties.get("TAGS") else 0
    if r.topic == SCHEDULE_TOPIC and "DELAY" in r.properties:
        level = min(int(r.properties["DELAY"]), len(delays))
        if level > 0:
            code = r.store_timestamp + delays[level - 1]
    return code


class ReferenceConsumeQueue:
    """One queue's files, ``ConsumeQueue.putMessagePositionInfo`` unit by unit."""

    def __init__(self, file_size: int) -> None:
        self.file_size = file_size
        self.files: dict[int, bytearray] = {}
        self.max_physic_offset = -1
        self.write_position = 0  # logical byte offset of the next unit

    def put(self, offset: int, size: int, code: int, queue_offset: int) -> None:
        if offset + size <= self.max_physic_offset:
            return  # already dispatched
        expect = queue_offset * UNIT
        if not self.files and queue_offset != 0:  # the queue's first file, for a later entry: pre-blank
            self.write_position = expect - expect % self.file_size
            while self.write_position < expect:
                self._append(struct.pack(">qiq", 0, INT_MAX, 0))
        assert expect == self.write_position, f"queue offset {queue_offset} is not the next one"
        self._append(struct.pack(">qiq", offset, size, code))
        self.max_physic_offset = offset + size

    def _append(self, unit: bytes) -> None:
        start = self.write_position - self.write_position % self.file_size
        data = self.files.setdefault(start, bytearray(self.file_size))
        at = self.write_position - start
        data[at : at + UNIT] = unit
        self.write_position += UNIT


class ReferenceIndexFile:
    """``IndexFile`` over a bytearray, statement by statement as in the broker (seed 002, the spec)."""

    def __init__(self, cfg: BrokerConfig, end_phy_offset: int, end_timestamp: int) -> None:
        self.slot_num, self.index_num = cfg.maxHashSlotNum, cfg.maxIndexNum
        self.every_put = cfg.hash_slot_every_put
        self.buf = bytearray(40 + self.slot_num * 4 + self.index_num * 20)
        self.begin_phy = self.end_phy = end_phy_offset if end_phy_offset > 0 else 0
        self.begin_ts = self.end_ts = end_timestamp if end_timestamp > 0 else 0
        self.hash_slot_count = 0
        self.index_count = 1

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        if self.index_count >= self.index_num:
            return False
        key_hash = index_key_hash(key)
        abs_slot_pos = 40 + key_hash % self.slot_num * 4
        (slot_value,) = struct.unpack_from(">i", self.buf, abs_slot_pos)
        if slot_value <= 0 or slot_value > self.index_count:
            slot_value = 0
        diff = store_timestamp - self.begin_ts
        time_diff = abs(diff) // 1000 * (1 if diff >= 0 else -1)  # Java long division truncates
        if self.begin_ts <= 0:
            time_diff = 0
        elif time_diff > INT_MAX:
            time_diff = INT_MAX
        elif time_diff < 0:
            time_diff = 0
        abs_index_pos = 40 + self.slot_num * 4 + self.index_count * 20
        struct.pack_into(">iqii", self.buf, abs_index_pos, key_hash, phy_offset, time_diff, slot_value)
        struct.pack_into(">i", self.buf, abs_slot_pos, self.index_count)
        if self.index_count <= 1:
            self.begin_phy = phy_offset
            self.begin_ts = store_timestamp
        if self.every_put or slot_value == 0:
            self.hash_slot_count += 1
        self.index_count += 1
        self.end_phy = phy_offset
        self.end_ts = store_timestamp
        return True

    def to_bytes(self) -> bytes:
        header = (self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.hash_slot_count, self.index_count)
        struct.pack_into(">qqqqii", self.buf, 0, *header)
        return bytes(self.buf)


class ReferenceIndexService:
    """``IndexService.buildIndex`` for each dispatched message, in commitlog order."""

    def __init__(self, cfg: BrokerConfig) -> None:
        self.cfg = cfg
        self.files: list[ReferenceIndexFile] = []

    def retry_get_and_create_index_file(self) -> ReferenceIndexFile:
        if self.files and not self.files[-1].is_write_full():
            return self.files[-1]
        end_phy, end_ts = (self.files[-1].end_phy, self.files[-1].end_ts) if self.files else (0, 0)
        self.files.append(ReferenceIndexFile(self.cfg, end_phy, end_ts))
        return self.files[-1]

    def build_index(self, offset: int, ts: int, topic: str, tran: int, uniq: str | None, keys: str | None) -> None:
        index_file = self.retry_get_and_create_index_file()
        if offset < index_file.end_phy:
            return
        if tran == ROLLBACK:
            return
        for key in index_keys(topic, uniq, keys):
            index_file = self.put_key(index_file, key, offset, ts)

    def put_key(self, index_file: ReferenceIndexFile, key: str, offset: int, ts: int) -> ReferenceIndexFile:
        while not index_file.put_key(key, offset, ts):
            index_file = self.retry_get_and_create_index_file()
        return index_file

    def files_bytes(self) -> list[bytes]:
        return [f.to_bytes() for f in self.files]


def reference_store_index(store: Path, cfg: BrokerConfig) -> tuple[dict[str, bytes], list[bytes]]:
    """The ConsumeQueue files (store-relative path -> bytes) and IndexFiles (in order) a broker dispatching
    ``store``'s commitlog from its first record would write."""
    cq_file_size = -(-cfg.mappedFileSizeConsumeQueue // UNIT) * UNIT
    delays = delay_table_ms(cfg.messageDelayLevel)
    queues: dict[tuple[str, int], ReferenceConsumeQueue] = {}
    index = ReferenceIndexService(cfg)
    for r in walk_commitlog(store / "commitlog"):
        tran = r.sys_flag & 0xC
        if tran not in (PREPARED, ROLLBACK):
            q = queues.setdefault((r.topic, r.queue_id), ReferenceConsumeQueue(cq_file_size))
            q.put(r.offset, r.total_size, tags_code(r, delays), r.queue_offset)
        if cfg.messageIndexEnable:
            p = r.properties
            index.build_index(r.offset, r.store_timestamp, r.topic, tran, p.get("UNIQ_KEY"), p.get("KEYS"))
    cq = {
        f"consumequeue/{topic}/{qid}/{start:020d}": bytes(data)
        for (topic, qid), q in sorted(queues.items())
        for start, data in sorted(q.files.items())
    }
    return cq, index.files_bytes()


def store_files(root: Path, *subs: str) -> dict[str, bytes]:
    """Every file under ``root/sub`` for each of ``subs``, by store-relative path, in name order."""
    return {
        str(p.relative_to(root)): p.read_bytes() for sub in subs for p in sorted((root / sub).rglob("*")) if p.is_file()
    }


def assert_index_files(root: Path, cq: dict[str, bytes], index: list[bytes]) -> None:
    """``root``'s consumequeue/ is ``cq`` by path and bytes, its index/ is ``index`` by order and bytes
    (IndexFile names are creation times)."""
    live_cq = store_files(root, "consumequeue")
    assert sorted(live_cq) == sorted(cq)
    assert [path for path, data in cq.items() if live_cq[path] != data] == []
    live_index = list(store_files(root, "index").values())
    assert len(live_index) == len(index)
    assert [i for i, (a, b) in enumerate(zip(live_index, index)) if a != b] == []


def assert_same_index(live: Path, rebuilt: Path) -> None:
    """``rebuilt`` holds ``live``'s queue files (consumequeue/, batchconsumequeue/) by path and bytes, and its
    IndexFiles by order and bytes (IndexFile names are creation times)."""
    for sub in ("consumequeue", "batchconsumequeue"):
        want, got = store_files(live, sub), store_files(rebuilt, sub)
        assert sorted(got) == sorted(want)
        assert [path for path, data in want.items() if got[path] != data] == []
    want_index, got_index = list(store_files(live, "index").values()), list(store_files(rebuilt, "index").values())
    assert len(got_index) == len(want_index)
    assert [i for i, (a, b) in enumerate(zip(got_index, want_index)) if a != b] == []


def assert_index_equals_reference(store: Path, index_root: Path, cfg: BrokerConfig) -> None:
    """``index_root``'s ConsumeQueue files and IndexFiles are what a broker writes for ``store``'s commitlog."""
    assert_index_files(index_root, *reference_store_index(store, cfg))


def timer_wheel(timerlog: bytes, start: int, precision_ms: int = 1000, slots: int = 2 * 7 * 86_400) -> dict:
    """The wheel ``TimerMessageStore.doEnqueue`` leaves after appending the units of ``timerlog`` (the bytes of
    consecutive timerlog files from offset ``start``) one by one to an empty wheel, as {slot index: (time, firstPos,
    lastPos, num, magic)} for the slots it wrote: getSlot (a slot of another time reads as empty), then putSlot with
    the slot's firstPos (or the unit's), the unit as lastPos, num +1 (-1 for a delete), the slot's magic."""
    wheel: dict[int, tuple[int, int, int, int, int]] = {}
    pos = 0
    while pos + 52 <= len(timerlog):
        size, _prev, magic, enqueue, delay = struct.unpack_from(">iqiqi", timerlog, pos)
        if size != 52 or magic | 0xF != 0xF:
            break
        when = enqueue + delay
        at = when // precision_ms % slots
        time, first, _last, num, slot_magic = wheel.get(at, (0, 0, 0, 0, 0))
        if time != when // precision_ms:
            first, num, slot_magic = -1, 0, 0
        num += -1 if magic & 4 else 1
        wheel[at] = (when // precision_ms, start + pos if first == -1 else first, start + pos, num, slot_magic)
        pos += 52
    return wheel


CQ_UNIT = {"consumequeue": 20, "batchconsumequeue": 46}  # bytes per unit (BatchConsumeQueue: FACTS.md)


def queue_units(root: Path) -> dict[str, list[bytes]]:
    """Every queue's units in queue-offset order (files concatenated), zero units included."""
    units: dict[str, list[bytes]] = {}
    for name, size in CQ_UNIT.items():
        for queue in sorted((root / name).glob("*/*")):
            data = b"".join(f.read_bytes() for f in sorted(queue.iterdir()))
            units[f"{name}/{queue.parent.name}/{queue.name}"] = [data[i : i + size] for i in range(0, len(data), size)]
    return units


def assert_queues_as_the_broker_replays_them(replay: Path, recovered: Path) -> None:
    """Every queue unit by unit as the broker in file mode wrote it when it dispatched the whole commitlog again
    (harness `replayed`), up to the units of records it put itself while it ran (past the commitlog's end): a queue
    holding only such units (its transaction check may run while it replays) is the broker's own, not the store's."""
    try:
        last = list(walk_commitlog(recovered / "commitlog"))[-1]
        end = last.offset + last.total_size
        live, rebuilt = queue_units(replay), queue_units(recovered)
        own = []  # queues the replaying broker made of records it put itself (a transaction check's, a timer's)
        for queue, units in live.items():
            past = [i for i, u in enumerate(units) if struct.unpack_from(">q", u)[0] >= end and u.strip(b"\0")]
            got, want = rebuilt.get(queue, []), units[: past[0]] if past else units
            assert _without_zero_tail(got) == _without_zero_tail(want), queue
            if past and not _without_zero_tail(want):
                own.append(queue)
        assert sorted(rebuilt) == sorted(set(live) - set(own))
    finally:
        shutil.rmtree(replay.parent, ignore_errors=True)


def _without_zero_tail(units: list[bytes]) -> list[bytes]:
    return units[: max((i + 1 for i, u in enumerate(units) if u.strip(b"\0")), default=0)]
