"""Dispatch rules: what each message record contributes to the ConsumeQueue and the IndexFile.

- ConsumeQueue: transaction type NOT_TYPE or COMMIT (PREPARED and ROLLBACK are not).
- IndexFile (messageIndexEnable): every type except ROLLBACK; keys ``topic#UNIQ_KEY`` first,
  then ``topic#k`` for each non-empty space-separated KEYS element.
- tagsCode: ``TAGS.hashCode()`` sign-extended to 64 bits, 0 when absent or empty; in
  ``SCHEDULE_TOPIC_XXXX`` with ``DELAY`` > 0: storeTimestamp + delay of that level (level
  capped at the highest; a level with no entry gives storeTimestamp + 1000).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from storelib.commitlog import RecordBatch
from storelib.config import BrokerConfig
from storelib.constants import (
    KEY_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from storelib.javahash import index_key_hash, java_hash_batch

_JAVA_INT = re.compile(r"[+-]?[0-9]+\Z")


@dataclasses.dataclass
class Dispatch:
    """What one RecordBatch dispatches. Index arrays are in put order (commitlog order, UNIQ_KEY first)."""

    to_consume_queue: np.ndarray  # bool per record
    tags_code: np.ndarray  # int64 per record
    tags: list[str | None]
    keys: list[str | None]
    uniq_key: list[str | None]
    multi_dispatch: np.ndarray  # bool per record: INNER_MULTI_DISPATCH present (LMQ, not rebuilt)
    index_record: np.ndarray  # int64: the record (position in the batch) of each index entry
    index_key_hash: np.ndarray  # int32: IndexFile keyHash of each index entry
    bad_delay: list[tuple[int, str]]  # (record position, DELAY value) that Integer.parseInt rejects


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


def dispatch_batch(batch: RecordBatch, cfg: BrokerConfig) -> Dispatch:
    n = len(batch)
    tran = transaction_type(batch.sys_flag)
    to_cq = (tran == TRANSACTION_NOT_TYPE) | (tran == TRANSACTION_COMMIT_TYPE)
    to_index = tran != TRANSACTION_ROLLBACK_TYPE if cfg.messageIndexEnable else np.zeros(n, dtype=bool)
    props = batch.properties
    tags = [p.get(PROPERTY_TAGS) for p in props]
    keys = [p.get(PROPERTY_KEYS) for p in props]
    uniq = [p.get(PROPERTY_UNIQ_KEY) for p in props]
    multi = np.fromiter((PROPERTY_INNER_MULTI_DISPATCH in p for p in props), dtype=bool, count=n)

    tags_code = np.zeros(n, dtype=np.int64)
    tagged = [i for i, t in enumerate(tags) if t]
    if tagged:
        distinct = sorted({tags[i] for i in tagged})
        hashes = dict(zip(distinct, java_hash_batch(distinct).tolist()))
        tags_code[tagged] = [hashes[tags[i]] for i in tagged]

    bad_delay: list[tuple[int, str]] = []
    levels = cfg.delay_levels_ms
    for i, topic in enumerate(batch.topic):
        if topic == SCHEDULE_TOPIC:
            value = props[i].get(PROPERTY_DELAY)
            if value is None:
                continue
            if not _JAVA_INT.match(value):
                bad_delay.append((i, value))
                continue
            level = min(int(value), len(levels))
            if level > 0:
                tags_code[i] = deliver_timestamp(level, int(batch.store_timestamp[i]), levels)

    index_strings: list[str] = []
    index_record: list[int] = []
    for i in np.flatnonzero(to_index).tolist():
        ks = index_keys(batch.topic[i], uniq[i], keys[i])
        index_strings.extend(ks)
        index_record.extend([i] * len(ks))
    return Dispatch(
        to_consume_queue=to_cq,
        tags_code=tags_code,
        tags=tags,
        keys=keys,
        uniq_key=uniq,
        multi_dispatch=multi,
        index_record=np.asarray(index_record, dtype=np.int64),
        index_key_hash=index_key_hash(java_hash_batch(index_strings)),
        bad_delay=bad_delay,
    )
