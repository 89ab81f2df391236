"""``rmqstore replay`` without a broker: what each kind of record is sent as (storelib.replay.messages, on hand-made
records and on the real 4.9.8 and 5.5.0 sample stores), the filters, the journal (storelib.replay.journal), and the
apply loop (jobs/replay.py) against a stand-in client: an interrupted replay resumes without sending a message twice.
The real client and broker: tests/test_failover_broker.py."""

from __future__ import annotations

import collections
import json
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.pipeline import replay_flow
from jobs.pipeline.replay_source import read_records
from jobs.runtime.replay_client import Answer, wait_interval
from storelib.broker.config import load_broker_config
from storelib.errors import BadInput, CannotSend, StoreFormatError
from storelib.replay import journal as jr
from storelib.replay import messages as rm
from tests.storecopy import rmqstore_main
from udfs.schema import MISSING_MESSAGE_SCHEMA

NOW = 1_800_000_000_000
LEVELS = (1000, 5000, 10000)
ADDED = {"CLUSTER": "c", "MSG_REGION": "r", "TRACE_ON": "true", "WAIT": "true"}


def props(**kv: str) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in kv.items())


def record(topic: str, offset: int, sys_flag: int = 0, stored: int = NOW - 60_000, qoff: int = 0, **kv: str):  # type: ignore[no-untyped-def]
    return rm.Record("s", topic, 0, qoff, offset, props(**{**ADDED, **kv}), b"body%d" % offset, 7, sys_flag, stored)


def outcomes(records, selection=None):  # type: ignore[no-untyped-def]
    got = rm.plan(records, selection or rm.Selection(), LEVELS, NOW)
    return {o.record.commitlog_offset: o for o in got}


def test_a_normal_message_keeps_what_the_producer_gave_and_loses_what_was_added_on_the_way() -> None:
    (send,) = outcomes([record("T", 0, UNIQ_KEY="U1", KEYS="a b", TAGS="t", own="x", __CRC32__="1")]).values()
    assert isinstance(send, rm.Send) and send.topic == "T" and send.deliver_ms is None
    assert send.properties == {"UNIQ_KEY": "U1", "KEYS": "a b", "TAGS": "t", "own": "x", "__CRC32__": "1"}
    assert send.journal_key == "T|U1" and send.check_topics == ("T",)
    assert rm.Send(send.record, "T", {}, None).journal_key == "s@0"  # no UNIQ_KEY: its place


def test_transactions_a_commit_is_sent_as_a_normal_message_a_half_never() -> None:
    half = dict(REAL_TOPIC="T", REAL_QID="1", TRAN_MSG="true", PGROUP="g")
    got = outcomes(
        [
            record(rm.TRANS_HALF_TOPIC, 0, UNIQ_KEY="C", qoff=0, **half),
            record(rm.TRANS_HALF_TOPIC, 100, UNIQ_KEY="R", qoff=1, **half),
            record(rm.TRANS_HALF_TOPIC, 200, UNIQ_KEY="P", qoff=2, **half),
            rm.Record("s", rm.TRANS_OP_HALF_TOPIC, 0, 0, 300, props(TAGS="d"), b"1,", 0, 0, NOW),
            record("T", 400, sys_flag=8, UNIQ_KEY="C", __transactionId__="x", TRANSACTION_CHECK_TIMES="1", **half),
            record("T", 500, sys_flag=4, UNIQ_KEY="L"),  # a pre-4.3 prepared record
        ]
    )
    reasons = {off: o.reason for off, o in got.items() if isinstance(o, rm.Skip)}
    assert reasons == {
        0: rm.HALF_COMMITTED,
        100: rm.HALF_ROLLED_BACK,
        200: rm.HALF_UNCOMMITTED,
        300: rm.BROKER_RECORD,
        500: rm.PREPARED_OR_ROLLED_BACK,
    }
    commit = got[400]
    assert isinstance(commit, rm.Send) and commit.topic == "T" and commit.properties == {"UNIQ_KEY": "C"}


def test_a_half_put_again_by_the_check_is_rolled_back_only_when_its_last_record_is() -> None:
    half = dict(REAL_TOPIC="T", TRAN_MSG="true", UNIQ_KEY="H")
    op = rm.Record("s", rm.TRANS_OP_HALF_TOPIC, 0, 0, 300, "", b"0", 0, 0, NOW)
    first, again = record(rm.TRANS_HALF_TOPIC, 0, qoff=0, **half), record(rm.TRANS_HALF_TOPIC, 100, qoff=1, **half)
    assert {o.reason for o in outcomes([first, again, op]).values()} == {rm.HALF_UNCOMMITTED, rm.BROKER_RECORD}


