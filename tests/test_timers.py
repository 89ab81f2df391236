"""The timer store's formats and checks without Spark: hand-made timerlog units and wheel slots, the wheel as the
fold of the timerlog against a plain replay of doEnqueue (tests/reference.py), delayOffset.json as each fastjson
writes it, and every timer-* and schedule-* finding on hand-made stores (storelib.audit.timers)."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storelib.audit.timers import Settings, TimerStore, audit_timers, effective_delay_offsets
from storelib.broker import timers as rules
from storelib.broker.config import BrokerConfig
from storelib.errors import StoreFormatError
from storelib.formats import delayoffset, timerlog, timerwheel
from storelib.formats.timercheck import TimerCheckpoint
from tests import reference

T0 = 1_795_000_000_000  # a time in ms
LEVELS = (1000, 5000, 10000, 30000)


def unit(offset: int, when: int, magic: int = 1, prev: int = -1, size: int = 300, enqueue: int = T0) -> bytes:
    """A 52-byte timerlog unit, field by field as doEnqueue puts them."""
    return struct.pack(">iqiqiqiiq", 52, prev, magic, enqueue, when - enqueue, offset, size, 0, 0)


def test_a_unit_decodes_field_by_field() -> None:
    data = unit(4096, T0 + 2500, magic=3, prev=52) + unit(8192, T0 + 1000) + bytes(52)
    w = timerlog.walk(data, 2080)
    assert (len(w.units), w.end, w.why, w.positions.tolist()) == (2, 104, timerlog.END_ZERO, [2080, 2132])
    u = w.units[0]
    assert (u["prev_pos"], u["magic"], u["enqueue_ms"], u["delay_ms"], u["offset_py"], u["size_py"]) == (
        52,
        3,
        T0,
        2500,
        4096,
        300,
    )
    assert timerlog.unit_time(w.units).tolist() == [T0 + 2500, T0 + 1000]


def test_a_walk_stops_at_the_blank_and_at_damage() -> None:
    blank = struct.pack(">iqi", 28, 0, timerlog.BLANK_MAGIC_CODE) + bytes(12)
    assert timerlog.walk(unit(0, T0) + blank, 0).why == timerlog.END_BLANK
    bad = bytearray(unit(0, T0))
    bad[12:16] = struct.pack(">i", 0x10)  # a magic with a bit above the low four
    w = timerlog.walk(unit(0, T0) + bytes(bad) + unit(0, T0), 0)
    assert (len(w.units), w.why) == (1, timerlog.END_BAD)
    assert timerlog.offset_for_last_unit(2080) == 2080 - (2080 - 16) % 52 - 16 - 52


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 2), st.sampled_from([1, 1, 1, 3, 5])), min_size=1, max_size=60
    ),
    st.integers(0, 59),
)
def test_the_wheel_is_the_fold_of_the_timerlog(draws: list[tuple[int, int, int]], split: int) -> None:
    """Units of a few times, some a wheel's turn apart (same slot, other time), deletes among them; folded in one
    go and in two (a file boundary) it is what replaying doEnqueue one unit at a time gives."""
    turn = timerwheel.SLOTS * 1000
    data = b"".join(
        unit(100 * k, T0 + t * 1000 + lap * turn, magic, enqueue=T0 + lap * turn)
        for k, (t, lap, magic) in enumerate(draws)
    )
    units = timerlog.walk(data, 520).units
    positions = 520 + 52 * np.arange(len(units))
    whole = timerwheel.fold(timerwheel.empty_state(), timerlog.unit_time(units), positions, units["magic"], 1000)
    k = min(split, len(units))
    parts = timerwheel.empty_state()
    for sl in (slice(0, k), slice(k, None)):
        parts = timerwheel.fold(parts, timerlog.unit_time(units[sl]), positions[sl], units["magic"][sl], 1000)
    expected = reference.timer_wheel(data, 520)
    for state in (whole, parts):
        fields = ("time", "first_pos", "last_pos", "num", "magic")
        assert {int(r["slot"]): tuple(int(r[f]) for f in fields) for r in state} == expected


def test_a_slot_by_hand() -> None:
    data = unit(10, T0 + 1500) + unit(20, T0 + 1999, magic=5) + unit(30, T0 + 1000)
    units = timerlog.walk(data, 0).units
    state = timerwheel.fold(
        timerwheel.empty_state(), timerlog.unit_time(units), np.array([0, 52, 104]), units["magic"], 1000
    )
    slot = timerwheel.read_slots(timerwheel.wheel_bytes(state))[(T0 + 1000) // 1000 % timerwheel.SLOTS]
    assert (slot["time"], slot["first_pos"], slot["last_pos"], slot["num"], slot["magic"]) == (
        (T0 + 1000) // 1000,
        0,
        104,
        1,
        0,  # +1, -1 (delete), +1
    )
    assert len(timerwheel.wheel_bytes(state)) == 38_707_200


@pytest.mark.parametrize("fastjson2", [False, True])
def test_delay_offsets_as_each_fastjson_writes_them(fastjson2: bool) -> None:
    version = {"counter": 1, "stateVersion": 0, "timestamp": 1795814351966}
    text = delayoffset.encode({3: 5, 1: 9}, version, fastjson2)
    inline = '\t"offsetTable":{1:9,3:5\n\t}'
    lines = '\t"offsetTable":{\n\t\t1:9,\n\t\t3:5\n\t}'
    assert (lines if fastjson2 else inline) in text
    assert delayoffset.parse(text) == ({1: 9, 3: 5}, version)
    with pytest.raises(StoreFormatError):
        delayoffset.parse('{"offsetTable":{1:')


def test_timer_checkpoint_page() -> None:
    ck = TimerCheckpoint(T0, 5720, 108, 108, 0, T0 + 5, 38)
    page = ck.pack()
    assert len(page) == 4096 and struct.unpack_from(">qqqq", page) == (T0, 5720, 108, 108)
    assert TimerCheckpoint.unpack(page) == ck
    with pytest.raises(StoreFormatError):
        TimerCheckpoint.unpack(page[:16])


# --- the commitlog's story of each message ---------------------------------------------------------------


def records(*rows: dict) -> pa.Table:
    """A timer_records table of hand-made rows (absent columns null)."""
    full = [{f.name: r.get(f.name) for f in rules.SCHEMA} for r in rows]
    return pa.Table.from_pylist(full, schema=rules.SCHEMA)


def timer(offset: int, uniq: str, due: int, qoff: int, **more: object) -> dict:
    return dict(
        commitlog_offset=offset,
        size=300,
        store_timestamp=T0,
        topic=rules.TIMER_TOPIC,
        queue_id=0,
        queue_offset=qoff,
        real_topic="T",
        real_qid="1",
        timer_out_ms=str(due),
        uniq_key=uniq,
        **more,
    )


def delayed(offset: int, uniq: str, level: int, qoff: int) -> dict:
    return dict(
        commitlog_offset=offset,
        size=300,
        store_timestamp=T0,
        topic=rules.SCHEDULE_TOPIC,
        queue_id=level - 1,
        queue_offset=qoff,
        real_topic="T",
        real_qid="2",
        delay=str(level),
        uniq_key=uniq,
    )


def copy(offset: int, uniq: str, **more: object) -> dict:
    return dict(
        commitlog_offset=offset,
        size=300,
        store_timestamp=T0 + 9000,
        topic="T",
        queue_id=1,
        queue_offset=0,
        uniq_key=uniq,
        **more,
    )


def test_which_messages_are_pending() -> None:
    t = records(
        timer(0, "A", T0 + 5000, 0),
        timer(300, "B", T0 + 6000, 1),
        timer(600, "C", T0 + 7000, 2),
        timer(900, "D", T0 + 8000, 3),
        copy(1200, "A", dequeue_ms="1"),  # A delivered
        timer(1500, "B", T0 + 6000, 4, roll_times="1"),  # B rolled: its latest record
        dict(timer(1800, "X", T0 + 7000, 5), del_key="C", uniq_key="X"),  # C deleted (5.0-5.2: the UNIQ_KEY)
        delayed(2100, "E", 1, 0),
        delayed(2400, "F", 1, 1),
        copy(2700, "E", real_topic="T"),  # E delivered (REAL_TOPIC kept)
    )
    states = {m.uniq_key: m for m in rules.timer_states(t, (5, 2, 0))}
    assert {u for u, m in states.items() if m.pending} == {"B", "D"}
    assert states["B"].commitlog_offset == 1500 and states["C"].deleted
    assert not {m.uniq_key: m for m in rules.timer_states(t, (5, 3, 3))}["C"].deleted  # 5.3: "T+C" needed
    schedule = rules.schedule_states(t, LEVELS)
    assert [(m.uniq_key, m.pending, m.due_ms) for m in schedule] == [("E", False, T0 + 1000), ("F", True, T0 + 1000)]
    assert rules.delivered_offsets(schedule) == ({1: 1}, [])


def test_the_look_back_and_the_recovery_window() -> None:
    assert rules.read_floor_ms(T0 + 1234, 1000) == T0 + 1000 - 604_800_000 + 60_000
    assert rules.recovery_start(5720, 2080) == 2080
    assert rules.recovery_start(1000, 2080) == 0


# --- findings on hand-made stores -----------------------------------------------------------------------------


def store_of(units: list[bytes], table: pa.Table, **files: object) -> tuple[TimerStore, Settings]:
    data = b"".join(units)
    walk = timerlog.walk(data + bytes(52), 0)
    units_arr = walk.units
    state = timerwheel.fold(
        timerwheel.empty_state(), timerlog.unit_time(units_arr), walk.positions, units_arr["magic"], 1000
    )
    wheel = files.pop("wheel", timerwheel.wheel_bytes(state))
    ck = files.pop("checkpoint", TimerCheckpoint(T0, len(data), 2, 2).pack())
    delay = files.pop("delay", delayoffset.encode({1: 1}, None, True))
    store = TimerStore((walk,), wheel, ck, delay, files.pop("bak", None))
    return store, Settings(1000, 2080, (5, 5, 0), LEVELS, T0 + 60_000, files.pop("log_end", 10_000))


def healthy() -> tuple[list[bytes], pa.Table]:
    t = records(
        timer(0, "A", T0 + 5000, 0),
        timer(300, "B", T0 + 900_000, 1),
        copy(600, "A", dequeue_ms="1"),
        delayed(900, "E", 1, 0),
        copy(1200, "E", real_topic="T"),
    )
    return [unit(0, T0 + 5000), unit(300, T0 + 900_000)], t


def kinds(store: TimerStore, table: pa.Table, s: Settings) -> list[str]:
    return sorted(f.kind for f in audit_timers(store, table, s).findings)


def test_a_healthy_store_has_no_finding_and_its_files_are_rebuilt_as_they_are() -> None:
    units, t = healthy()
    store, s = store_of(units, t)
    result = audit_timers(store, t, s)
    assert result.findings == () and result.wheel == store.wheel and result.delay_table == {1: 1}
    assert result.checkpoint == TimerCheckpoint.unpack(store.checkpoint)
    assert [m.uniq_key for m in result.pending()] == ["B"]


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"wheel": None}, ["timer-wheel-refilled"]),  # one timerlog file: the broker refiles every unit
        (  # the broker refiles from the file before its flush position's: the units at 0 and 52 are lost
            {"wheel": None, "checkpoint": TimerCheckpoint(T0, 2080 * 2, 2, 2).pack()},
            ["timer-checkpoint-ahead", "timer-wheel-missing"],
        ),
        (  # ... unless their slots were read already
            {"wheel": None, "checkpoint": TimerCheckpoint(T0 + 901_000, 2080 * 2, 2, 2).pack()},
            ["timer-checkpoint-ahead", "timer-wheel-refilled"],
        ),
        ({"wheel": bytes(4096)}, ["timer-wheel-size"]),
        ({"checkpoint": None}, ["timer-checkpoint-unreadable"]),
        ({"checkpoint": TimerCheckpoint(T0, 104, 9, 9).pack()}, ["timer-checkpoint-ahead"]),
        ({"delay": None}, ["schedule-offsets-missing"]),
        ({"delay": None, "bak": delayoffset.encode({1: 1}, None, True)}, []),  # ConfigManager takes the .bak
        ({"delay": "{", "bak": "{"}, ["schedule-offsets-unreadable"]),
        ({"delay": delayoffset.encode({1: 0}, None, True)}, ["schedule-offset-behind"]),
        ({"delay": delayoffset.encode({1: 3}, None, True)}, ["schedule-offset-ahead"]),
        ({"log_end": 300}, ["timer-checkpoint-ahead", "timer-slot-wrong", "timer-unit-past-log"]),
    ],
)
def test_each_damage_is_named(files: dict, expected: list[str]) -> None:
    units, t = healthy()
    store, s = store_of(units, t, **files)
    assert kinds(store, t, s) == expected


def test_a_wrong_slot_a_unit_without_its_record_and_a_wrong_time() -> None:
    units, t = healthy()
    store, s = store_of(units, t)
    wheel = bytearray(store.wheel)
    at = (T0 + 5000) // 1000 % timerwheel.SLOTS * 32
    wheel[at + 16 : at + 24] = struct.pack(">q", 52)
    assert kinds(TimerStore(store.timerlog, bytes(wheel), store.checkpoint, store.delay_offsets, None), t, s) == [
        "timer-slot-wrong"
    ]
    store, s = store_of([unit(0, T0 + 5000), unit(301, T0 + 900_000), unit(0, T0 + 5001)], t)
    assert kinds(store, t, s) == ["timer-unit-bad-record", "timer-unit-duplicate", "timer-unit-wrong-time"]


def test_units_past_a_truncated_log_are_cut() -> None:
    units, t = healthy()
    store, s = store_of(units, t, log_end=300)
    result = audit_timers(store, t, s)
    assert result.cut_at == 52
    assert set(result.writes) == {"timerwheel", "config/timercheck"}
    assert result.checkpoint.last_timer_log_flush_pos == 52


def test_pending_timers_beyond_the_look_back() -> None:
    units, t = healthy()
    store, _ = store_of(units, t)
    late = Settings(1000, 2080, (5, 5, 0), LEVELS, T0 + 8 * 86_400_000, 10_000)
    assert kinds(store, t, late) == ["timer-lookback-exceeded"]


def test_which_offsets_the_broker_loads() -> None:
    good = delayoffset.encode({1: 4}, None, False)
    assert effective_delay_offsets(TimerStore((), None, None, good, "{")) == ({1: 4}, "config/delayOffset.json")
    assert effective_delay_offsets(TimerStore((), None, None, "{", good))[0] == {1: 4}
    assert effective_delay_offsets(TimerStore((), None, None, "", None)) == ({}, "")
    assert effective_delay_offsets(TimerStore((), None, None, "{", "}"))[0] is None


def test_recover_cuts_the_timerlog_where_units_point_past_the_log() -> None:
    """The cut: the file holding the first unit past the log zeroed from there (keeping its size), later files
    deleted, the wheel and checkpoint written; replace or create as the store has them."""
    from jobs.pipeline.timers import TimerResult, timer_steps
    from jobs.pipeline.transaction import _truncated_size

    result = TimerResult((), {}, (), {"timerwheel": "timer-slot-wrong", "config/timercheck": "x"}, (), 2132, {})
    files = ["timerlog/00000000000000000000", "timerlog/00000000000000002080", "timerlog/00000000000000004160"]
    steps = timer_steps(result, [*files, "timerwheel"], 2080)
    assert [(s.action, s.file, s.offset) for s in steps] == [
        ("create", "config/timercheck", None),
        ("replace", "timerwheel", None),
        ("truncate", "timerlog/00000000000000002080", 52),
        ("delete", "timerlog/00000000000000004160", None),
    ]
    assert _truncated_size(steps[2], 2080, BrokerConfig(mappedFileSizeCommitLog=65536)) == 2080
