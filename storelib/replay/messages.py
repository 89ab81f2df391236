"""Which stored records a replay sends, and as what: the broker's own handling of each kind of record.

A record is sent again as the producer first sent it: its topic, flag, body and the properties the producer gave
(KEYS, TAGS, UNIQ_KEY, its own), without the properties the broker or the client adds on the way (the 5.5.0 stores
of tests/broker hold CLUSTER, MSG_REGION, TRACE_ON, WAIT on every record). The UNIQ_KEY stays: the client sets one
only when the message has none (``MessageClientIDSetter.setUniqID``), so consumers can deduplicate.

- a **transaction's half** (RMQ_SYS_TRANS_HALF_TOPIC) is never sent: when it was committed, the broker wrote the
  message to its topic (sys flag TRANSACTION_COMMIT_TYPE; 5.5.0 keeps TRAN_MSG, PGROUP and __transactionId__ on it)
  and that record is sent, as a normal message; a half without its commit in the input is reported, not sent
  (only the producer's transaction check can say whether it commits). Op records and rolled-back ones: never;
- a **pending delay** (SCHEDULE_TOPIC_XXXX, level DELAY) goes to REAL_TOPIC, due at its store time plus the level's
  delay (messageDelayLevel); a **pending timer** (rmq_sys_wheel_timer) to REAL_TOPIC, due at TIMER_OUT_MS. Either is
  sent with TIMER_DELIVER_MS = that time while it is ahead, else as a normal message; and not at all when its
  delivered record (same UNIQ_KEY, its REAL_TOPIC) is in the input;
- a consumer's retry or dead-letter copy (%RETRY%, %DLQ%) and the broker's other own topics are not sent;
- one message (target topic, UNIQ_KEY) is sent once, however many records of it the input holds (a timer rolled
  again, a delivered delay and its schedule record).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Iterator, Sequence

from storelib.broker.timers import TIMER_OUT_MS
from storelib.constants import (
    KEY_SEPARATOR,
    PROPERTY_CRC32,
    PROPERTY_DELAY,
    PROPERTY_INNER_MULTI_QUEUE_OFFSET,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
)
from storelib.errors import BadInput
from storelib.formats.commitlog import format_properties, parse_properties

PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
#: what the broker or the client writes into a record, never the producer's: dropped before a send
ADDED_ON_THE_WAY = frozenset(
    {
        "CLUSTER",
        "MSG_REGION",
        "TRACE_ON",
        "WAIT",
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QID,
        PROPERTY_DELAY,
        "TRAN_MSG",
        "PGROUP",
        "TRANSACTION_CHECK_TIMES",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "__transactionId__",
        PROPERTY_INNER_MULTI_QUEUE_OFFSET,
        "INNER_BASE",
        TIMER_OUT_MS,
        PROPERTY_TIMER_DELIVER_MS,
        "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_DEL_UNIQKEY",
        PROPERTY_CRC32,
    }
)
#: why a record is not sent (Skip.reason)
HALF_COMMITTED = "a transaction's half: its commit is sent"
HALF_UNCOMMITTED = "a transaction's half without its commit in the input (only the producer's check can commit it)"
HALF_ROLLED_BACK = "a transaction's half, rolled back (its op record and no commit in the input)"
BROKER_RECORD = "the broker's own record"
PREPARED_OR_ROLLED_BACK = "a transaction's prepared or rolled-back record (pre-4.3 transactions)"
CONSUMER_COPY = "a consumer group's retry or dead-letter copy"
IN_TOPIC = "a pending delay or timer whose delivered record is in the input"
SAME_MESSAGE = "another record of the same message is sent"


@dataclasses.dataclass(frozen=True)
class Record:
    """A stored message record: a row of the diff's missing-messages table (udfs.schema.MISSING_MESSAGE_SCHEMA)."""

    store: str
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    properties: str  # as stored: name \x01 value \x02 ...
    body: bytes
    flag: int
    sys_flag: int
    store_timestamp: int

    def property_map(self) -> dict[str, str]:
        return parse_properties(self.properties)