def test_pending_delays_and_timers_go_to_their_real_topic_with_the_delay_left() -> None:
    got = outcomes(
        [
            record(rm.SCHEDULE_TOPIC, 0, stored=NOW - 1000, UNIQ_KEY="D", DELAY="2", REAL_TOPIC="T", REAL_QID="0"),
            record(rm.SCHEDULE_TOPIC, 100, stored=NOW - 6000, UNIQ_KEY="E", DELAY="2", REAL_TOPIC="T"),
            record(
                rm.TIMER_TOPIC, 200, UNIQ_KEY="W", REAL_TOPIC="T", TIMER_OUT_MS=str(NOW + 9000), TIMER_DELIVER_MS="1"
            ),
            record(rm.SCHEDULE_TOPIC, 300, UNIQ_KEY="G", DELAY="1", REAL_TOPIC="T"),
            record("T", 400, UNIQ_KEY="G", DELAY="1", REAL_TOPIC="T", TIMER_ENQUEUE_MS="5"),  # G delivered
        ]
    )
    delay, due, timer, scheduled, delivered = (got[o] for o in (0, 100, 200, 300, 400))
    assert isinstance(delay, rm.Send) and (delay.topic, delay.deliver_ms) == ("T", NOW + 4000)
    assert delay.properties == {"UNIQ_KEY": "D"} and delay.check_topics == ("T", rm.TIMER_TOPIC)
    assert "TIMER_DELIVER_MS\x01" + str(NOW + 4000) in delay.wire_properties()
    assert isinstance(due, rm.Send) and due.deliver_ms is None and "TIMER" not in due.wire_properties()
    assert isinstance(timer, rm.Send) and timer.deliver_ms == NOW + 9000 and timer.properties == {"UNIQ_KEY": "W"}
    assert isinstance(scheduled, rm.Skip) and scheduled.reason == rm.IN_TOPIC
    assert isinstance(delivered, rm.Send) and delivered.properties == {"UNIQ_KEY": "G"}


def test_a_delay_without_a_readable_level_is_refused_naming_the_record() -> None:
    with pytest.raises(BadInput, match="s @ 0"):
        outcomes([record(rm.SCHEDULE_TOPIC, 0, UNIQ_KEY="D", DELAY="9", REAL_TOPIC="T")])


def test_consumer_copies_broker_records_and_a_second_record_of_a_message_are_not_sent() -> None:
    got = outcomes(
        [
            record("%RETRY%g", 0, UNIQ_KEY="A"),
            record("%DLQ%g", 100, UNIQ_KEY="A"),
            record("rmq_sys_SYNC_BROKER_MEMBER_x", 200),
            record("T", 300, UNIQ_KEY="A"),
            record("T", 400, UNIQ_KEY="A"),  # a producer's retry stored twice
        ]
    )
    assert [getattr(got[o], "reason", "sent") for o in (0, 100, 200, 300, 400)] == [
        rm.CONSUMER_COPY,
        rm.CONSUMER_COPY,
        rm.BROKER_RECORD,
        "sent",
        rm.SAME_MESSAGE,
    ]


def test_filters_topic_time_commitlog_range_and_key() -> None:
    records = [
        record("A", 0, stored=1000, UNIQ_KEY="U0", KEYS="k1 k2"),
        record("B", 100, stored=2000, UNIQ_KEY="U1"),
        record(rm.SCHEDULE_TOPIC, 200, stored=3000, UNIQ_KEY="U2", DELAY="1", REAL_TOPIC="A"),
    ]

    def picked(**kw: object) -> list[int]:
        return sorted(outcomes(records, rm.Selection(**kw)))  # type: ignore[arg-type]

    assert picked() == [0, 100, 200]
    assert picked(topics=frozenset({"A"})) == [0, 200]  # a delay by the topic it goes to
    assert picked(since_ms=2000) == [100, 200] and picked(until_ms=2000) == [0]
    assert picked(from_offset=100, to_offset=200) == [100]
    assert picked(keys=frozenset({"k2"})) == [0] and picked(keys=frozenset({"U1"})) == [100]


