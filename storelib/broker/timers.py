"""The broker's timer and delay-level rules (``TimerMessageStore``, ``ScheduleMessageService``, 5.0.0 to 5.5.0),
over the records of the commitlog that take part in them.

- A message with a delivery time is put to ``rmq_sys_wheel_timer`` queue 0 with TIMER_OUT_MS, REAL_TOPIC and
  REAL_QID; the timer store enqueues it (a timerlog unit, its wheel slot) and, at its time, puts it again to
  REAL_TOPIC/REAL_QID with TIMER_ENQUEUE_MS and TIMER_DEQUEUE_MS set and REAL_TOPIC/REAL_QID cleared (``convert``).
  A unit due more than timerRollWindowSlot slots ahead is a roll unit: at the roll time the message is put again to
  ``rmq_sys_wheel_timer`` (TIMER_ROLL_TIMES + 1) and enqueued anew. A record with TIMER_DEL_UNIQKEY is a delete
  marker: its unit cancels, in the same slot, the message whose key it names (the UNIQ_KEY up to 5.2.x;
  ``REAL_TOPIC+UNIQ_KEY`` in 5.3.x; from 5.4.0 the UNIQ_KEY unless appendTopicForTimerDeleteKey).
- A message with a delay level is put to ``SCHEDULE_TOPIC_XXXX`` queue level - 1 with DELAY, REAL_TOPIC and
  REAL_QID; at its time the schedule service puts it again to REAL_TOPIC/REAL_QID with DELAY cleared and REAL_TOPIC
  and REAL_QID kept (``messageTimeUp``), in queue order, and records in delayOffset.json the next queue offset.

So the commitlog tells which of these messages were delivered (a later record of the real queue with the same
UNIQ_KEY), rolled or deleted, and which are still pending: what ``timer_records`` keeps of each record, and what
``timer_states`` and ``schedule_states`` decide.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.constants import SCHEDULE_TOPIC, TIMER_TOPIC
from storelib.formats.scanner import RecordBatch, find_properties

TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
#: the properties kept of each record that takes part (column name -> property)
PROPERTIES = {
    "real_topic": "REAL_TOPIC",
    "real_qid": "REAL_QID",
    "timer_out_ms": TIMER_OUT_MS,
    "dequeue_ms": TIMER_DEQUEUE_MS,
    "roll_times": TIMER_ROLL_TIMES,
    "del_key": TIMER_DEL_UNIQKEY,
    "delay": "DELAY",
    "uniq_key": "UNIQ_KEY",
    "keys": "KEYS",
    "tags": "TAGS",
}
SCHEMA = pa.schema(
    [
        ("commitlog_offset", pa.int64()),
        ("size", pa.int32()),
        ("store_timestamp", pa.int64()),
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        *((name, pa.string()) for name in PROPERTIES),
    ]
)
#: 5.4.0+ (``timerRocksDBEnable``, default false): the RocksDB timer store, column family ``timer`` of the
#: ``MessageRocksDBStorage`` at <root>/rocksdbstore (created, empty, at every 5.4.0+ start)
ROCKSDB_DIR, ROCKSDB_TIMER_FAMILY = "rocksdbstore", "timer"
#: bytes only a batch holding a delivered copy has (a property name and its separator)
_COPY_MARKS = (b"REAL_TOPIC\x01", TIMER_DEQUEUE_MS.encode() + b"\x01")
#: the 7-day look-back: at start the wheel is read from at most now - slotsTotal + TIMER_BLANK_SLOTS slots back
TIMER_BLANK_SLOTS = 60
SLOTS_TOTAL = 7 * 86_400


def timer_records(b: RecordBatch) -> pa.RecordBatch | None:
    """The records of a batch that take part in timers and delay levels: those of ``rmq_sys_wheel_timer`` and
    ``SCHEDULE_TOPIC_XXXX``, and the delivered copies (a record of its own REAL_TOPIC, or with TIMER_DEQUEUE_MS);
    None when there are none. Only the candidates' properties are read: the system topics' records and those whose
    properties hold a copy's property name (found by a byte search)."""
    if not len(b):
        return None
    topics = np.array(b.topic_names, dtype=object)[b.topic_code]
    candidate = np.isin(topics, [TIMER_TOPIC, SCHEDULE_TOPIC])
    candidate[_records_holding(b, _COPY_MARKS)] = True
    at = np.flatnonzero(candidate)
    if not len(at):
        return None
    names = tuple(PROPERTIES.values())
    values = find_properties(b.buf, b.props_start[at], b.props_len[at], names)
    real = np.array(b.text(*values["REAL_TOPIC"]), dtype=object)
    system = np.isin(topics[at], [TIMER_TOPIC, SCHEDULE_TOPIC])
    keep = np.flatnonzero(system | (real == topics[at]) | (values[TIMER_DEQUEUE_MS][0] >= 0))
    if not len(keep):
        return None
    rec = at[keep]
    cols = [
        pa.array(b.physical_offset[rec]),
        pa.array(b.total_size[rec]),
        pa.array(b.store_timestamp[rec]),
        pa.array(topics[rec].tolist(), pa.string()),
        pa.array(b.queue_id[rec]),
        pa.array(b.queue_offset[rec]),
        *(pa.array(b.text(values[p][0][keep], values[p][1][keep]), pa.string()) for p in names),
    ]
    return pa.RecordBatch.from_arrays(cols, schema=SCHEMA)