@dataclasses.dataclass(frozen=True)
class Send:
    """A message to send: ``journal_key`` names it in the journal (topic and UNIQ_KEY, or its place when it has
    none); ``deliver_ms`` is set for a delay or timer still ahead."""

    record: Record
    topic: str
    properties: dict[str, str]
    deliver_ms: int | None

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def journal_key(self) -> str:
        uniq = self.uniq_key
        return f"{self.topic}|{uniq}" if uniq else f"{self.record.store}@{self.record.commitlog_offset}"

    @property
    def check_topics(self) -> tuple[str, ...]:
        """Where the cluster may already hold it: its topic, and the timer topic while it waits there."""
        return (self.topic, TIMER_TOPIC) if self.deliver_ms is not None else (self.topic,)

    def wire_properties(self) -> str:
        """The properties sent: the producer's, and TIMER_DELIVER_MS for one still ahead."""
        props = dict(self.properties)
        if self.deliver_ms is not None:
            props[PROPERTY_TIMER_DELIVER_MS] = str(self.deliver_ms)
        return format_properties(props)


@dataclasses.dataclass(frozen=True)
class Skip:
    record: Record
    reason: str


@dataclasses.dataclass(frozen=True)
class Selection:
    """The filters of a replay; a record passes when it passes each one given (topic: the topic it is sent to)."""

    topics: frozenset[str] = frozenset()
    since_ms: int | None = None
    until_ms: int | None = None  # exclusive
    from_offset: int | None = None
    to_offset: int | None = None  # exclusive
    keys: frozenset[str] = frozenset()  # a KEYS word or the UNIQ_KEY

    def offsets_pass(self, offset: int) -> bool:
        return (self.from_offset is None or offset >= self.from_offset) and (
            self.to_offset is None or offset < self.to_offset
        )

    def passes(self, record: Record, topic: str) -> bool:
        t = record.store_timestamp
        if self.topics and topic not in self.topics:
            return False
        if (self.since_ms is not None and t < self.since_ms) or (self.until_ms is not None and t >= self.until_ms):
            return False
        if not self.offsets_pass(record.commitlog_offset):
            return False
        return not self.keys or bool(self.keys & _keys_of(record.property_map()))


def _keys_of(props: dict[str, str]) -> set[str]:
    words = set(props.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR)) - {""}
    return words | ({props[PROPERTY_UNIQ_KEY]} if PROPERTY_UNIQ_KEY in props else set())


