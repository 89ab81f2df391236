"""``rmqstore diff`` and ``rmqstore replay`` judged by a real master/slave pair (tests/broker/harness.py, variant
``failover``, 5.5.0): the slave lagged (paused), the master was killed -9 in the middle of the sends; the diff of the
old master's store against the slave's must name exactly the messages the slave lacks, checked against what the
producer was told (sent.jsonl, Failover.java) and against what each store holds (tests.reference's own walk of the
commitlog); replaying them into the slave promoted (a broker started on a copy of its store as the master) must
leave each there exactly once, with its original UNIQ_KEY and body, and a second replay must send nothing."""

from __future__ import annotations

import collections
import json
import shutil
import zlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from storelib.broker.config import read_properties
from tests.broker.harness import running_broker
from tests.reference import parse_message_properties, walk_commitlog
from tests.storecopy import rmqstore_main

pytestmark = pytest.mark.broker


def messages(store: Path) -> dict[tuple[str, str], bytes]:
    """(topic, UNIQ_KEY) -> body of every message record of the store."""
    return {(r.topic, r.properties["UNIQ_KEY"]): r.body for r in walk_commitlog(store / "commitlog")}


@pytest.fixture(scope="module")
def diffed(broker_store, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The pair, and the diff of the old master's store against the slave's: (exit code, report dir, --out dir)."""
    pair = broker_store("5.5.0", "failover")
    tmp = tmp_path_factory.mktemp("diff")
    report, out = tmp / "report", tmp / "missing"
    argv = ["diff", str(pair.root), str(pair.slave_root), "--report", str(report), "--out", str(out)]
    return pair, rmqstore_main([*argv, "--broker-config", str(pair.broker_conf)]), report, out


def test_diff_names_exactly_the_acknowledged_messages_the_slave_lacks(diffed) -> None:  # type: ignore[no-untyped-def]
    pair, code, report, out = diffed
    master, slave = messages(pair.root), messages(pair.slave_root)
    told = {(s["topic"], s["uniqKey"]): s["status"] for s in pair.sent}
    acked = {k for k, status in told.items() if status == "SEND_OK"}
    assert acked <= master.keys()  # SYNC_FLUSH: the kill -9 lost nothing the master acknowledged
    assert slave.keys() <= master.keys()
    master_at = {r.offset: (r.topic, r.body, r.properties) for r in walk_commitlog(pair.root / "commitlog")}
    slave_at = {r.offset: (r.topic, r.body, r.properties) for r in walk_commitlog(pair.slave_root / "commitlog")}
    assert slave_at.items() <= master_at.items()  # the slave's log: the master's, record for record, at its offsets
    lacking = acked - slave.keys()
    assert lacking and slave.keys() & acked  # the slave replicated a part, and lagged

    assert code == 1
    named = {(r["topic"], r["uniq_key"]): r for r in pq.read_table(out).to_pylist()}
    assert named.keys() == master.keys() - slave.keys()
    assert named.keys() & acked == lacking
    assert {told.get(k) for k in named.keys() - acked} <= {"EXCEPTION", None}  # stored, the answer lost in the kill
    for key, row in named.items():
        assert row["body"] == master[key] and row["store"] == str(pair.root)
        assert parse_message_properties(row["properties"])["UNIQ_KEY"] == key[1]
    counts = json.loads((report / "report.json").read_text())["counts"]
    assert counts["missing"] == [len(named), 0]
    assert counts["records"] == [len(master), len(slave)]
    assert counts["queue_offset"] == [0, 0]


def test_replay_into_the_promoted_slave_leaves_each_message_once(diffed, v5_fixture, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    pair, _, _, out = diffed
    missing = messages(pair.root).keys() - messages(pair.slave_root).keys()
    acked = {(s["topic"], s["uniqKey"]) for s in pair.sent if s["status"] == "SEND_OK"}
    capsys.readouterr()
    assert rmqstore_main(["replay", str(out)]) == 0
    assert f"{len(missing):,} message(s) would be sent" in capsys.readouterr().out  # a dry run: no cluster named

    promoted = tmp_path / "promoted"
    shutil.copytree(pair.slave_root, promoted / "store")
    settings = read_properties(pair.broker_conf)  # brokerId 0, a master: the slave promoted on its own store
    with running_broker("5.5.0", promoted, settings) as broker:
        argv = ["replay", str(out), "--apply", "-n", broker.namesrv_addr, "--rate", "500"]
        results = []
        for journal in ("journal", "journal", "fresh-journal"):  # the second from the journal, the third asks
            assert rmqstore_main([*argv, "--journal", str(tmp_path / journal)]) == 0
            results.append(capsys.readouterr().out.splitlines()[0].rsplit(" (", 1)[0])  # less the seconds
        # from a store: the 5.5.0 sample's committed transactions and client-compressed bodies (sysFlag 0x301)
        sample = {
            (r.topic, r.properties.get("UNIQ_KEY")): r for r in walk_commitlog(v5_fixture / "clean" / "commitlog")
        }
        commits = {k for k, r in sample.items() if r.sys_flag & 0xC == 0x8}
        zipped = sorted(k for k, r in sample.items() if r.sys_flag & 0x1 and k[0] == "TopicOrders")[:3]
        argv = ["replay", str(v5_fixture / "clean"), "--apply", "-n", broker.namesrv_addr]
        for journal, only in (("tx", ["--topic", "TopicTx"]), ("zipped", [a for k in zipped for a in ("--key", k[1])])):
            assert rmqstore_main([*argv, "--journal", str(tmp_path / journal), *only]) == 0
            results.append(capsys.readouterr().out.splitlines()[0].rsplit(" (", 1)[0])
    n = len(missing)
    assert results == [
        f"replay: {n:,} sent, 0 skipped as already present, 0 failed",
        f"replay: 0 sent, {n:,} skipped as already present, 0 failed",
        f"replay: 0 sent, {n:,} skipped as already present, 0 failed",
        f"replay: {len(commits)} sent, 0 skipped as already present, 0 failed",
        "replay: 3 sent, 0 skipped as already present, 0 failed",
    ]
    held = collections.Counter(
        (r.topic, r.properties["UNIQ_KEY"]) for r in walk_commitlog(promoted / "store" / "commitlog")
    )
    assert all(held[k] == 1 for k in acked | missing)  # each acknowledged message once, by its original UNIQ_KEY
    master = messages(pair.root)
    replayed = {
        (r.topic, r.properties["UNIQ_KEY"]): r
        for r in walk_commitlog(promoted / "store" / "commitlog")
        if (r.topic, r.properties["UNIQ_KEY"]) in missing
    }
    for key, r in replayed.items():
        assert r.body == master[key]
    stored = {(r.topic, r.properties.get("UNIQ_KEY")): r for r in walk_commitlog(promoted / "store" / "commitlog")}
    for key in commits:  # a committed transaction's message: a normal message now, its body as it was
        assert stored[key].sys_flag & 0xC == 0 and "TRAN_MSG" not in stored[key].properties
        assert held[key] == 1 and stored[key].body == sample[key].body
    for key in zipped:  # the body sent uncompressed; the client compressed it again (over 4 KiB)
        assert held[key] == 1 and stored[key].sys_flag & 0x1
        assert zlib.decompress(stored[key].body) == zlib.decompress(sample[key].body)
    journal = [json.loads(line) for line in (tmp_path / "journal").read_text().splitlines()]
    assert [e["result"] for e in journal] == ["sent"] * n
