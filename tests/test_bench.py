"""make bench's own logic, without timing anything: the broker's recovery time read from its store.log, the
comparison of two rebuilds, the ratios table."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from bench.broker import differing_files, recovery_seconds
from bench.ratios import TARGETS, Measured, marginal_rate, ratios, table


def transition(to: str, total_ms: int) -> str:
    state = f"MessageStoreState transition from X to {to}; Time in previous state=1ms, Total time={total_ms}ms"
    return f"2026-11-25 07:25:52 INFO main - {state}"


def test_recovery_is_the_total_time_between_load_begin_and_the_queue_table() -> None:
    lines = [transition("LOAD_BEGIN", 887), "last shutdown normally", transition("RECOVER_COMMITLOG_OK", 6109)]
    lines += [
        transition("RECOVER_TOPIC_QUEUE_TABLE_OK", 6321),
        "message store recover end",
        transition("RUNNING", 9000),
    ]
    assert recovery_seconds(lines) == (6321 - 887) / 1000


def test_a_store_log_without_the_transitions_says_which_are_missing() -> None:
    with pytest.raises(ValueError, match="RECOVER_TOPIC_QUEUE_TABLE_OK"):
        recovery_seconds([transition("LOAD_BEGIN", 10), "last shutdown normally"])


def _stamp(line: str) -> datetime.datetime:
    return datetime.datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S")


@pytest.mark.broker
def test_recovery_agrees_with_the_timestamps_of_a_real_store_log() -> None:
    """The real 5.5.0 broker's store.log: the ms totals fall within the second-resolution timestamps of 'last
    shutdown' and 'recover end'."""
    from tests.broker.harness import build_store, java_available

    if java_available():
        pytest.skip(java_available())
    lines = (build_store("5.5.0").dir / "logs" / "rocketmqlogs" / "store.log").read_text().splitlines()
    begin = next(_stamp(x) for x in lines if "last shutdown" in x)
    end = next(_stamp(x) for x in lines if "message store recover end" in x)
    assert abs(recovery_seconds(lines) - (end - begin).total_seconds()) <= 1


def _rebuild(root: Path, index_name: str, unit: bytes) -> Path:
    (root / "consumequeue" / "T" / "0").mkdir(parents=True)
    (root / "consumequeue" / "T" / "0" / "00000000000000000000").write_bytes(unit * 3)
    (root / "index").mkdir()
    (root / "index" / index_name).write_bytes(b"index" + unit)
    return root


def test_rebuilds_compare_queues_by_path_and_index_files_by_order(tmp_path: Path) -> None:
    unit = bytes(range(20))
    broker = _rebuild(tmp_path / "broker", "20261124232552949", unit)
    assert differing_files(broker, _rebuild(tmp_path / "same", "20261124232515518", unit)) == []
    other = _rebuild(tmp_path / "other", "20261124232515518", bytes(20))
    assert differing_files(broker, other) == ["consumequeue/T/0/00000000000000000000", "index/20261124232552949"]
    (other / "consumequeue" / "T" / "1").mkdir()
    (other / "consumequeue" / "T" / "1" / "00000000000000000000").write_bytes(unit)
    assert "consumequeue/T/1/00000000000000000000" in differing_files(broker, other)


def measured(broker_big: float, ours_big: float, ours_empty: float, bare: float, audit: float = 10.0) -> Measured:
    """Three rounds around the given medians."""
    return Measured(
        messages=(1_500_000, 1_600),
        broker=([broker_big + 1, broker_big, broker_big - 0.5], [0.3, 0.4, 0.2]),
        ours=([ours_big, ours_big + 2, ours_big - 1], [ours_empty, ours_empty + 1, ours_empty - 0.5]),
        bare=[bare + 0.5, bare, bare - 3],
        session=[bare / 2, bare / 2 + 1, bare / 2 - 1],
        audit=[audit, audit - 1, audit + 4],
        differing=([], ["index/20261124232552949"]),
    )


def test_ratios_come_from_the_median_round_of_each() -> None:
    m = measured(broker_big=6.0, ours_big=9.0, ours_empty=4.0, bare=8.0)
    r = ratios(m)
    assert r["whole"] == 6.0 / 9.0
    assert r["empty_vs_bare"] == 4.0 / 8.0
    assert r["marginal"] == marginal_rate(m.messages, (9.0, 4.0)) / marginal_rate(m.messages, (6.0, 0.3))
    assert marginal_rate(m.messages, (9.0, 4.0)) == (1_500_000 - 1_600) / 5.0
    assert r["audit_vs_rebuild"] == 10.0 / 9.0


def test_the_table_shows_times_rates_targets_and_differences() -> None:
    good, bad = measured(10.0, 9.0, 4.0, 9.0), measured(6.0, 20.0, 7.0, 8.0, audit=31.0)
    text = table(good, "5.5.0", 723)
    assert f"{ratios(good)['whole']:.2f}x broker speed (>= {TARGETS['whole']}: meets)" in text
    assert f"nearly empty {ratios(good)['empty_vs_bare']:.2f}x bare (<= {TARGETS['empty_vs_bare']}: meets)" in text
    assert f"{marginal_rate(good.messages, (9.0, 4.0)):,.0f}" in text
    assert "9.00 s (8.00–11.00)" in text
    assert f"nearly empty {4.0 / 4.5:.2f}x it" in text
    assert "big store, consumequeue/ and index/ of both rebuilds: byte-equal" in text
    assert "DIFFER: index/20261124232552949" in text
    assert f"{10.0 / 9.0:.2f}x our rebuild (<= {TARGETS['audit_vs_rebuild']}: meets)" in text
    assert table(bad, "5.5.0", 723).count("misses") == 4