def parse_time(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC unless it says otherwise) -> ms."""
    if text.isdigit():
        return int(text)
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise BadInput(f"{text!r}: not a time (ISO 8601, e.g. 2026-12-02T13:00:00, or ms since the epoch)") from None
    return int((t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp() * 1000)


def plan(
    records: Iterable[Record], selection: Selection, delay_levels_ms: Sequence[int], now_ms: int
) -> Iterator[Send | Skip]:
    """Each record that passes ``selection``, in commitlog order, as a Send or a Skip saying why."""
    ordered = sorted(records, key=lambda r: (r.store, r.commitlog_offset))
    in_topics = {(r.topic, u) for r in ordered if _is_user_topic(r.topic) and (u := _uniq(r))}
    rolled_back = _rolled_back(ordered)
    sent: set[str] = set()
    for record in ordered:
        props = record.property_map()
        topic = props.get(PROPERTY_REAL_TOPIC, record.topic) if _has_real_topic(record.topic) else record.topic
        if not selection.passes(record, topic):
            continue
        outcome = _outcome(record, props, topic, (in_topics, rolled_back), delay_levels_ms, now_ms)
        if isinstance(outcome, Send) and outcome.journal_key in sent:
            outcome = Skip(record, SAME_MESSAGE)
        elif isinstance(outcome, Send):
            sent.add(outcome.journal_key)
        yield outcome


def _outcome(
    record: Record,
    props: dict[str, str],
    topic: str,
    known: tuple[set[tuple[str, str]], set[tuple[str, str]]],
    delay_levels_ms: Sequence[int],
    now_ms: int,
) -> Send | Skip:
    uniq = props.get(PROPERTY_UNIQ_KEY)
    in_topics, rolled_back = known
    if record.topic == TRANS_HALF_TOPIC:
        if uniq is not None and (topic, uniq) in in_topics:
            return Skip(record, HALF_COMMITTED)
        return Skip(record, HALF_ROLLED_BACK if (record.store, uniq) in rolled_back else HALF_UNCOMMITTED)
    if topic.startswith(("%RETRY%", "%DLQ%")):  # also a send-back waiting in SCHEDULE_TOPIC_XXXX
        return Skip(record, CONSUMER_COPY)
    if not _is_user_topic(record.topic) and not _is_waiting(record.topic):
        return Skip(record, BROKER_RECORD)
    if record.sys_flag & TRANSACTION_MASK not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
        return Skip(record, PREPARED_OR_ROLLED_BACK)
    due = None
    if _is_waiting(record.topic):
        if (topic, uniq) in in_topics:
            return Skip(record, IN_TOPIC)
        due = _due_ms(record, props, delay_levels_ms)
    kept = {k: v for k, v in props.items() if k not in ADDED_ON_THE_WAY}
    return Send(record, topic, kept, due if due is not None and due > now_ms else None)


def _rolled_back(records: Iterable[Record]) -> set[tuple[str, str]]:
    """(store, UNIQ_KEY) of the halves an op record resolved, each record of them: an op record's body is the
    resolved half's queue offset in RMQ_SYS_TRANS_HALF_TOPIC, as text (several, comma-separated, when the broker
    batched them: the 5.5.0 sample store). A half the check put again (TRANSACTION_CHECK_TIMES) is resolved only
    when its last record is."""
    resolved = set()
    for r in records:
        if r.topic == TRANS_OP_HALF_TOPIC:
            words = r.body.decode("ascii", "replace").split(",")
            resolved |= {(r.store, int(w)) for w in words if w.strip().isdigit()}
    halves: dict[tuple[str, str], bool] = {}
    for r in records:
        if r.topic == TRANS_HALF_TOPIC and (uniq := _uniq(r)):
            key = (r.store, uniq)
            halves[key] = halves.get(key, True) and (r.store, r.queue_offset) in resolved
    return {key for key, all_resolved in halves.items() if all_resolved}


def _due_ms(record: Record, props: dict[str, str], delay_levels_ms: Sequence[int]) -> int:
    """When a waiting record is due: TIMER_OUT_MS of a timer, store time plus its level's delay of a delay."""
    where = f"{record.store} @ {record.commitlog_offset}"
    try:
        if record.topic == TIMER_TOPIC:
            return int(props[TIMER_OUT_MS])
        return record.store_timestamp + delay_levels_ms[int(props[PROPERTY_DELAY]) - 1]
    except (KeyError, ValueError, IndexError):
        raise BadInput(f"{where}: a {record.topic} record without a readable due time") from None


def _uniq(record: Record) -> str | None:
    return record.property_map().get(PROPERTY_UNIQ_KEY)


def _is_waiting(topic: str) -> bool:
    """A delay or timer the broker holds until it is due (its REAL_TOPIC is where it goes)."""
    return topic in (SCHEDULE_TOPIC, TIMER_TOPIC)


def _has_real_topic(topic: str) -> bool:
    """A record the broker holds for REAL_TOPIC: a delay, a timer, a transaction's half."""
    return _is_waiting(topic) or topic == TRANS_HALF_TOPIC


def _is_user_topic(topic: str) -> bool:
    """Not one of the broker's own topics (rmq_sys_*, RMQ_SYS_*, SCHEDULE_TOPIC_XXXX), nor a consumer group's
    %RETRY%/%DLQ%."""
    return not (topic.startswith(("rmq_sys_", "RMQ_SYS_", "%RETRY%", "%DLQ%")) or topic == SCHEDULE_TOPIC)
