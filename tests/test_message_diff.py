"""storelib.audit.message_diff on hand-made records: what counts as one message in two stores."""

from __future__ import annotations

import random
import zlib
from typing import Any

import pyarrow as pa
import pytest

from storelib.audit.message_diff import (
    FIRST,
    MISSING,
    OTHER,
    QUEUE_OFFSET,
    RECORD_SCHEMA,
    DiffCounts,
    compare,
    with_message_keys,
)


def record(side: int, offset: int, uniq: str | None, queue_offset: int = 0, **fields: Any) -> dict[str, Any]:
    body = fields.pop("body", uniq or "body")
    base = {
        "side": side,
        "segment": "00000000000000000000",
        "commitlog_offset": offset,
        "size": 200,
        "topic": "TopicA",
        "queue_id": 0,
        "queue_offset": queue_offset,
        "sys_flag": 0,
        "tags": None,
        "keys": None,
        "uniq_key": uniq,
        "born_timestamp": 1_700_000_000_000 + offset,
        "store_timestamp": 1_700_000_000_100 + offset,
        "body_crc": zlib.crc32(body.encode()) & 0x7FFFFFFF,
    }
    return base | fields


def diff(rows: list[dict[str, Any]]) -> pa.Table:
    return compare(with_message_keys(pa.Table.from_pylist(rows, RECORD_SCHEMA)))


def kinds(table: pa.Table) -> set[tuple[str, int, int]]:
    return set(zip(table["kind"].to_pylist(), table["side"].to_pylist(), table["commitlog_offset"].to_pylist()))


def log(side: int, uniqs: list[str], start: int = 0, queue_start: int = 0) -> list[dict[str, Any]]:
    return [record(side, start + 200 * i, u, queue_start + i) for i, u in enumerate(uniqs)]


def test_a_store_and_its_copy_are_the_same() -> None:
    keys = [f"K{i}" for i in range(5)]
    out = diff(log(FIRST, keys) + log(OTHER, keys))
    assert len(out) == 0


def test_the_tail_the_slave_never_received_is_missing_from_it() -> None:
    keys = [f"K{i}" for i in range(6)]
    out = diff(log(FIRST, keys) + log(OTHER, keys[:4]))
    assert kinds(out) == {(MISSING, FIRST, 800), (MISSING, FIRST, 1000)}


def test_same_offset_different_record_is_not_the_same_message() -> None:
    """Logs that went their own ways: the promoted slave wrote other messages where the old master's tail was."""
    out = diff(log(FIRST, ["K0", "K1", "OLD"]) + log(OTHER, ["K0", "K1", "NEW"]))
    assert kinds(out) == {(MISSING, FIRST, 400), (MISSING, OTHER, 400)}


def test_a_message_sent_again_is_found_by_its_uniq_key_and_its_queue_offset_compared() -> None:
    first = log(FIRST, ["K0", "K1", "K2"])
    other = log(OTHER, ["K0", "K1", "NEW", "K2"])  # K2 resent after the failover: another offset and queue offset
    out = diff(first + other)
    assert kinds(out) == {(MISSING, OTHER, 400), (QUEUE_OFFSET, FIRST, 400)}
    row = out.filter(pa.compute.equal(out["kind"], QUEUE_OFFSET)).to_pylist()[0]
    assert (row["queue_offset"], row["other_queue_offset"], row["other_commitlog_offset"]) == (2, 3, 600)


def test_a_message_held_more_times_lacks_the_rest() -> None:
    """A consumer's retries: one UNIQ_KEY, a record each time in %RETRY%; the slave got the first only."""
    first = log(FIRST, ["K0", "K1", "K1"])
    out = diff(first + log(OTHER, ["K0", "K1"]))
    assert kinds(out) == {(MISSING, FIRST, 400)}


def test_one_uniq_key_in_two_topics_is_two_messages() -> None:
    """A delayed message: SCHEDULE_TOPIC_XXXX's record, then its topic's, under one UNIQ_KEY."""
    first = [record(FIRST, 0, "K", topic="SCHEDULE_TOPIC_XXXX"), record(FIRST, 200, "K")]
    out = diff([*first, record(OTHER, 0, "K", topic="SCHEDULE_TOPIC_XXXX")])
    assert kinds(out) == {(MISSING, FIRST, 200)}


def test_records_without_uniq_key_are_matched_by_their_content() -> None:
    first = [record(FIRST, 0, None, body="a"), record(FIRST, 200, None, body="b")]
    moved = record(OTHER, 400, None, body="b", born_timestamp=first[1]["born_timestamp"])  # same message, elsewhere
    changed = record(OTHER, 0, None, body="other")  # same place, other bytes
    out = diff([*first, moved, changed])
    assert kinds(out) == {(MISSING, FIRST, 0), (MISSING, OTHER, 0)}


def test_a_rewritten_record_at_the_same_offset_is_not_the_same_place() -> None:
    """Same offset and UNIQ_KEY but another store timestamp: written again (paired by key, not by place)."""
    first = log(FIRST, ["K0", "K1"])
    other = [*log(OTHER, ["K0"]), record(OTHER, 200, "K1", 1, store_timestamp=5)]
    assert len(diff(first + other)) == 0  # paired as moved: same queue place


@pytest.mark.parametrize("seed", range(6))
def test_failover_shapes_by_seed_and_spread_over_tasks(seed: int) -> None:
    """A shared prefix, the old master's tail, the new master's messages (some of them the old tail sent again);
    the missing ones are exactly the old tail's messages never sent again, and the new ones, whatever the
    records' order and however the keys are spread over tasks."""
    rnd = random.Random(seed)
    prefix = [f"P{seed}-{i}" for i in range(rnd.randint(0, 30))]
    tail = [f"T{seed}-{i}" for i in range(rnd.randint(1, 20))]
    resent = rnd.sample(tail, rnd.randint(0, len(tail)))
    new = [f"N{seed}-{i}" for i in range(rnd.randint(0, 10))]
    after = resent + new
    rnd.shuffle(after)
    rows = log(FIRST, prefix + tail) + log(OTHER, prefix + after)
    rows = [
        r | {"store_timestamp": r["store_timestamp"] + (r["side"] and r["commitlog_offset"] >= 200 * len(prefix))}
        for r in rows
    ]  # the new master stored its tail at other times
    rnd.shuffle(rows)
    tasks = rnd.randint(1, 4)
    keyed = with_message_keys(pa.Table.from_pylist(rows, RECORD_SCHEMA))
    parts = [
        compare(keyed.filter(pa.array([hash(k) % tasks == t for k in keyed["key"].to_pylist()]))) for t in range(tasks)
    ]
    out = pa.concat_tables(parts)
    missing = {(r["side"], r["uniq_key"]) for r in out.to_pylist() if r["kind"] == MISSING}
    assert missing == {(FIRST, k) for k in set(tail) - set(resent)} | {(OTHER, k) for k in new}
    counts = DiffCounts.of(
        (len(prefix) + len(tail), len(prefix) + len(after)), [(r["kind"], r["side"], 1) for r in out.to_pylist()]
    )
    assert counts.paired == (len(prefix) + len(resent),) * 2
    assert counts.same == (not out.num_rows)
