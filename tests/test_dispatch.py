"""Dispatch rules: tagsCode, delay deliver times, transaction types, and IndexFile keys."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storelib.broker.config import BrokerConfig
from storelib.broker.dispatch import deliver_timestamp, dispatch_batch, index_keys, transaction_type
from storelib.formats.commitlog import Message, parse_properties
from storelib.formats.javahash import java_hash
from tests.builders import batch_of, msg

CFG = BrokerConfig()
STORE_TS = 1795312717903
SCHEDULE = "SCHEDULE_TOPIC_XXXX"


def dispatch(*messages, cfg: BrokerConfig = CFG):
    return dispatch_batch(batch_of(list(messages)), cfg)


def key_hash(key: str) -> int:
    """IndexFile keyHash: abs(hashCode), 0 for Integer.MIN_VALUE."""
    h = abs(java_hash(key))
    return 0 if h == 2**31 else h


# --- tagsCode ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("props", "tags_code"),
    [
        ({}, 0),
        ({"TAGS": ""}, 0),  # an empty value is not even a property
        ({"KEYS": "k"}, 0),
        ({"TAGS": "d"}, 100),
        ({"TAGS": "refund"}, -934813832),  # negative hashCode, sign-extended to 64 bits
        # multi-byte tags: the tagsCode values the real 4.9.8 broker wrote in the sample store
        ({"TAGS": "ação"}, 3118866),
        ({"TAGS": "Zahlung-ü"}, -1193753550),
        ({"TAGS": "\U0001f4e6ship"}, 670013957),
        ({"TAGS": "new||vip"}, 1404363517),
    ],
)
def test_tags_code(props: dict[str, str], tags_code: int) -> None:
    d = dispatch(msg("TopicA", props), msg("TopicA", {"TAGS": "d"}))
    assert d.tags_code.dtype == np.int64
    assert d.tags_code.tolist() == [tags_code, 100]
    assert d.tags == [props.get("TAGS") or None, "d"]


@pytest.mark.parametrize(
    ("delay", "tags_code"),
    [
        ("1", STORE_TS + 1_000),
        ("3", STORE_TS + 10_000),
        ("+3", STORE_TS + 10_000),  # Integer.parseInt takes a sign
        ("\u0663", STORE_TS + 10_000),  # and any Unicode decimal digit (ARABIC-INDIC DIGIT THREE)
        ("17", STORE_TS + 3_600_000),
        ("18", STORE_TS + 7_200_000),
        ("19", STORE_TS + 7_200_000),  # above the highest level: capped at it
        ("2147483647", STORE_TS + 7_200_000),
        ("0", 3541613),  # level 0 or below: the TAGS hash ("sudo") stays
        ("-1", 3541613),
        ("-2147483648", 3541613),
    ],
)
def test_schedule_topic_tags_code_is_the_deliver_time(delay: str, tags_code: int) -> None:
    d = dispatch(msg(SCHEDULE, {"TAGS": "sudo", "DELAY": delay}, store_timestamp=STORE_TS))
    assert d.tags_code.tolist() == [tags_code]
    assert d.bad_delay == []


@pytest.mark.parametrize(
    "delay",
    ["abc", "3s", " 3", "3 ", "1.0", "+", "-", "2147483648", "-2147483649", "99999999999", "9" * 5000],
    ids=lambda v: v if len(v) < 20 else f"{len(v)}-digits",
)
def test_delay_that_integer_parse_int_rejects_is_reported(delay: str) -> None:
    d = dispatch(
        msg(SCHEDULE, {"DELAY": "2"}, store_timestamp=STORE_TS),
        msg(SCHEDULE, {"TAGS": "sudo", "DELAY": delay}, store_timestamp=STORE_TS),
    )
    assert d.bad_delay == [(1, delay)]
    assert d.tags_code.tolist() == [STORE_TS + 5_000, 3541613]


def test_delay_outside_the_schedule_topic_keeps_the_tags_hash() -> None:
    """A delivered delay message still carries DELAY; only SCHEDULE_TOPIC_XXXX gets a deliver time."""
    d = dispatch(msg("Audit-Log", {"TAGS": "sudo", "DELAY": "2", "REAL_TOPIC": "Audit-Log"}, store_timestamp=STORE_TS))
    assert d.tags_code.tolist() == [3541613]
    d = dispatch(msg(SCHEDULE, {"TAGS": "sudo"}, store_timestamp=STORE_TS))
    assert d.tags_code.tolist() == [3541613]


def test_custom_delay_levels() -> None:
    cfg = BrokerConfig(messageDelayLevel="2s 1h")
    d = dispatch(
        msg(SCHEDULE, {"DELAY": "1"}, store_timestamp=STORE_TS),
        msg(SCHEDULE, {"DELAY": "5"}, store_timestamp=STORE_TS + 1),
        cfg=cfg,
    )
    assert d.tags_code.tolist() == [STORE_TS + 2_000, STORE_TS + 1 + 3_600_000]
    no_levels = BrokerConfig(messageDelayLevel="")
    d = dispatch(msg(SCHEDULE, {"TAGS": "d", "DELAY": "1"}, store_timestamp=STORE_TS), cfg=no_levels)
    assert d.tags_code.tolist() == [100]


def test_deliver_timestamp_of_a_level_without_an_entry() -> None:
    assert deliver_timestamp(2, 1000, (5, 7)) == 1007
    assert deliver_timestamp(3, 1000, (5, 7)) == 2000
    assert deliver_timestamp(0, 1000, (5, 7)) == 2000


# --- transaction types ------------------------------------------------------------------------


def test_transaction_types_to_consume_queue_and_index() -> None:
    sys_flags = [0x0, 0x4, 0x8, 0xC, 0x301, 0x31C, 0x84]  # NOT, PREPARED, COMMIT, ROLLBACK, + other bits
    d = dispatch(*(msg("T", {"KEYS": f"k{i}"}, sys_flag=f) for i, f in enumerate(sys_flags)))
    assert transaction_type(np.array(sys_flags)).tolist() == [0, 4, 8, 12, 0, 12, 4]
    assert d.to_consume_queue.tolist() == [True, False, True, False, True, False, False]
    # every type but ROLLBACK is indexed
    assert d.index_record.tolist() == [0, 1, 2, 4, 6]
    assert d.index_key_hash.tolist() == [key_hash(f"T#k{i}") for i in (0, 1, 2, 4, 6)]


# --- index keys -------------------------------------------------------------------------------


def test_index_keys_order() -> None:
    assert index_keys("T", "U1", "k1  k2 ") == ["T#U1", "T#k1", "T#k2"]
    assert index_keys("T", None, " a  b") == ["T#a", "T#b"]
    assert index_keys("T", "U1", None) == ["T#U1"]
    assert index_keys("T", None, "   ") == []
    assert index_keys("T", None, None) == []
    assert index_keys("T", "U", "U") == ["T#U", "T#U"]  # no de-duplication


def test_index_entries_in_put_order() -> None:
    d = dispatch(
        msg("Billing_v1", {"KEYS": "inv-1  oc-2 ", "UNIQ_KEY": "U1", "TAGS": "x"}),
        msg("Metrics", {"TAGS": "cpu"}),  # no keys: no entry
        msg("OrderCreated", {"KEYS": "mink-0N;28:B"}),  # hashCode Integer.MIN_VALUE: keyHash 0
        msg("Audit-Log", {"UNIQ_KEY": "U4", "KEYS": "客户-1"}),
    )
    assert d.index_record.tolist() == [0, 0, 0, 2, 3, 3]
    keys = ["Billing_v1#U1", "Billing_v1#inv-1", "Billing_v1#oc-2", "OrderCreated#mink-0N;28:B"]
    keys += ["Audit-Log#U4", "Audit-Log#客户-1"]
    assert d.index_key_hash.dtype == np.int32
    assert d.index_key_hash.tolist() == [key_hash(k) for k in keys]
    assert d.index_key_hash[3] == 0
    assert d.keys == ["inv-1  oc-2 ", None, "mink-0N;28:B", "客户-1"]
    assert d.uniq_key == ["U1", None, None, "U4"]


def test_index_disabled_gives_no_entries() -> None:
    d = dispatch(msg("T", {"KEYS": "a b", "UNIQ_KEY": "U", "TAGS": "d"}), cfg=BrokerConfig(messageIndexEnable=False))
    assert d.index_record.tolist() == []
    assert d.index_key_hash.tolist() == []
    assert d.to_consume_queue.tolist() == [True]
    assert d.tags_code.tolist() == [100]


def test_multi_dispatch_is_recognized() -> None:
    d = dispatch(
        msg("T", {"INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b", "INNER_MULTI_QUEUE_OFFSET": "3,4"}),
        msg("T", {"TAGS": "d"}),
    )
    assert d.multi_dispatch.tolist() == [True, False]


def test_a_consumers_copy_speaks_for_its_original_topic_in_the_lmq_clue() -> None:
    """A sent-back copy keeps the original's LMQ properties (real 5.3.3 broker, consumers store): the append that
    gave them is its RETRY_TOPIC's; a copy without RETRY_TOPIC tells nothing; an original speaks for its topic."""
    lmq = {"INNER_MULTI_DISPATCH": "%LMQ%a", "INNER_MULTI_QUEUE_OFFSET": "3"}
    copy = {"ORIGIN_MESSAGE_ID": "0A00", **lmq}
    d = dispatch(
        msg("%RETRY%g", {**copy, "RETRY_TOPIC": "TopicOrders"}),
        msg("%DLQ%g", copy),
        msg("SCHEDULE_TOPIC_XXXX", {**lmq, "DELAY": "1"}),
        cfg=BrokerConfig(enableMultiDispatch=True, enableLmq=True),
    )
    assert d.lmq_sources == [("TopicOrders", "%LMQ%a"), ("SCHEDULE_TOPIC_XXXX", "%LMQ%a")]