def test_times_are_ms_or_iso_8601_utc() -> None:
    assert rm.parse_time("1700000000000") == 1_700_000_000_000
    assert rm.parse_time("2023-11-14T22:13:20") == 1_700_000_000_000
    assert rm.parse_time("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    with pytest.raises(BadInput, match="not a time"):
        rm.parse_time("yesterday")


def reasons_of(fixture: Path) -> tuple[collections.Counter[str], list[rm.Send | rm.Skip]]:
    cfg = load_broker_config(fixture / "broker.conf")
    records = read_records(str(fixture / "clean"), rm.Selection(), cfg)
    got = list(rm.plan(records, rm.Selection(), cfg.delay_levels_ms, NOW))
    return collections.Counter(o.reason if isinstance(o, rm.Skip) else "sent" for o in got), got


def test_the_4_9_8_sample_store_as_its_readme_counts_it(fixture_dir: Path) -> None:
    """98 committed halves, 52 rolled back, 40 delays delivered, 8 pre-4.3 prepared and 3 rolled-back records, 96
    consumer copies and the 90 send-backs' SCHEDULE_TOPIC_XXXX records (README.md of the fixture, written by the
    real 4.9.8 broker)."""
    reasons, got = reasons_of(fixture_dir)
    assert reasons[rm.HALF_COMMITTED] == 98 and reasons[rm.HALF_ROLLED_BACK] == 52
    assert reasons[rm.HALF_UNCOMMITTED] == 0 and reasons[rm.IN_TOPIC] == 40
    assert reasons[rm.PREPARED_OR_ROLLED_BACK] == 11 and reasons[rm.CONSUMER_COPY] == 96 + 90
    sends = [o for o in got if isinstance(o, rm.Send)]
    assert not any(rm.ADDED_ON_THE_WAY & s.properties.keys() for s in sends)
    assert not any(s.topic.startswith(("SCHEDULE", "RMQ_SYS", "%")) for s in sends)


def test_the_5_5_0_sample_store_rolled_back_halves_are_one_answer_of_the_listener(v5_fixture: Path) -> None:
    """The sample's listener answered COMMIT, ROLLBACK or UNKNOW by send number mod 3 (its README): the halves told
    rolled back are exactly the sends of one of those classes, the committed ones of another; 5.5.0 batches op
    records (comma-separated offsets) and puts unresolved halves again."""
    _, got = reasons_of(v5_fixture)
    n_of = {s["msgId"]: s["n"] % 3 for s in map(json.loads, (v5_fixture / "sent.jsonl").read_text().splitlines())}
    halves = [o for o in got if isinstance(o, rm.Skip) and o.record.topic == rm.TRANS_HALF_TOPIC]
    by_reason = collections.defaultdict(set)
    for h in halves:
        by_reason[h.reason].add(n_of[h.record.property_map()["UNIQ_KEY"]])
    rolled = by_reason[rm.HALF_ROLLED_BACK]
    assert len(rolled) == 1 and not rolled & (by_reason[rm.HALF_COMMITTED] | by_reason[rm.HALF_UNCOMMITTED])


def test_a_store_is_read_only_in_the_commitlog_range_asked_for(fixture_dir: Path) -> None:
    cfg = load_broker_config(fixture_dir / "broker.conf")
    every = read_records(str(fixture_dir / "clean"), rm.Selection(), cfg)
    lo, hi = every[100].commitlog_offset, every[3000].commitlog_offset
    some = read_records(str(fixture_dir / "clean"), rm.Selection(from_offset=lo, to_offset=hi), cfg)
    assert some == every[100:3000]
    with pytest.raises(BadInput, match="not a diff's missing-messages table"):
        read_records(str(fixture_dir), rm.Selection(), cfg)


def test_a_segment_cut_inside_a_record_is_refused_naming_it(fixture_dir: Path, tmp_path: Path) -> None:
    """The store is streamed record by record; a file that ends inside a record names its file and offset."""
    cfg = load_broker_config(fixture_dir / "broker.conf")
    store = tmp_path / "store"
    shutil.copytree(fixture_dir / "clean" / "commitlog", store / "commitlog")
    seg = sorted((store / "commitlog").iterdir())[0]
    last = read_records(str(store), rm.Selection(to_offset=int(seg.name) + seg.stat().st_size), cfg)[-1]
    at = last.commitlog_offset - int(seg.name)
    with seg.open("r+b") as f:
        f.truncate(at + 30)
    with pytest.raises(StoreFormatError, match=f"commitlog/{seg.name} @ {at}: a record of .* cut short"):
        read_records(str(store), rm.Selection(), cfg)


def test_the_rate_spaces_the_sends() -> None:
    now = time.monotonic()
    assert wait_interval(None, now) == 0.0
    assert 0.05 < wait_interval(10, now) <= 0.1  # 10 a second: the next 0.1 s after the last
    assert wait_interval(10, now - 1) == 0.0


def test_the_journal_keeps_what_it_recorded_and_forgets_a_line_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "j"
    j = jr.Journal(path)
    j.record(jr.Entry("T|A", jr.SENT, "m1"))
    j.record(jr.Entry("T|B", jr.PRESENT, "m2"))
    j.close()
    assert jr.Journal(path).done == {"T|A", "T|B"}
    path.write_text(path.read_text() + '{"key": "T|C", "res')  # an interruption in the middle of a write
    assert jr.Journal(path).done == {"T|A", "T|B"}
    path.write_text('garbage\n{"key": "T|A", "result": "sent", "msg_id": "m"}\n')
    with pytest.raises(BadInput, match="line 1"):
        jr.Journal(path)


class FakeCluster:
    """A stand-in for Replay.java and the broker: stores each message it is sent; answers PRESENT for a UNIQ_KEY it
    holds (as the real client's query by UNIQ_KEY); fails (the JVM gone) at its ``crash_at``-th send."""

    def __init__(self) -> None:
        self.stored: list[str] = []
        self.crash_at: int | None = None

    def client(self, *args: object):  # type: ignore[no-untyped-def]
        cluster = self

        class Client:
            def __enter__(self):  # type: ignore[no-untyped-def]
                return self

            def __exit__(self, *exc: object) -> None:
                pass

            def send(self, s: rm.Send) -> Answer:
                if s.journal_key in cluster.stored:
                    return Answer("PRESENT", (s.topic, "id"))
                if cluster.crash_at is not None and len(cluster.stored) == cluster.crash_at:
                    raise CannotSend("the replay client stopped answering")
                cluster.stored.append(s.journal_key)
                return Answer("SENT", ("SEND_OK", "id", "0", "0", s.uniq_key or ""))

        return Client()


@pytest.fixture
def table(tmp_path: Path) -> Path:
    rows = [
        {
            "store": "old",
            "topic": "T",
            "queue_id": 0,
            "queue_offset": n,
            "commitlog_offset": n * 100,
            "keys": None,
            "tags": None,
            "uniq_key": f"U{n}",
            "properties": props(UNIQ_KEY=f"U{n}", WAIT="true"),
            "body": b"x",
            "flag": 0,
            "sys_flag": 0,
            "born_timestamp": 0,
            "store_timestamp": NOW,
        }
        for n in range(10)
    ]
    out = tmp_path / "missing"
    out.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, MISSING_MESSAGE_SCHEMA), out / "part-0.parquet")
    return out


