"""DLedger stores (``enableDLegerCommitLog``): the log in ``dledger-<selfId>/data/`` as DLedger entries, each
holding one message record. The scanner's entry framing against hand-built entries, and the real brokers' DLedger
stores (tests/broker/ variants ``dledger`` and ``dledger-kill9``) rebuilt byte-exact and audited."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from jobs.pipeline.audit_flow import audit
from jobs.pipeline.context import Run
from jobs.pipeline.convert_flow import convert
from jobs.pipeline.rebuild_flow import rebuild
from jobs.pipeline.recover_flow import recover
from storelib.broker.config import load_broker_config
from storelib.broker.versions import parse_version, rules_for
from storelib.constants import DLEDGER_ENTRY_HEADER
from storelib.formats.commitlog import Message, encode_message
from storelib.formats.dledger import (
    ENTRY_INDEX,
    ENTRY_POS,
    ENTRY_TERM,
    UNIT_DTYPE,
    UNITS_PER_INDEX_FILE,
    checkpoint_findings,
    differing_units,
    entry_damage,
    index_file_units,
    index_plans,
    parse_checkpoint,
)
from storelib.formats.dledger_convert import plain_records, segment_tail
from storelib.formats.scanner import DLEDGER_FRAMING, END_BAD_MAGIC, END_BAD_SIZE, END_BLANK, END_TORN
from storelib.reports.inspection import inspect_store
from tests import reference
from tests.broker.fixtures import harness_store, release_param
from tests.broker.harness import DLEDGER_SETTINGS, read_jsonl, read_properties, replayed, served
from tests.builders import scan
from tests.reference import assert_queues_as_the_broker_replays_them, assert_same_index, store_files
from tests.storecopy import copy_store

DLEDGER_VERSIONS = ["5.5.0", "4.9.7"]
#: the releases whose DLedger store (variant ``dledger``) is rebuilt and audited: one of each 5.x line, and 4.9.7
DLEDGER_STORE_VERSIONS = ["5.0.0", "5.1.4", "5.2.0", "5.3.3", "5.4.0", "5.5.0", "4.9.7"]


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


@pytest.mark.parametrize("version", [release_param(v) for v in DLEDGER_STORE_VERSIONS])
def test_a_dledger_store_is_rebuilt_byte_exact_and_audited_clean(spark, tmp_path: Path, version: str) -> None:
    """The real broker's DLedger store (no commitlog/): found from its directories, every entry read, the
    consumequeue/, batchconsumequeue/ and index/ equal to the broker's, and the audit clean."""
    store = harness_store(version, "dledger")
    assert not (store / "store" / "commitlog").exists()
    cfg = load_broker_config(store / "broker.conf")
    run, out = Run(spark, cfg), tmp_path / "out"
    result = rebuild(run, str(store / "store"), str(out))
    assert_same_index(store / "store", out)
    assert store_files(out, "dledger-n0/index") == store_files(store / "store", "dledger-n0/index")
    assert result.report.commitlog.messages == committed_index(store / "store") + 1
    assert result.report.findings == ()
    written = json.loads((out / "rebuild.json").read_text())
    assert written["broker_config"]["enableDLegerCommitLog"] is True
    # no flag: the releases detected hold the broker's (the row settled may be an older one these files cannot tell
    # from its own: 5.1.4 gets 5.0, 5.3.3 gets 5.2)
    settled = result.run.broker_rules[str(store / "store")]
    assert settled.releases is not None and settled.releases.holds(parse_version(version)), settled.line
    checked = audit(result.run, str(store / "store"), str(out), None)
    assert ([f.kind for f in checked.findings], checked.exit_code) == ([], 0)


@pytest.mark.parametrize("version", [release_param(v) for v in DLEDGER_STORE_VERSIONS])
def test_a_dledger_store_given_its_release_is_rebuilt_byte_exact_by_its_row(
    spark, tmp_path: Path, version: str
) -> None:
    """``--broker-version`` the broker's own release: its row of the release table writes the broker's files."""
    store = harness_store(version, "dledger")
    cfg = dataclasses.replace(load_broker_config(store / "broker.conf"), brokerVersion=version)
    rebuild(Run(spark, cfg), str(store / "store"), str(tmp_path / "out"))
    assert_same_index(store / "store", tmp_path / "out")
    assert store_files(tmp_path / "out", "dledger-n0/index") == store_files(store / "store", "dledger-n0/index")
    assert (
        json.loads((tmp_path / "out" / "rebuild.json").read_text())["broker_rules"]["name"] == rules_for(version).name
    )


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