# --- everything at once, against a record-by-record reference ---------------------------------------


def java_parse_int(value: str) -> int | None:
    """Integer.parseInt, or None where it throws."""
    if not re.fullmatch(r"[+-]?\d+", value):
        return None
    n = int(value)
    return n if -(2**31) <= n < 2**31 else None


def reference_dispatch(messages: list[Message], cfg: BrokerConfig) -> dict[str, list]:
    """CommitLog.checkMessageAndReturnSize + the two dispatchers, one message at a time."""
    out = {name: [] for name in ("to_cq", "tags_code", "tags", "keys", "uniq", "multi", "record", "hash", "bad")}
    levels = cfg.delay_levels_ms
    for i, m in enumerate(messages):
        p = parse_properties(m.properties)
        tags_code = java_hash(p["TAGS"]) if p.get("TAGS") else 0
        if m.topic == SCHEDULE and "DELAY" in p:
            level = java_parse_int(p["DELAY"])
            if level is None:
                out["bad"].append((i, p["DELAY"]))
            elif min(level, len(levels)) > 0:
                tags_code = m.store_timestamp + levels[min(level, len(levels)) - 1]
        tran = m.sys_flag & 0xC
        out["to_cq"].append(tran in (0, 8))
        out["tags_code"].append(tags_code)
        out["tags"].append(p.get("TAGS"))
        out["keys"].append(p.get("KEYS"))
        out["uniq"].append(p.get("UNIQ_KEY"))
        out["multi"].append("INNER_MULTI_DISPATCH" in p)
        if cfg.messageIndexEnable and tran != 0xC:
            keys = [p["UNIQ_KEY"]] if "UNIQ_KEY" in p else []
            keys += [k for k in p.get("KEYS", "").split(" ") if k]
            out["record"] += [i] * len(keys)
            out["hash"] += [key_hash(f"{m.topic}#{k}") for k in keys]
    return out