def test_an_interrupted_replay_resumes_and_never_sends_a_message_twice(
    table: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = FakeCluster()
    monkeypatch.setattr(replay_flow, "ReplayClient", cluster.client)
    journal = tmp_path / "journal"
    argv = ["replay", str(table), "--apply", "-n", "127.0.0.1:9876", "--journal", str(journal)]
    cluster.crash_at = 4
    assert rmqstore_main(argv) == 2  # CannotSend: the JVM went away after 4 sends
    assert len(jr.read_journal(journal)) == 4
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join(lines[:3]) + "\n")  # the 4th send's line lost in the interruption
    cluster.crash_at = None
    capsys.readouterr()
    assert rmqstore_main(argv) == 0
    assert capsys.readouterr().out.startswith("replay: 6 sent, 4 skipped as already present, 0 failed")
    assert sorted(cluster.stored) == sorted(f"T|U{n}" for n in range(10))  # each once
    assert [e.result for e in jr.read_journal(journal)].count(jr.PRESENT) == 1  # the lost line: found, not sent
    assert rmqstore_main(argv) == 0
    assert capsys.readouterr().out.startswith("replay: 0 sent, 10 skipped as already present, 0 failed")
    assert rmqstore_main(["replay", str(table), "--journal", str(journal)]) == 0  # a dry run reads the journal
    assert "10 of them already in the journal" in capsys.readouterr().out


def test_a_dry_run_sends_nothing_and_apply_needs_a_cluster_and_a_journal(
    table: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(replay_flow, "ReplayClient", None)  # a dry run starts no client
    assert rmqstore_main(["replay", str(table), "--key", "U3"]) == 0
    out = capsys.readouterr().out
    assert "would send T UNIQ_KEY=U3" in out and "1 message(s) would be sent" in out
    assert rmqstore_main(["replay", str(table), "--apply"]) == 2
    assert "--apply needs --namesrv" in capsys.readouterr().err