def _records_holding(b: RecordBatch, marks: tuple[bytes, ...]) -> np.ndarray:
    """Indexes of the batch's records whose properties hold one of ``marks``."""
    raw = b.buf.tobytes()
    hits = []
    for mark in marks:
        at = raw.find(mark)
        while at >= 0:
            hits.append(at)
            at = raw.find(mark, at + 1)
    if not hits:
        return np.zeros(0, np.int64)
    pos = np.array(hits, np.int64)
    order = np.argsort(b.props_start, kind="stable")
    i = np.searchsorted(b.props_start[order], pos, side="right") - 1
    ok = i >= 0
    rec = order[i[ok]]
    inside = pos[ok] < b.props_start[rec] + b.props_len[rec]
    return np.unique(rec[inside])


def int_column(column: pa.ChunkedArray | pa.Array, default: int = -1) -> np.ndarray:
    """A string column as int64 (``default`` where absent or not a number)."""
    values = column.to_pylist()
    out = np.full(len(values), default, np.int64)
    for i, v in enumerate(values):
        try:
            out[i] = int(v)
        except (TypeError, ValueError):
            continue
    return out


@dataclasses.dataclass(frozen=True)
class Message:
    """One timer or delay-level message as the commitlog tells its story: its latest record in the system topic
    and whether (and where) it was delivered."""

    commitlog_offset: int  # its latest record in rmq_sys_wheel_timer or SCHEDULE_TOPIC_XXXX
    queue_id: int
    queue_offset: int
    uniq_key: str
    real_topic: str
    real_qid: int
    due_ms: int  # TIMER_OUT_MS, or the delay level's deliver time
    keys: str | None
    tags: str | None
    delivered_at: int | None  # commitlog offset of the delivered copy
    deleted: bool = False
    kind: str = "timer"  # "timer" (rmq_sys_wheel_timer) or "delay" (SCHEDULE_TOPIC_XXXX)

    @property
    def pending(self) -> bool:
        return self.delivered_at is None and not self.deleted

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _copies(table: pa.Table) -> dict[tuple[str, str], list[int]]:
    """(real topic, UNIQ_KEY) -> commitlog offsets of delivered copies (records of their own real topic, or with
    TIMER_DEQUEUE_MS, outside the two system topics)."""
    out: dict[tuple[str, str], list[int]] = {}
    system = pc.is_in(table["topic"], pa.array([TIMER_TOPIC, SCHEDULE_TOPIC])).to_pylist()
    rows = zip(system, table["topic"].to_pylist(), table["uniq_key"].to_pylist(), table["commitlog_offset"].to_pylist())
    for is_system, topic, uniq, offset in rows:
        if not is_system and uniq:
            out.setdefault((topic, uniq), []).append(offset)
    return out


def _delivered(copies: dict[tuple[str, str], list[int]], topic: str, uniq: str, after: int) -> int | None:
    return min((o for o in copies.get((topic, uniq), ()) if o > after), default=None)


def delete_key(real_topic: str, uniq_key: str, release: tuple[int, ...], append_topic: bool) -> str:
    """The key a delete marker's TIMER_DEL_UNIQKEY must hold to cancel a message (``buildDeleteKey``)."""
    with_topic = (5, 3) <= release[:2] < (5, 4) or (release[:2] >= (5, 4) and append_topic)
    return f"{real_topic}+{uniq_key}" if with_topic else uniq_key