# property pieces: names that matter, near-misses, and junk; values with blanks, separators, digits
piece_names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "INNER_MULTI_DISPATCH", "TAGSX", "XKEYS", "", "W"])
piece_values = st.text(st.sampled_from(["a", "B", " ", "\x01", "ü", "\U0001f4e6", "1", "0", "-", "+", "#"]), max_size=8)
pieces = st.tuples(piece_names, st.sampled_from(["\x01", ""]), piece_values).map("".join)
dispatch_messages = st.builds(
    Message,
    topic=st.sampled_from(["T", SCHEDULE, "Tü", "%RETRY%g"]),
    properties=st.lists(pieces, max_size=6).map("\x02".join),
    sys_flag=st.sampled_from([0, 0x4, 0x8, 0xC, 0x10]),
    store_timestamp=st.integers(0, 2**40),
)


@settings(deadline=None)
@given(st.lists(dispatch_messages, min_size=1, max_size=10), st.booleans())
def test_dispatch_matches_the_reference(messages: list[Message], index_enabled: bool) -> None:
    cfg = BrokerConfig(messageIndexEnable=index_enabled, messageDelayLevel="1s 1m 2h")
    d = dispatch_batch(batch_of(messages), cfg)
    expected = reference_dispatch(messages, cfg)
    got = {
        "to_cq": d.to_consume_queue.tolist(),
        "tags_code": d.tags_code.tolist(),
        "tags": d.tags,
        "keys": d.keys,
        "uniq": d.uniq_key,
        "multi": d.multi_dispatch.tolist(),
        "record": d.index_record.tolist(),
        "hash": d.index_key_hash.tolist(),
        "bad": d.bad_delay,
    }
    assert got == expected
