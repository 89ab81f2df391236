"""DLedger stores (``enableDLegerCommitLog``): the log in ``dledger-<selfId>/data/`` as DLedger entries, each
holding one message record. The scanner's entry framing against hand-built entries, and the real brokers' DLedger
stores (tests/broker/ variants ``dledger`` and ``dledger-kill9``) rebuilt byte-exact and audited."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from jobs.pipeline.audit import audit
from jobs.pipeline.context import Run
from jobs.pipeline.rebuild import rebuild
from storelib.commitlog import (
    DLEDGER_FRAMING,
    END_BAD_MAGIC,
    END_BAD_SIZE,
    END_BLANK,
    END_TORN,
    Message,
    encode_message,
)
from storelib.config import load_broker_config
from storelib.constants import DLEDGER_ENTRY_HEADER
from storelib.inspect import inspect_store
from tests.builders import scan
from tests.test_rebuild_v5 import assert_same_index
from tests.test_v5 import harness_store

DLEDGER_VERSIONS = ["5.5.0", "4.9.7"]


def entry(m: Message, index: int, pos: int, term: int = 0) -> bytes:
    """A DLedger entry at ``pos`` holding ``m`` (its PHYSICALOFFSET pos + 48), as DLedgerEntryCoder writes it."""
    body = encode_message(Message(**{**m.__dict__, "physical_offset": pos + DLEDGER_ENTRY_HEADER}))
    head = struct.pack(">iiqqqiiii", 1, DLEDGER_ENTRY_HEADER + len(body), index, term, pos, 0, 0, 0, len(body))
    return head + body


def data_file(messages: list[Message], size: int) -> bytes:
    """A DLedger data file of ``size`` bytes: the entries, then the end mark (-1, bytes left) and zeros."""
    out = b""
    for i, m in enumerate(messages):
        out += entry(m, i, len(out))
    return out + struct.pack(">ii", -1, size - len(out)) + bytes(size - len(out) - 8)


MESSAGES = [Message(f"Topic{i % 3}", b"x" * (10 + i), queue_id=i % 2, queue_offset=i // 2) for i in range(40)]


@pytest.mark.parametrize("chunk", [64, 1000, 1 << 20])
def test_entries_are_walked_and_each_record_is_where_its_physical_offset_says(chunk: int) -> None:
    data = data_file(MESSAGES, 16384)
    s = scan(data, framing=DLEDGER_FRAMING, chunk_size=chunk, batch_records=7)
    rows = s.rows()
    assert [r["physical_offset"] for r in rows] == [r["stored_physical_offset"] for r in rows]
    assert [(r["queue_id"], r["queue_offset"]) for r in rows] == [(m.queue_id, m.queue_offset) for m in MESSAGES]
    assert (s.end.reason, s.damage) == (END_BLANK, [])
    assert s.end.offset == sum(len(entry(m, 0, 0)) for m in MESSAGES)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [("torn", END_TORN), ("entry-magic", END_BAD_MAGIC), ("entry-size", END_BAD_SIZE), ("record-magic", END_BAD_MAGIC)],
)
def test_a_damaged_entry_ends_the_walk_there(damage: str, reason: str) -> None:
    data = bytearray(data_file(MESSAGES, 16384))
    third = len(entry(MESSAGES[0], 0, 0)) + len(entry(MESSAGES[1], 1, 0))
    if damage == "torn":
        data = data[: third + 60]
    elif damage == "entry-magic":
        struct.pack_into(">i", data, third, 2)
    elif damage == "entry-size":
        struct.pack_into(">i", data, third + 4, struct.unpack_from(">i", data, third + 4)[0] + 4)
    else:
        struct.pack_into(">i", data, third + DLEDGER_ENTRY_HEADER + 4, 0x1234)
    s = scan(bytes(data), framing=DLEDGER_FRAMING)
    assert (s.end.reason, s.end.offset, len(s.offsets())) == (reason, third, 2)


@pytest.mark.broker
@pytest.mark.parametrize("version", DLEDGER_VERSIONS)
def test_a_dledger_store_is_rebuilt_byte_exact_and_audited_clean(spark, tmp_path: Path, version: str) -> None:
    """The real broker's DLedger store (no commitlog/): found from its directories, every entry read, the
    consumequeue/, batchconsumequeue/ and index/ equal to the broker's, and the audit clean."""
    store = harness_store(version, "dledger")
    assert not (store / "store" / "commitlog").exists()
    cfg = load_broker_config(store / "broker.conf")
    run, out = Run(spark, cfg), tmp_path / "out"
    result = rebuild(run, str(store / "store"), str(out))
    assert_same_index(store / "store", out)
    assert result.report["commitlog"]["messages"] == committed_index(store / "store") + 1
    assert result.report["findings"] == []
    assert json.loads((out / "rebuild.json").read_text())["broker_config"]["enableDLegerCommitLog"] is True
    checked = audit(run, str(store / "store"), str(out), None)
    assert ([f.kind for f in checked.findings], checked.exit_code) == ([], 0)


def committed_index(store: Path) -> int:
    """dledger-n0/checkpoint's committedIndex (key=value lines, DLedgerMmapFileStore.persistCheckPoint)."""
    text = (store / "dledger-n0" / "checkpoint").read_text()
    return int(dict(line.split("=", 1) for line in text.split())["committedIndex"])


@pytest.mark.broker
def test_inspect_reads_a_dledger_store() -> None:
    store = harness_store("5.5.0", "dledger")
    report = inspect_store(store / "store", load_broker_config(store / "broker.conf"))
    data = sorted(p.name for p in (store / "store" / "dledger-n0" / "data").iterdir())
    assert [(s.dir, s.name) for s in report.segments] == [("dledger-n0/data", name) for name in data]
    assert report.messages == committed_index(store / "store") + 1
    assert report.all_problems() == []
