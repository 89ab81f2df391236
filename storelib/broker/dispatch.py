"""Dispatch rules: what each message record contributes to the ConsumeQueue and the IndexFile.

- ConsumeQueue: transaction type NOT_TYPE or COMMIT (PREPARED and ROLLBACK are not).
- IndexFile (messageIndexEnable): every type except ROLLBACK; keys ``topic#UNIQ_KEY`` first,
  then ``topic#k`` for each non-empty space-separated KEYS element, then (5.5.0+) ``topic#T#<TAGS>``.
- tagsCode: ``TAGS.hashCode()`` sign-extended to 64 bits, 0 when absent or empty; in
  ``SCHEDULE_TOPIC_XXXX`` with ``DELAY`` > 0: storeTimestamp + delay of that level (level
  capped at the highest; a level with no entry gives storeTimestamp + 1000).
- BatchConsumeQueue (5.0+, ``queue.type=BatchCQ`` topics): the record's unit goes to its BatchConsumeQueue
  with msgBaseOffset/batchSize from INNER_BASE/INNER_NUM (storelib.formats.batchcq).
- LMQ (``enableMultiDispatch``): after its own unit, a record with INNER_MULTI_DISPATCH and
  INNER_MULTI_QUEUE_OFFSET (comma lists of equal length) puts the same unit into each named queue at the
  given queue offset; queueId 0 for ``%LMQ%`` names with ``enableLmq``, else the record's. Which source
  topics and names take part is the version's rule (storelib.broker.versions).
- ``__CRC32#`` (5.2.0+, optional): CRC32 of the record's first TOTALSIZE-20 bytes, masked to 31 bits, as
  decimal digits least significant first; a mismatch is reported, the record is still dispatched.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import zlib
from typing import Any

import numpy as np

from storelib.broker.config import BrokerConfig
from storelib.broker.rule_choice import LMQ_ENDS_KEPT, RuleInputs
from storelib.broker.versions import CRC32_PIECE
from storelib.constants import (
    INT32_MAX,
    INT32_MIN,
    KEY_SEPARATOR,
    LMQ_PREFIX,
    PROPERTY_CRC32,
    PROPERTY_DELAY,
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_INNER_MULTI_QUEUE_OFFSET,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from storelib.formats import kernel
from storelib.formats.batchcq import PROPERTY_INNER_BASE, PROPERTY_INNER_NUM
from storelib.formats.javahash import combine_hash, index_key_hash, java_hash_batch, java_hash_utf8_runs
from storelib.formats.scanner import RecordBatch, find_properties

_JAVA_INT = re.compile(r"[+-]?\d+\Z")  # Integer.parseInt: a sign, then decimal digits of any script
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
TAG_KEY_INFIX = "T#"  # MessageConst.INDEX_TAG_TYPE "T", then the key separator


@dataclasses.dataclass
class LmqUnits:
    """ConsumeQueue units a batch puts into LMQ queues: each the unit of record ``record``."""

    record: np.ndarray  # int64 position in the batch
    queue: list[str]  # queue (topic) name
    queue_id: np.ndarray  # int32
    queue_offset: np.ndarray  # int64, from INNER_MULTI_QUEUE_OFFSET


@dataclasses.dataclass
class Dispatch:
    """What one RecordBatch dispatches. Index arrays are in put order (commitlog order, UNIQ_KEY first)."""

    batch: RecordBatch
    to_consume_queue: np.ndarray  # bool per record
    tags_code: np.ndarray  # int64 per record
    multi_dispatch: np.ndarray  # bool per record: INNER_MULTI_DISPATCH present
    lmq: LmqUnits  # the units put into LMQ queues
    batch_cq: np.ndarray  # bool per record: its unit goes to a BatchConsumeQueue (not the ConsumeQueue)
    msg_base_offset: np.ndarray  # int64 per record: INNER_BASE, else QUEUEOFFSET
    batch_size: np.ndarray  # int16 per record: INNER_NUM, else 1
    index_record: np.ndarray  # int64: the record (position in the batch) of each index entry
    index_key_hash: np.ndarray  # int32: IndexFile keyHash of each index entry
    bad_delay: list[tuple[int, str]]  # (record position, DELAY value) that Integer.parseInt rejects
    bad_crc_property: list[tuple[int, str]]  # (record position, detail): __CRC32# present and not matching
    values: dict[str, tuple[np.ndarray, np.ndarray]]  # TAGS/KEYS/UNIQ_KEY value (start, length) in batch.buf
    to_index: np.ndarray  # bool per record: its keys go to the IndexFile
    lmq_sources: list[tuple[str, str]]  # (source topic, INNER_MULTI_DISPATCH) of records whose append gave both
    split_pair_records: int  # records a release before 4.9.1 reads other properties of (_split_pair_records)

    @property
    def tags(self) -> list[str | None]:
        return self.batch.text(*self.values[PROPERTY_TAGS])

    @property
    def keys(self) -> list[str | None]:
        return self.batch.text(*self.values[PROPERTY_KEYS])

    @property
    def uniq_key(self) -> list[str | None]:
        return self.batch.text(*self.values[PROPERTY_UNIQ_KEY])


def transaction_type(sys_flag: np.ndarray) -> np.ndarray:
    return sys_flag & TRANSACTION_MASK


def deliver_timestamp(level: int, store_timestamp: int, delay_levels_ms: tuple[int, ...]) -> int:
    """``ScheduleMessageService.computeDeliverTimestamp`` for a level already capped at the maximum."""
    if 1 <= level <= len(delay_levels_ms):
        return store_timestamp + delay_levels_ms[level - 1]
    return store_timestamp + 1000


def index_keys(topic: str, uniq_key: str | None, keys: str | None) -> list[str]:
    """The IndexFile keys of one message, in put order."""
    out = [f"{topic}#{uniq_key}"] if uniq_key is not None else []
    if keys:
        out.extend(f"{topic}#{k}" for k in keys.split(KEY_SEPARATOR) if k)
    return out


def _parse_int(value: str, low: int = INT32_MIN, high: int = INT32_MAX) -> int | None:
    """``Integer.parseInt(value)`` (``Long``/``Short`` with their bounds), or None where it throws."""
    if not _JAVA_INT.match(value):
        return None
    try:
        parsed = int(value)
    except ValueError:  # more digits than Python's int() reads
        return None
    return parsed if low <= parsed <= high else None


def java_split(value: str, sep: str) -> list[str]:
    """``String.split(sep)`` for a one-character literal: trailing empty strings are dropped."""
    parts = value.split(sep)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


def lmq_targets(cfg: BrokerConfig, topic: str, queue_id: int, names: str, offsets: str) -> list[tuple[str, int, int]]:
    """(queue, queueId, queue offset) of each LMQ unit of one dispatched record of ``topic``."""
    rules = cfg.rules
    if not rules.lmq_source_allowed(topic) or not names.strip() or not offsets.strip():
        return []
    names_list, offsets_list = java_split(names, ","), java_split(offsets, ",")
    if len(names_list) != len(offsets_list):  # the broker logs "[bug]" and dispatches none
        return []
    out = []
    for name, offset in zip(names_list, offsets_list):
        is_lmq = name.startswith(LMQ_PREFIX)
        parsed = _parse_int(offset, INT64_MIN, INT64_MAX)
        if (
            (rules.lmq_skip_path_names and "/" in name)
            or (rules.lmq_names_need_prefix and not is_lmq)
            or parsed is None
        ):
            continue
        out.append((name, 0 if cfg.enableLmq and is_lmq else queue_id, parsed))
    return out


#: the properties dispatch reads
_DISPATCHED_PROPERTIES = (
    PROPERTY_TAGS,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_DELAY,
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_INNER_MULTI_QUEUE_OFFSET,
    PROPERTY_INNER_NUM,
    PROPERTY_INNER_BASE,
    PROPERTY_CRC32,
)
#: what tells a consumer's copy and the topic it was first consumed from (``_lmq_units``)
_COPY_PROPERTIES = (PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC)


def dispatch_batch(batch: RecordBatch, cfg: BrokerConfig) -> Dispatch:
    """Dispatch a batch with numpy: no per-record Python except for non-ASCII strings and delay records."""
    n = len(batch)
    a = batch.buf
    tran = transaction_type(batch.sys_flag)
    to_cq = (tran == TRANSACTION_NOT_TYPE) | (tran == TRANSACTION_COMMIT_TYPE)
    to_index = tran != TRANSACTION_ROLLBACK_TYPE if cfg.messageIndexEnable else np.zeros(n, dtype=bool)
    values = find_properties(
        a, batch.props_start, batch.props_len, _DISPATCHED_PROPERTIES, cfg.rules.properties_split_pairs
    )
    tags_code, bad_delay = _tags_codes(batch, values, cfg)
    record, key_start, key_len = _index_key_runs(a, values, to_index)
    record, key_start, key_len, tag_key = _with_tag_keys(record, key_start, key_len, values, to_index, cfg)
    key_hash, key_units = java_hash_utf8_runs(a, key_start, key_len)
    prefixes = java_hash_batch([f"{t}#{infix}" for infix in ("", TAG_KEY_INFIX) for t in batch.topic_names])
    prefix = prefixes[batch.topic_code[record] + tag_key * len(batch.topic_names)]
    full_hash = combine_hash(prefix, key_hash, key_units) if len(record) else key_hash
    batch_cq = to_cq & np.isin(batch.topic_code, [c for c, t in enumerate(batch.topic_names) if cfg.is_batch_cq(t)])
    base, size = _batch_fields(batch, values)
    lmq, lmq_sources = _lmq_units(batch, values, to_cq & ~batch_cq, cfg)
    return Dispatch(
        batch=batch,
        to_consume_queue=to_cq,
        tags_code=tags_code,
        multi_dispatch=values[PROPERTY_INNER_MULTI_DISPATCH][0] >= 0,
        lmq=lmq,
        batch_cq=batch_cq,
        msg_base_offset=base,
        batch_size=size,
        index_record=record,
        index_key_hash=index_key_hash(full_hash),
        bad_delay=bad_delay,
        bad_crc_property=_bad_crc_property(batch, values[PROPERTY_CRC32]) if cfg.checkCRCOnRecover else [],
        values={k: values[k] for k in (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY)},
        to_index=to_index,
        lmq_sources=lmq_sources,
        split_pair_records=_split_pair_records(batch, values, cfg),
    )


def _split_pair_records(batch: RecordBatch, values: dict[str, tuple[np.ndarray, np.ndarray]], cfg: BrokerConfig) -> int:
    """Records with a dispatched property whose value, the pair split at its first 0x01, holds 0x01 too: releases
    before 4.9.1 (``split``: a pair of three parts is none, trailing 0x01s dropped) read it otherwise."""
    if cfg.rules.properties_split_pairs:
        values = find_properties(batch.buf, batch.props_start, batch.props_len, _DISPATCHED_PROPERTIES)
    ones = np.concatenate(([0], np.cumsum(batch.buf == 1)))
    odd = np.zeros(len(batch), bool)
    for start, length in values.values():
        found = start >= 0
        odd[found] |= ones[start[found] + length[found]] > ones[start[found]]
    return int(odd.sum())


def _tags_codes(
    batch: RecordBatch, values: dict[str, tuple[np.ndarray, np.ndarray]], cfg: BrokerConfig
) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """Each record's tagsCode: the Java hash of its TAGS, or for a SCHEDULE_TOPIC_XXXX record with a DELAY level
    its deliver timestamp; and the schedule records whose DELAY is no number (record index, value)."""
    a = batch.buf
    tags_code = np.zeros(len(batch), dtype=np.int64)
    tag_start, tag_len = values[PROPERTY_TAGS]
    tagged = np.flatnonzero(tag_start >= 0)
    tags_code[tagged] = java_hash_utf8_runs(a, tag_start[tagged], tag_len[tagged])[0]
    bad_delay: list[tuple[int, str]] = []
    delay_start, delay_len = values[PROPERTY_DELAY]
    levels = cfg.delay_levels_ms
    schedule = [c for c, t in enumerate(batch.topic_names) if t == SCHEDULE_TOPIC]
    for i in np.flatnonzero((delay_start >= 0) & np.isin(batch.topic_code, schedule)).tolist():
        value = a[delay_start[i] : delay_start[i] + delay_len[i]].tobytes().decode("utf-8", "replace")
        parsed = _parse_int(value)
        if parsed is None:
            bad_delay.append((i, value))
            continue
        level = min(parsed, len(levels))
        if level > 0:
            tags_code[i] = deliver_timestamp(level, int(batch.store_timestamp[i]), levels)
    return tags_code, bad_delay


def rule_inputs(d: Dispatch, cfg: BrokerConfig) -> RuleInputs:
    """What of a batch the rule sets of different releases dispatch differently (storelib.broker.rule_choice)."""
    b = d.batch
    batch_topics = [c for c, t in enumerate(b.topic_names) if t in cfg.batchCQTopics and not cfg.rocksdb_consume_queue]
    names = [name for _, text in d.lmq_sources for name in java_split(text, ",")]
    return RuleInputs(
        tagged_index_records=int((d.to_index & (d.values[PROPERTY_TAGS][0] >= 0)).sum()),
        batch_cq_records=int((d.to_consume_queue & np.isin(b.topic_code, batch_topics)).sum()),
        lmq_sources=tuple(sorted(collections.Counter(topic for topic, _ in d.lmq_sources).items())),
        lmq_unprefixed_names=sum(not n.startswith(LMQ_PREFIX) for n in names),
        lmq_path_names=sum("/" in n for n in names),
        index_records=int(d.to_index.sum()),
        split_pair_records=d.split_pair_records,
        **lmq_steps(d.lmq),
    )


def lmq_steps(lmq: LmqUnits) -> dict[str, Any]:
    """The RuleInputs fields of a batch's LMQ units, each queue's in commitlog order: the units whose offset is not
    one past the unit before them in their queue, and each queue's first and last offset."""
    if not lmq.queue:
        return {}
    names, code = np.unique(np.array(lmq.queue, dtype=object), return_inverse=True)
    order = np.lexsort((lmq.record, code))
    code, offset = code[order], lmq.queue_offset[order]
    same = code[1:] == code[:-1]
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    ends = np.append(starts[1:], len(code)) - 1
    first, last = offset[starts].tolist(), offset[ends].tolist()
    unknown = len(starts) > LMQ_ENDS_KEPT
    return {
        "lmq_out_of_step": int((same & (offset[1:] != offset[:-1] + 1)).sum()),
        "lmq_ends": () if unknown else tuple(zip(names[code[starts]].tolist(), first, last)),
        "lmq_ends_unknown": unknown,
    }


