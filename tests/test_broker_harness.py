"""Smoke test of the real-broker oracle: the 5.5.0 store exists and its ConsumeQueues hold what the broker acked.

The ConsumeQueue units are read here with struct (20 bytes: commitlog offset, size, tagsCode), sharing no code with
storelib or the harness.
"""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.broker


def cq_units(queue_dir: Path) -> list[tuple[int, int, int]]:
    """(commitlog offset, size, tagsCode) of every written unit of one queue, in queue-offset order."""
    units = []
    for f in sorted(queue_dir.iterdir()):
        data = f.read_bytes()
        units += [struct.unpack_from(">qiq", data, i) for i in range(0, len(data) - 19, 20)]
    return [u for u in units if u[1] > 0]


def test_5_5_0_store_files_exist(broker_store) -> None:
    store = broker_store("5.5.0")
    root = store.root
    assert (store.dir / "COMPLETE").is_file()
    assert len(list((root / "commitlog").iterdir())) > 1
    assert all(f.stat().st_size == 65536 for f in (root / "commitlog").iterdir())
    assert (root / "checkpoint").stat().st_size == 4096
    assert (root / "config" / "topics.json").is_file()
    assert list((root / "index").iterdir())
    assert list((root / "batchconsumequeue" / "TopicBatchCQ").iterdir())
    assert len(list((root / "consumequeue").glob("%LMQ%room-*/0"))) == 5
    assert "mappedFileSizeConsumeQueue=6000" in store.broker_conf.read_text()
    assert "storePathRootDir" not in store.broker_conf.read_text()


def test_5_5_0_plain_topic_queues_hold_every_acked_send(broker_store) -> None:
    store = broker_store("5.5.0")
    sent = store.sent
    assert {s["status"] for s in sent} == {"SEND_OK"}
    acked = Counter(s["queueId"] for s in sent if s["topic"] == "TopicLogs")
    for queue_id in range(4):
        units = cq_units(store.root / "consumequeue" / "TopicLogs" / str(queue_id))
        assert len(units) == acked[queue_id] > 0
        offsets = sorted(s["queueOffset"] for s in sent if s["topic"] == "TopicLogs" and s["queueId"] == queue_id)
        assert offsets == list(range(len(units)))
        assert len({u[0] for u in units}) == len(units)


def test_5_5_0_kill9_broker_serves_every_acked_send_after_recovery(broker_store) -> None:
    store = broker_store("5.5.0", "kill9")
    assert (store.root / "abort").is_file()
    assert store.sent[-1]["status"] == "EXCEPTION"
    acked = {s["msgId"] for s in store.sent if s["status"] == "SEND_OK" and s["topic"] == "TopicLogs"}
    queues = [q for q in store.served if q["kind"] == "queue" and q["topic"] == "TopicLogs"]
    assert [q.get("error") for q in queues] == [None] * 4
    served = {m["msgId"] for m in store.served if m["kind"] == "message" and m["topic"] == "TopicLogs"}
    assert acked and acked == served