def walk_entries(data_file: Path) -> list[tuple[int, int, int]]:
    """(file position, size, index) of each DLedger entry of a data file: magic 1, size, index (plain struct)."""
    data, pos, out = data_file.read_bytes(), 0, []
    while pos + 16 <= len(data) and struct.unpack_from(">i", data, pos)[0] == 1:
        size, index = struct.unpack_from(">iq", data, pos + 4)
        out.append((pos, size, index))
        pos += size
    return out


def damage(store: Path, case: str) -> tuple[str, str, int | None]:
    """Damage a copy of a DLedger store; the finding the audit must give: (kind, file, file offset or None)."""
    node = store / "dledger-n0"
    files = sorted((node / "data").iterdir())
    if case == "torn-entry":  # the last entry's record cut short: its first 60 bytes, then zeros
        pos, size, _ = walk_entries(files[-1])[-1]
        with open(files[-1], "r+b") as f:
            f.seek(pos + DLEDGER_ENTRY_HEADER + 60)
            f.write(bytes(size - DLEDGER_ENTRY_HEADER - 60))
        return "commitlog-torn-tail", f"dledger-n0/data/{files[-1].name}", pos
    if case == "index-unit":  # one unit's pos field off by 8
        unit = len(walk_entries(files[0])) + 3
        with open(node / "index" / "00000000000000000000", "r+b") as f:
            f.seek(unit * 32 + 4)
            pos = struct.unpack(">q", f.read(8))[0]
            f.seek(unit * 32 + 4)
            f.write(struct.pack(">q", pos + 8))
        return "dledger-index-wrong", "dledger-n0/index/00000000000000000000", unit * 32
    if case == "checkpoint-ahead":
        last = committed_index(store)
        (node / "checkpoint").write_text(f"committedIndex={last + 5}\nendIndex={last + 5}\n")
        return "dledger-checkpoint-ahead", "dledger-n0/checkpoint", None
    if case == "term-backwards":  # entry k of the second file says term 1: entry k + 1 (term 0) goes back
        pos = walk_entries(files[1])[4][0]
        with open(files[1], "r+b") as f:
            f.seek(pos + 16)
            f.write(struct.pack(">q", 1))
        return "dledger-entry-term", f"dledger-n0/data/{files[1].name}", walk_entries(files[1])[5][0]
    files[2].unlink()  # a data file missing
    return "dledger-entry-index", f"dledger-n0/data/{files[3].name}", 0


@pytest.mark.broker
@pytest.mark.parametrize("case", ["torn-entry", "index-unit", "checkpoint-ahead", "term-backwards", "missing-file"])
def test_the_audit_names_damage_only_a_dledger_store_has(spark, tmp_path: Path, case: str) -> None:
    """A copy of the healthy DLedger store, damaged one way: the audit names it (kind, file, offset), exit 1."""
    store = harness_store("5.5.0", "dledger")
    copy = copy_store(store / "store", tmp_path / "store", without=("lock",))
    kind, file, file_offset = damage(copy, case)
    result = audit(Run(spark, load_broker_config(store / "broker.conf")), str(copy), None, None)
    named = [(f.file, f.file_offset) for f in result.findings if f.kind == kind]
    assert (file, file_offset) in named if file_offset is not None else [n[0] for n in named] == [file]
    assert result.exit_code == 1
    if case == "index-unit":
        assert [r.file for r in result.repairs] == [file]


def recovered(spark, store: Path, tmp_path: Path, broker_conf: Path) -> int:
    """``rmqstore recover --apply`` on ``store``: rebuilt into tmp_path, backup there too; its exit code."""
    run = Run(spark, load_broker_config(broker_conf))
    run = rebuild(run, str(store), str(tmp_path / "rebuilt"), on_error="skip-segment").run
    return recover(run, str(store), str(tmp_path / "rebuilt"), True, backup_dir=tmp_path / "backup")


