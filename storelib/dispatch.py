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

from storelib import kernel
from storelib.commitlog import RecordBatch, find_properties
from storelib.config import BrokerConfig
from storelib.constants import (
    INT32_MAX,
    INT32_MIN,
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
from storelib.javahash import combine_hash, index_key_hash, java_hash_batch, java_hash_utf8_runs

_JAVA_INT = re.compile(r"[+-]?\d+\Z")  # Integer.parseInt: a sign, then decimal digits of any script


@dataclasses.dataclass
class Dispatch:
    """What one RecordBatch dispatches. Index arrays are in put order (commitlog order, UNIQ_KEY first)."""

    batch: RecordBatch
    to_consume_queue: np.ndarray  # bool per record
    tags_code: np.ndarray  # int64 per record
    multi_dispatch: np.ndarray  # bool per record: INNER_MULTI_DISPATCH present (LMQ, not rebuilt)
    index_record: np.ndarray  # int64: the record (position in the batch) of each index entry
    index_key_hash: np.ndarray  # int32: IndexFile keyHash of each index entry
    bad_delay: list[tuple[int, str]]  # (record position, DELAY value) that Integer.parseInt rejects
    values: dict[str, tuple[np.ndarray, np.ndarray]]  # TAGS/KEYS/UNIQ_KEY value (start, length) in batch.buf

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


def _parse_int(value: str) -> int | None:
    """``Integer.parseInt(value)``, or None where it throws (not a number, or outside the int range)."""
    if not _JAVA_INT.match(value):
        return None
    try:
        parsed = int(value)
    except ValueError:  # more digits than Python's int() reads
        return None
    return parsed if INT32_MIN <= parsed <= INT32_MAX else None


def dispatch_batch(batch: RecordBatch, cfg: BrokerConfig) -> Dispatch:
    """Dispatch a batch with numpy: no per-record Python except for non-ASCII strings and delay records."""
    n = len(batch)
    a = batch.buf
    tran = transaction_type(batch.sys_flag)
    to_cq = (tran == TRANSACTION_NOT_TYPE) | (tran == TRANSACTION_COMMIT_TYPE)
    to_index = tran != TRANSACTION_ROLLBACK_TYPE if cfg.messageIndexEnable else np.zeros(n, dtype=bool)
    names = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, PROPERTY_DELAY, PROPERTY_INNER_MULTI_DISPATCH)
    values = find_properties(a, batch.props_start, batch.props_len, names)

    tags_code = np.zeros(n, dtype=np.int64)
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

    record, key_start, key_len = _index_key_runs(a, values, to_index)
    key_hash, key_units = java_hash_utf8_runs(a, key_start, key_len)
    prefix = java_hash_batch([f"{t}#" for t in batch.topic_names])
    full_hash = combine_hash(prefix[batch.topic_code[record]], key_hash, key_units) if len(record) else key_hash
    return Dispatch(
        batch=batch,
        to_consume_queue=to_cq,
        tags_code=tags_code,
        multi_dispatch=values[PROPERTY_INNER_MULTI_DISPATCH][0] >= 0,
        index_record=record,
        index_key_hash=index_key_hash(full_hash),
        bad_delay=bad_delay,
        values={k: values[k] for k in (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY)},
    )


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