def timer_states(table: pa.Table, release: tuple[int, ...], append_topic: bool = False) -> list[Message]:
    """Every timer message of ``rmq_sys_wheel_timer`` (delete markers left out), one per UNIQ_KEY at its latest
    record (a roll puts it again), delivered when a later copy exists in its real topic, deleted when a delete
    marker names it."""
    t = table.filter(pc.equal(table["topic"], TIMER_TOPIC))
    copies = _copies(table)
    deleted = {k for k in t["del_key"].to_pylist() if k}
    latest: dict[str, dict] = {}
    for row in t.to_pylist():
        if row["del_key"] or not row["uniq_key"]:
            continue
        if row["uniq_key"] not in latest or row["commitlog_offset"] > latest[row["uniq_key"]]["commitlog_offset"]:
            latest[row["uniq_key"]] = row
    out = []
    for uniq, row in latest.items():
        topic = row["real_topic"] or ""
        out.append(
            Message(
                row["commitlog_offset"],
                row["queue_id"],
                row["queue_offset"],
                uniq,
                topic,
                int(int_column(pa.array([row["real_qid"]]))[0]),
                int(int_column(pa.array([row["timer_out_ms"]]))[0]),
                row["keys"],
                row["tags"],
                _delivered(copies, topic, uniq, row["commitlog_offset"]),
                delete_key(topic, uniq, release, append_topic) in deleted,
            )
        )
    return sorted(out, key=lambda m: m.commitlog_offset)


def schedule_states(table: pa.Table, delay_levels_ms: tuple[int, ...]) -> list[Message]:
    """Every message of ``SCHEDULE_TOPIC_XXXX`` (queue = level - 1), due at its store time plus its level's delay,
    delivered when a later copy exists in its real topic."""
    t = table.filter(pc.equal(table["topic"], SCHEDULE_TOPIC))
    copies = _copies(table)
    out = []
    for row in t.to_pylist():
        topic, uniq = row["real_topic"] or "", row["uniq_key"] or ""
        level = row["queue_id"] + 1
        delay = delay_levels_ms[level - 1] if 0 < level <= len(delay_levels_ms) else 1000
        out.append(
            Message(
                row["commitlog_offset"],
                row["queue_id"],
                row["queue_offset"],
                uniq,
                topic,
                int(int_column(pa.array([row["real_qid"]]))[0]),
                row["store_timestamp"] + delay,
                row["keys"],
                row["tags"],
                _delivered(copies, topic, uniq, row["commitlog_offset"]) if uniq else None,
                kind="delay",
            )
        )
    return sorted(out, key=lambda m: (m.queue_id, m.queue_offset))


def delivered_offsets(schedule: list[Message]) -> tuple[dict[int, int], list[Message]]:
    """delayOffset.json's offsetTable as the commitlog decides it: per delay level with records, the first queue
    offset not delivered (one past the last when all were); and the messages delivered out of that order (after an
    undelivered one of their level), which no offset describes."""
    table: dict[int, int] = {}
    odd: list[Message] = []
    for level in sorted({m.queue_id + 1 for m in schedule}):
        queue = [m for m in schedule if m.queue_id + 1 == level]
        waiting = [m.queue_offset for m in queue if m.delivered_at is None]
        table[level] = min(waiting) if waiting else max(m.queue_offset for m in queue) + 1
        odd += [m for m in queue if m.delivered_at is not None and m.queue_offset > table[level]]
    return table, odd


def read_floor_ms(now_ms: int, precision_ms: int) -> int:
    """The oldest time the wheel is read from at start (``recover``): now (to the precision) minus slotsTotal
    slots plus TIMER_BLANK_SLOTS slots; timers due before it are never delivered."""
    return now_ms // precision_ms * precision_ms - SLOTS_TOTAL * precision_ms + TIMER_BLANK_SLOTS * precision_ms


def recovery_start(last_flush_pos: int, file_size: int) -> int:
    """Where the broker's timerlog recovery starts patching the wheel: the checkpoint's flush position minus one
    file (not below 0), from that file's start; only the slots of units from there on are touched, and only their
    lastPos (and timeMs/firstPos when their time differs)."""
    return max(0, last_flush_pos - file_size) // file_size * file_size


def clamps_queue_offset(release: tuple[int, ...]) -> bool:
    """Whether ``recover`` moves the enqueue offset into rmq_sys_wheel_timer queue 0's [min, max] (5.3.0 on; the
    5.0.0, 5.1.4 and 5.2.0 jars do not, so a timer checkpoint past the queue's end enqueues nothing until the queue
    grows past it)."""
    return release[:2] >= (5, 3)