def queue_view(root: Path, data_end: int) -> dict[tuple[str, int], set[tuple[int, int]]]:
    """Per queue of the store's consumequeue/ and batchconsumequeue/ files: (queue offset, commitlog offset) of
    each unit before ``data_end`` (a BatchCQ unit: its msgBaseOffset), read with plain struct."""
    out: dict[tuple[str, int], set[tuple[int, int]]] = {}
    for kind, unit in (("consumequeue", 20), ("batchconsumequeue", 46)):
        for f in sorted(root.glob(f"{kind}/*/*/*")):
            data, key = f.read_bytes(), (f.parent.parent.name, int(f.parent.name))
            first = int(f.name) // unit if unit == 20 else 0
            for i in range(len(data) // unit):
                offset, size = struct.unpack_from(">qi", data, i * unit)
                if size > 0 and 0 <= offset < data_end:
                    queue_offset = first + i if unit == 20 else struct.unpack_from(">q", data, i * unit + 28)[0]
                    out.setdefault(key, set()).add((queue_offset, offset))
    return out


def served_view(served: list[dict], data_end: int) -> dict[tuple[str, int], set[tuple[int, int]]]:
    """The same view of what the restarted broker served: (queue offset, commitlog offset) of each message before
    ``data_end``; a batch's messages share one commitlog offset and count from its first queue offset."""
    first: dict[tuple[str, int, int], int] = {}
    for m in served:
        if m["kind"] == "message" and m["commitLogOffset"] < data_end:
            key = (m["topic"], m["queueId"], m["commitLogOffset"])
            first[key] = min(first.get(key, m["queueOffset"]), m["queueOffset"])
    out: dict[tuple[str, int], set[tuple[int, int]]] = {}
    for (topic, queue_id, offset), queue_offset in first.items():
        out.setdefault((topic, queue_id), set()).add((queue_offset, offset))
    return out


@pytest.mark.broker
@pytest.mark.parametrize("version", DLEDGER_VERSIONS)
def test_recover_after_kill9_gives_what_the_broker_serves_after_its_own_restart(
    spark, tmp_path: Path, version: str
) -> None:
    """The DLedger store killed with kill -9, with the last 3 units of a queue lost too: after recover --apply,
    every queue holds what a broker started on the crashed store served (served.jsonl; messages the restarted
    broker wrote itself are past the data's end)."""
    store = harness_store(version, "dledger-kill9")
    copy = copy_store(store / "store", tmp_path / "store", without=("lock",))
    cq = sorted((copy / "consumequeue" / "TopicOrders" / "0").iterdir())[-1]
    data = cq.read_bytes()
    keep = (-(-len(data.rstrip(b"\0")) // 20) - 3) * 20  # all units written but the last 3
    cq.write_bytes(data[:keep] + bytes(len(data) - keep))
    assert queue_view(copy, 1 << 62) != queue_view(store / "store", 1 << 62)
    files = sorted((copy / "dledger-n0" / "data").iterdir())
    pos, size, _ = next(e for f in reversed(files) for e in reversed(walk_entries(f)))
    data_end = int(next(f for f in reversed(files) if walk_entries(f)).name) + pos + size
    assert recovered(spark, copy, tmp_path, store / "broker.conf") == 0
    served = served_view(read_jsonl(store / "served.jsonl"), data_end)
    recovered_view = queue_view(copy, data_end)
    # 4.9.7 only (5.5.0 writes no LMQ queue in DLedger mode): the restarted broker serves its LMQ queues with
    # other queue offsets than its files held at the crash and the records' INNER_MULTI_QUEUE_OFFSET say; not
    # reproduced, so left out here (docs/modes.md: DLedger stores)
    lmq = {q for q in served if q[0].startswith("%LMQ%")}
    assert not lmq if version >= "5" else lmq == {q for q in recovered_view if q[0].startswith("%LMQ%")}
    # a queue the served dump could not pull (4.9.7: RMQ_SYS_TRANS_OP_HALF_TOPIC, "topic not exist"): its max offset
    lines = read_jsonl(store / "served.jsonl")
    unpulled = {(q["topic"], q["queueId"]): q["maxOffset"] for q in lines if q["kind"] == "queue" and "error" in q}
    assert {q: max(o for o, _ in recovered_view[q]) + 1 for q in unpulled} == unpulled
    kept = {q: v for q, v in recovered_view.items() if q not in lmq | set(unpulled)}
    assert kept == {q: v for q, v in served.items() if q not in lmq}
    assert sum(len(v) for v in served.values()) > 500


@pytest.mark.broker
def test_recover_rebuilds_a_damaged_dledger_index(spark, tmp_path: Path) -> None:
    """One unit of dledger-n0/index/ wrong: recover --apply replaces the file with the broker's own bytes."""
    store = harness_store("5.5.0", "dledger")
    copy = copy_store(store / "store", tmp_path / "store", without=("lock",))
    damage(copy, "index-unit")
    assert recovered(spark, copy, tmp_path, store / "broker.conf") == 0
    assert store_files(copy, "dledger-n0/index") == store_files(store / "store", "dledger-n0/index")


def units(indexes: list[int], terms: list[int] | None = None, pos: list[int] | None = None) -> np.ndarray:
    out = np.zeros(len(indexes), UNIT_DTYPE)
    out["magic"], out["index"], out["size"] = 1, indexes, 100
    out["term"] = terms or [0] * len(indexes)
    out["pos"] = pos if pos is not None else [100 * i for i in range(len(indexes))]
    return out


def test_entry_damage_names_the_entry_recovery_stops_at() -> None:
    where = np.arange(5) * 100
    assert entry_damage(units([0, 1, 2, 3, 4]), where, None) == []
    assert entry_damage(units([7, 8]), where[:2], (6, 0)) == []
    assert entry_damage(units([0, 1, 3, 4, 5]), where, None) == [(200, ENTRY_INDEX, "entry index 3 after 1")]
    assert entry_damage(units([0, 1, 2], [1, 1, 0]), where[:3], None) == [(200, ENTRY_TERM, "term 0 after term 1")]
    assert entry_damage(units([0, 1], pos=[0, 108]), where[:2], None) == [
        (100, ENTRY_POS, "the entry's pos field says 108")
    ]
    assert entry_damage(units([5]), where[:1], (3, 0))[0][1] == ENTRY_INDEX


def test_index_units_sit_at_their_entry_index_across_files() -> None:
    first, last = UNITS_PER_INDEX_FILE - 2, UNITS_PER_INDEX_FILE + 1
    ranges = [("dledger-n0/data", "a", 0, first - 1), ("dledger-n0/data", "b", first, last)]
    assert index_plans(ranges) == [("dledger-n0/data", 0, ["a", "b"]), ("dledger-n0/data", 1, ["b"])]
    u = units(list(range(first, last + 1)))
    assert index_file_units(u, 0)[-2:].tolist() == u[:2].tolist()
    assert len(index_file_units(u, 0)) == UNITS_PER_INDEX_FILE
    assert index_file_units(u, 1).tolist() == u[2:].tolist()
    assert differing_units(index_file_units(u, 1), index_file_units(u, 1)) == (-1, 0)
    assert differing_units(index_file_units(u, 1)[:1], index_file_units(u, 1)) == (1, 1)


def test_the_checkpoint_against_the_last_entry() -> None:
    assert parse_checkpoint("committedIndex=7\nendIndex=9\nx=1\nendIndex=oops\n") == {
        "committedIndex": 7,
        "endIndex": 9,
    }
    assert checkpoint_findings({"committedIndex": 9, "endIndex": 9}, 9, "cp") == []
    ahead = checkpoint_findings({"committedIndex": 9, "endIndex": 12}, 9, "cp")
    assert [(k, n) for k, _, n in ahead] == [("dledger-checkpoint-ahead", 3)]
    behind = checkpoint_findings({"committedIndex": 5, "endIndex": 9}, 9, "cp")
    assert [(k, n) for k, _, n in behind] == [("dledger-uncommitted", 4)]


def served_messages(lines: list[dict]) -> dict[tuple[str, int], set[tuple[int, object]]]:
    """Per queue, (queue offset, msgId) of every message a broker served; a message without UNIQ_KEY (the
    transaction op messages) has its offsetMsgId, store host + commitlog offset, as msgId, which a conversion
    changes: (keys, tags) stand for it."""
    out: dict[tuple[str, int], set[tuple[int, object]]] = {}
    for m in lines:
        if m["kind"] == "message":
            ident = m["msgId"] if m["msgId"] != m["offsetMsgId"] else (m["keys"], m["tags"])
            out.setdefault((m["topic"], m["queueId"]), set()).add((m["queueOffset"], ident))
    return out


@pytest.mark.broker
@pytest.mark.parametrize(
    ("version", "variant"), [("5.5.0", "dledger"), ("5.5.0", "dledger-mixed"), ("4.9.7", "dledger")]
)
def test_convert_gives_a_plain_store_a_broker_in_file_mode_serves_as_the_dledger_broker_did(
    spark, tmp_path: Path, version: str, variant: str
) -> None:
    """The DLedger store converted (the source untouched): plain segments whose records sit where their
    PHYSICALOFFSET says, and a broker of the release that wrote it, started in file mode on the result, serves every
    queue as a DLedger broker started on the source does; its ConsumeQueues are those that broker writes when it
    dispatches the converted commitlog again."""
    store = harness_store(version, variant)
    settings = read_properties(store / "broker.conf")
    source = store_files(store / "store", "dledger-n0/data", "commitlog")
    out = tmp_path / "plain"
    done = convert(Run(spark, load_broker_config(store / "broker.conf")), str(store / "store"), str(out))
    assert store_files(store / "store", "dledger-n0/data", "commitlog") == source
    assert not list(out.glob("dledger-*")) and (out / "checkpoint").is_file()
    walked = list(reference.walk_commitlog(out / "commitlog"))
    assert [r.offset for r in walked] == [r.physical_offset for r in walked]
    old = list(reference.walk_commitlog(store / "store" / "commitlog")) if variant == "dledger-mixed" else []
    assert len(walked) == done.messages == len(old) + committed_index(store / "store") + 1
    plain = {k: v for k, v in settings.items() if k not in DLEDGER_SETTINGS}
    assert served_messages(served(version, out, plain)) == served_messages(served(version, store / "store", settings))
    assert_queues_as_the_broker_replays_them(replayed(version, out, plain), out)


def test_plain_records_sit_where_their_physical_offset_says_and_keep_everything_else() -> None:
    """Entries' records packed from a segment start: each PHYSICALOFFSET is where the record now is; a full
    segment then ends with a BLANK over the rest."""
    start = 65536
    s = scan(data_file(MESSAGES, 16384), base=start, framing=DLEDGER_FRAMING, batch_records=7)
    parts, at = [], start
    for b in s.batches:
        parts.append(plain_records(b, at))
        at += int(b.total_size.sum())
    head, zeros = segment_tail(at - start, 16384, full=True)
    segment = b"".join(parts) + head + bytes(zeros)
    walked = scan(segment, base=start)
    assert (walked.end.reason, len(segment)) == (END_BLANK, 16384)
    rows = walked.rows()
    assert [r["physical_offset"] for r in rows] == [r["stored_physical_offset"] for r in rows]
    same = ("queue_id", "queue_offset", "body_crc", "total_size", "store_timestamp", "flag")
    assert [{k: r[k] for k in same} for r in rows] == [{k: r[k] for k in same} for r in s.rows()]


@pytest.mark.broker
def test_entries_past_committed_index_after_kill9_are_named(spark) -> None:
    """kill -9 left the checkpoint's committedIndex behind the data: dledger-uncommitted, counted from the store."""
    store = harness_store("5.5.0", "dledger-kill9")
    last = max(index for f in (store / "store/dledger-n0/data").iterdir() for _, _, index in walk_entries(f))
    result = audit(Run(spark, load_broker_config(store / "broker.conf")), str(store / "store"), None, None)
    named = [(f.file, f.count) for f in result.findings if f.kind == "dledger-uncommitted"]
    lag = last - committed_index(store / "store")
    assert named == ([("dledger-n0/checkpoint", lag)] if lag > 0 else [])
    assert not {"dledger-checkpoint-ahead", "dledger-index-wrong"} & {f.kind for f in result.findings}


@pytest.mark.broker
def test_a_mixed_store_is_rebuilt_byte_exact_and_audited_clean(spark, tmp_path: Path) -> None:
    """The broker first in file mode, then switched to DLedger: its old commitlog/ below dledger-n0/data/, both
    read in offset order; the index equal to the broker's, the audit clean."""
    store = harness_store("5.5.0", "dledger-mixed")
    root, out = store / "store", tmp_path / "out"
    old, data = sorted((root / "commitlog").iterdir()), sorted((root / "dledger-n0" / "data").iterdir())
    assert old and data and int(old[-1].name) < int(data[0].name)
    run = Run(spark, load_broker_config(store / "broker.conf"))
    result = rebuild(run, str(root), str(out))
    assert_same_index(root, out)
    assert store_files(out, "dledger-n0/index") == store_files(root, "dledger-n0/index")
    assert result.report.findings == ()
    assert result.report.commitlog.messages == len(list(reference.walk_commitlog(root / "commitlog"))) + sum(
        len(walk_entries(f)) for f in data
    )
    checked = audit(result.run, str(root), str(out), None)
    assert ([f.kind for f in checked.findings], checked.exit_code) == ([], 0)