def _with_tag_keys(
    record: np.ndarray,
    start: np.ndarray,
    length: np.ndarray,
    values: dict[str, tuple[np.ndarray, np.ndarray]],
    to_index: np.ndarray,
    cfg: BrokerConfig,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The index key runs plus, under 5.5.0+ rules, each record's ``topic#T#<TAGS>`` key after its others;
    the last array says which runs are tag keys (their hash prefix is ``topic#T#``)."""
    plain = np.zeros(len(record), np.int64)
    if not cfg.rules.index_tag_keys:
        return record, start, length, plain
    tag_start, tag_len = values[PROPERTY_TAGS]
    t = np.flatnonzero(to_index & (tag_start >= 0))  # find_properties skips empty values: TAGS is non-empty
    is_tag = np.concatenate((plain, np.ones(len(t), np.int64)))
    record = np.concatenate((record, t))
    order = np.lexsort((is_tag, record))  # stable: a record's own keys keep their order, its tag key last
    return (
        record[order],
        np.concatenate((start, tag_start[t]))[order],
        np.concatenate((length, tag_len[t]))[order],
        is_tag[order],
    )


def _text(a: np.ndarray, start: int, length: int) -> str:
    return a[start : start + length].tobytes().decode("utf-8", "replace")


def _batch_fields(
    batch: RecordBatch, values: dict[str, tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """msgBaseOffset and batchSize per record (``CommitLog.setBatchSizeIfNeeded``): INNER_BASE and INNER_NUM
    when both exist, else QUEUEOFFSET and 1 (a value that does not parse also gives QUEUEOFFSET and 1)."""
    base, size = batch.queue_offset.astype(np.int64), np.ones(len(batch), np.int16)
    (num_start, num_len), (base_start, base_len) = values[PROPERTY_INNER_NUM], values[PROPERTY_INNER_BASE]
    for i in np.flatnonzero((num_start >= 0) & (base_start >= 0)).tolist():
        b = _parse_int(_text(batch.buf, base_start[i], base_len[i]), INT64_MIN, INT64_MAX)
        n = _parse_int(_text(batch.buf, num_start[i], num_len[i]), INT16_MIN, INT16_MAX)
        if b is not None and n is not None:
            base[i], size[i] = b, n
    return base, size


def _lmq_units(
    batch: RecordBatch, values: dict[str, tuple[np.ndarray, np.ndarray]], dispatched: np.ndarray, cfg: BrokerConfig
) -> tuple[LmqUnits, list[tuple[str, str]]]:
    """The LMQ units of the records whose own unit went to a ConsumeQueue (``dispatched``), and the (source
    topic, INNER_MULTI_DISPATCH) of every such record holding both LMQ properties: the topic whose append gave
    them. A consumer's copy (ORIGIN_MESSAGE_ID) keeps the original's properties, INNER_MULTI_QUEUE_OFFSET too,
    whatever its own append does (the real 5.3.3 broker's consumers store: retry, dead-letter and delay-level
    copies hold it, its own delay-level appends do not): its source is the original's topic, RETRY_TOPIC, and
    none when that is absent."""
    rows: list[tuple[int, str, int, int]] = []
    sources: list[tuple[str, str]] = []
    (ns, nl), (os_, ol) = values[PROPERTY_INNER_MULTI_DISPATCH], values[PROPERTY_INNER_MULTI_QUEUE_OFFSET]
    lmq = np.flatnonzero(dispatched & (ns >= 0) & (os_ >= 0)) if cfg.multi_dispatch_to_files else np.zeros(0, int)
    copies = find_properties(  # read of the few LMQ records only, not in every record's pass
        batch.buf,
        batch.props_start[lmq],
        batch.props_len[lmq],
        _COPY_PROPERTIES,
        cfg.rules.properties_split_pairs,
    )
    (cs, _), (rs, rl) = copies[PROPERTY_ORIGIN_MESSAGE_ID], copies[PROPERTY_RETRY_TOPIC]
    topics = batch.topic_names
    for k, i in enumerate(lmq.tolist()):
        names, offsets = _text(batch.buf, ns[i], nl[i]), _text(batch.buf, os_[i], ol[i])
        topic, queue_id = topics[batch.topic_code[i]], int(batch.queue_id[i])
        if cs[k] < 0:
            sources.append((topic, names))
        elif rs[k] >= 0:
            sources.append((_text(batch.buf, rs[k], rl[k]), names))
        rows += [(i, *target) for target in lmq_targets(cfg, topic, queue_id, names, offsets)]
    units = LmqUnits(
        record=np.array([r[0] for r in rows], np.int64),
        queue=[r[1] for r in rows],
        queue_id=np.array([r[2] for r in rows], np.int32),
        queue_offset=np.array([r[3] for r in rows], np.int64),
    )
    return units, sources


def property_crc(value: str) -> int | None:
    """The ``__CRC32#`` value: digits least significant first (read from the last to the first), else None."""
    return int(value[::-1]) if value.isascii() and value.isdigit() else None


def computed_property_crc(record: bytes | memoryview) -> int:
    """What a record's ``__CRC32#`` must hold: CRC32 of its bytes but the last CRC32_PIECE, & Integer.MAX_VALUE."""
    return zlib.crc32(record[: len(record) - CRC32_PIECE]) & INT32_MAX


def _bad_crc_property(batch: RecordBatch, crc_value: tuple[np.ndarray, np.ndarray]) -> list[tuple[int, str]]:
    """Records holding ``__CRC32#`` whose value is not the CRC32 of their first TOTALSIZE-20 bytes."""
    start, length = crc_value
    out = []
    record_start = batch.props_start + batch.props_len - batch.total_size
    raw = batch.buf.data
    for i in np.flatnonzero(start >= 0).tolist():
        stored = property_crc(_text(batch.buf, start[i], length[i]))
        begin = int(record_start[i])
        computed = computed_property_crc(raw[begin : begin + int(batch.total_size[i])])
        if stored != computed:
            out.append((i, f"__CRC32# {stored if stored is not None else 'unreadable'} stored, {computed} computed"))
    return out


def _index_key_runs(
    a: np.ndarray, values: dict[str, tuple[np.ndarray, np.ndarray]], to_index: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(record, start, length) of every index key in put order: UNIQ_KEY, then each non-empty KEYS token."""
    uniq_start, uniq_len = values[PROPERTY_UNIQ_KEY]
    keys_start, keys_len = values[PROPERTY_KEYS]
    return kernel.key_runs(
        a,
        *map(kernel.as_int64, (uniq_start, uniq_len, keys_start, keys_len)),
        np.ascontiguousarray(to_index, dtype=np.bool_),
    )
