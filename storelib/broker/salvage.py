"""Salvage: a damaged byte range of the commitlog rewritten as records the broker's recovery accepts, so that
recovery truncates nothing and every sound record keeps its commitlog offset and queue offset.

What the broker does with such a record (5.5.0 jars, ``CommitLog.checkMessageAndReturnSize`` and
``DefaultMessageStore.CommitLogDispatcherBuildConsumeQueue``, ``IndexService.buildIndex``):

- recovery accepts a record whose magic is a message magic, whose BODYCRC is ``CRC32(body) & 0x7fffffff`` and
  whose fields add up to its TOTALSIZE (``calMsgLength``); without ``forceVerifyPropCRC`` a record with no
  ``__CRC32#`` property passes;
- a record of transaction type ROLLBACK (SYSFLAG bits 2-3 = 0xC) is dispatched to no ConsumeQueue and no
  IndexFile: a **filler** (topic ``FILLER_TOPIC``) that no queue points at and no lookup finds;
- ``getMessage`` serves the bytes a ConsumeQueue unit points at, whatever they hold (no unit is skipped for a
  ``*`` subscription), so the unit of a damaged message must point at a whole record or the pull's batch breaks:
  a **tombstone** takes the damaged message's place, of its topic, queue and queue offset, its size (the live
  unit's), TRANSACTION NOT_TYPE, no TAGS (tagsCode 0: a tag subscription skips it), no KEYS, no UNIQ_KEY, the
  property ``SALVAGED`` and a body saying what happened. A consumer of ``*`` receives the tombstone at that queue
  offset, never the lost message. Where units of LMQ queues (``%LMQ%``) point at the same record (multi dispatch),
  the tombstone names them as the broker's dispatch reads them: INNER_MULTI_DISPATCH and INNER_MULTI_QUEUE_OFFSET.
- a range that runs to its segment's end ends as the broker ends a full segment (``CommitLog.doAppend``: a message
  is appended only with at least 8 bytes left after it, else a BLANK of exactly the bytes left): after the last
  tombstone an end-of-file **BLANK** (TOTALSIZE the bytes left, BLANK_MAGIC_CODE, then zeros), at which recovery
  goes on with the next segment.

Pure functions over offsets and bytes; the store is changed by jobs.pipeline.salvage_flow through recover's
backup and undo.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence

from storelib.broker.detection import BROKER_TOPICS
from storelib.constants import (
    BLANK_MAGIC_CODE,
    LMQ_PREFIX,
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_INNER_MULTI_QUEUE_OFFSET,
    TRANSACTION_ROLLBACK_TYPE,
)
from storelib.errors import Refused
from storelib.formats.commitlog import Message, encode_message, format_properties, record_length

#: the topic of a filler record (never dispatched: ROLLBACK type); ``%`` marks a name the broker gives itself
FILLER_TOPIC = "%SALVAGE%"
#: the property every salvage record carries: what it replaces
SALVAGED = "SALVAGED"
#: the body of a tombstone starts with this text, padded with spaces to the lost record's size
TOMBSTONE_TEXT = b"rmqstore salvage: the message stored here was damaged and is lost; its bytes are in the backup"
#: TopicValidator's prefix of system topics
SYSTEM_PREFIX = "rmq_sys_"
#: born and store host of a salvage record: 0.0.0.0:0
NO_HOST = "0.0.0.0:0"
#: the fewest bytes an end-of-file BLANK takes (CommitLog.END_FILE_MIN_BLANK_LENGTH: TOTALSIZE and magic)
MIN_BLANK = 8


@dataclasses.dataclass(frozen=True)
class Unit:
    """A live ConsumeQueue unit pointing into damaged bytes: its queue, queue offset and (offset, size)."""

    topic: str
    queue_id: int
    queue_offset: int
    offset: int
    size: int


@dataclasses.dataclass(frozen=True)
class SalvageRecord:
    """One record written into a damaged range: at commitlog ``offset``, ``size`` bytes; ``unit`` (the record's
    own queue) and ``lmq`` (its LMQ queues' units) for a tombstone, None and () for a filler or (``blank``) the
    segment's end-of-file BLANK."""

    offset: int
    size: int
    unit: Unit | None
    lmq: tuple[Unit, ...] = ()
    blank: bool = False

    @property
    def written(self) -> str:
        """What it is: tombstone, filler or blank."""
        return "blank" if self.blank else "filler" if self.unit is None else "tombstone"

    def properties(self) -> str:
        """INNER_MULTI_DISPATCH and INNER_MULTI_QUEUE_OFFSET of the LMQ units (if any), then SALVAGED."""
        pairs = []
        if self.lmq:
            pairs.append((PROPERTY_INNER_MULTI_DISPATCH, ",".join(u.topic for u in self.lmq)))
            pairs.append((PROPERTY_INNER_MULTI_QUEUE_OFFSET, ",".join(str(u.queue_offset) for u in self.lmq)))
        pairs.append((SALVAGED, str(self.offset)))
        return format_properties(pairs)

    def encode(self, store_timestamp: int) -> bytes:
        """The record's bytes (exactly ``size``)."""
        if self.blank:
            return struct.pack(">ii", self.size, BLANK_MAGIC_CODE).ljust(self.size, b"\0")
        if self.unit is None:
            head = Message(FILLER_TOPIC, properties=self.properties(), sys_flag=TRANSACTION_ROLLBACK_TYPE)
        else:
            u = self.unit
            head = Message(u.topic, properties=self.properties(), queue_id=u.queue_id, queue_offset=u.queue_offset)
        head = dataclasses.replace(
            head,
            physical_offset=self.offset,
            born_timestamp=store_timestamp,
            store_timestamp=store_timestamp,
            born_host=NO_HOST,
            store_host=NO_HOST,
            v2=len(head.topic.encode()) > 127,
        )
        body_length = self.size - _length(head)
        if body_length < 0:
            raise Refused(f"{self.size} bytes at commitlog offset {self.offset} are too few for a {_what(self)}")
        body = (TOMBSTONE_TEXT if self.unit is not None else b"")[:body_length]
        out = encode_message(dataclasses.replace(head, body=body.ljust(body_length, b" ")))
        assert len(out) == self.size  # the fields add up to TOTALSIZE by construction
        return out


def _length(m: Message) -> int:
    """TOTALSIZE of ``m`` with an empty body."""
    return record_length(m.sys_flag, 0, len(m.topic.encode()), len(m.properties.encode()), m.v2)


def _what(r: SalvageRecord) -> str:
    return r.written if r.unit is None else f"tombstone of {r.unit.topic}/{r.unit.queue_id}"


def min_filler(offset: int) -> int:
    """The fewest bytes a filler at commitlog ``offset`` takes (its SALVAGED property holds the offset)."""
    filler = SalvageRecord(offset, 0, None)
    return _length(Message(FILLER_TOPIC, properties=filler.properties(), sys_flag=TRANSACTION_ROLLBACK_TYPE))


def holds_broker_state(topic: str) -> bool:
    """A topic whose records hold the broker's own state (transaction halves and ops, delays, timers, revives):
    salvage writes no tombstone there (what the broker's services do with one is not proven)."""
    return topic in BROKER_TOPICS or topic.startswith(SYSTEM_PREFIX)


def tombstone(units: Sequence[Unit]) -> SalvageRecord:
    """The tombstone of the units pointing at one record (one offset and size): the one unit of a queue not named
    ``%LMQ%`` is its own, the others its LMQ units. Refused when that cannot be told."""
    own = [u for u in units if not u.topic.startswith(LMQ_PREFIX)]
    u = units[0]
    if len(own) != 1 or len({(v.offset, v.size) for v in units}) != 1:
        names = ", ".join(f"{v.topic}/{v.queue_id} queue offset {v.queue_offset} ({v.size} bytes)" for v in units)
        raise Refused(f"units at commitlog offset {u.offset} ({names}): not one record's own queue: not salvaged")
    if holds_broker_state(own[0].topic):
        raise Refused(
            f"the record at commitlog offset {u.offset} is of {own[0].topic}, a topic whose records hold the broker's "
            "own state (transactions, delays, timers): a tombstone there is not something it knows; not salvaged"
        )
    return SalvageRecord(u.offset, u.size, own[0], tuple(v for v in units if v is not own[0]))


def layout(start: int, end: int, units: Sequence[Unit], segment_end: bool = False) -> list[SalvageRecord]:
    """The records that fill [start, end) exactly: a tombstone where units point (their size), a filler in each
    gap; with ``segment_end`` (``end`` is the segment's end) the bytes after the last tombstone an end-of-file
    BLANK. Refused when units overlap or leave the range, or a gap is too small for a filler or a BLANK."""
    out: list[SalvageRecord] = []
    at = start
    by_offset: dict[int, list[Unit]] = {}
    for u in units:
        by_offset.setdefault(u.offset, []).append(u)
    for offset in sorted(by_offset):
        record = tombstone(by_offset[offset])
        if offset < at or offset + record.size > end:
            own = by_offset[offset][0]
            raise Refused(
                f"the unit of {own.topic}/{own.queue_id} queue offset {own.queue_offset} ({offset}, {own.size} bytes) "
                f"overlaps another or leaves the damaged range [{start}, {end}): not salvaged"
            )
        out += _filler(at, offset)
        out.append(record)
        at = offset + record.size
    return out + (_blank(at, end) if segment_end else _filler(at, end))


def _blank(start: int, end: int) -> list[SalvageRecord]:
    """The end-of-file BLANK of [start, end); Refused when fewer bytes are left than the broker leaves."""
    if end - start < MIN_BLANK:
        raise Refused(
            f"{end - start} bytes at commitlog offset {start} before the segment's end are fewer than the broker "
            f"leaves after its last record ({MIN_BLANK}): this damaged range is not salvaged"
        )
    return [SalvageRecord(start, end - start, None, blank=True)]


def _filler(start: int, end: int) -> list[SalvageRecord]:
    """One filler for [start, end), none when it is empty; Refused when it is shorter than a filler."""
    if start == end:
        return []
    if end - start < min_filler(start):
        raise Refused(
            f"{end - start} bytes at commitlog offset {start} are fewer than a filler record takes "
            f"({min_filler(start)}): this damaged range is not salvaged"
        )
    return [SalvageRecord(start, end - start, None)]


def fill(
    start: int, end: int, units: Sequence[Unit], store_timestamp: int, segment_end: bool = False
) -> tuple[list[SalvageRecord], bytes]:
    """The records of ``layout`` and their bytes, exactly ``end - start``."""
    records = layout(start, end, units, segment_end)
    data = b"".join(r.encode(store_timestamp) for r in records)
    assert len(data) == end - start
    return records, data
