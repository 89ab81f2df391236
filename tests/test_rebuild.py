"""End-to-end rebuilds on real Spark (local[2]) against stores the real 4.9.8 broker wrote."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from jobs.pipeline.context import Run
from jobs.pipeline.rebuild_flow import list_segments, rebuild
from jobs.pipeline.store_rules import store_rules
from storelib.broker.config import BrokerConfig, broker_config_from_properties, load_broker_config
from storelib.errors import DamageStop
from storelib.formats.commitlog import Message, encode_message
from storelib.reports.report import RebuildReport
from storelib.synthetic.generator import generate_store
from storelib.synthetic.spec import PRESETS
from tests import storecopy
from tests.conftest import FIXTURE_DIR
from tests.reference import (
    assert_index_equals_reference,
    assert_same_index,
    walk_commitlog,
)

pytestmark = pytest.mark.skipif(not FIXTURE_DIR.is_dir(), reason="shared fixture not present")


@pytest.fixture(scope="module")
def cfg() -> BrokerConfig:
    return load_broker_config(FIXTURE_DIR / "broker.conf")


@pytest.mark.parametrize("store", ["clean", "expired"])
def test_rebuild_matches_the_broker_byte_for_byte(spark, cfg, tmp_path, store):
    out = tmp_path / "out"
    result = rebuild(Run(spark, cfg), str(FIXTURE_DIR / store), str(out))
    assert_same_index(FIXTURE_DIR / store, out)
    summary = json.loads(
        (FIXTURE_DIR / "expected" / ("expired/" if store == "expired" else "") / "dump_summary.json").read_text()
    )
    assert result.report.commitlog.messages == summary["messages"]
    assert result.report.commitlog.max_offset == summary["maxPhyOffset"]
    assert sum(q.entries for q in result.report.consume_queues) == summary["cqEntries"]
    assert [f for f in result.report.findings if f.severity != "info"] == []
    written = (out / "rebuild.json").read_text()
    assert RebuildReport.from_json(written) == result.report and result.report.to_json() == written


def test_the_store_rules_come_back_in_a_new_run_and_the_given_one_is_unchanged(cfg) -> None:
    """store_rules returns the settled settings and rules (Run.with_rules); Run is frozen, nothing rewrites it."""
    run = Run(None, cfg)  # type: ignore[arg-type]  # no Spark: the rules are read on the driver
    segments, _ = list_segments(str(FIXTURE_DIR / "clean"), cfg)
    settled = store_rules(run, str(FIXTURE_DIR / "clean"), segments)
    assert run.broker_rules == {} and run.cfg is cfg and cfg.storeType == cfg.brokerVersion == ""
    assert (settled.cfg.storeType, settled.cfg.brokerVersion) == ("default", "4.9.1")  # the lowest detected release
    assert settled.broker_rules[str(FIXTURE_DIR / "clean")].rules.name == settled.cfg.rules.name == "4.9.1"
    assert store_rules(settled, str(FIXTURE_DIR / "clean"), segments) is settled  # once per run and store
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.cfg = settled.cfg  # type: ignore[misc]


def test_crashed_store_rebuilds_the_clean_index_and_reports_the_crc_failures(spark, cfg, tmp_path):
    """crashed/ = clean/ + damage: both CRC failures are reported and, unlike the broker, nothing after them is lost."""
    out = tmp_path / "out"
    result = rebuild(Run(spark, cfg), str(FIXTURE_DIR / "crashed"), str(out))
    assert_same_index(FIXTURE_DIR / "clean", out)
    crc = [(f.file, f.commitlog_offset, f.file_offset) for f in result.report.findings if f.kind == "crc-mismatch"]
    assert crc == [
        ("commitlog/00000000000001835008", 1965519, 130511),
        ("commitlog/00000000000001835008", 1965763, 130755),
    ]
    last = result.report.commitlog.segments[-1]
    assert (last.file, last.end_reason, last.messages) == ("00000000000003538944", "zero-tail", 0)


def test_rerun_gives_byte_identical_output(spark, cfg, tmp_path):
    out = tmp_path / "out"
    rebuild(Run(spark, cfg), str(FIXTURE_DIR / "expired"), str(out))
    first = storecopy.tree_digest(out)
    rebuild(Run(spark, cfg), str(FIXTURE_DIR / "expired"), str(out))
    assert storecopy.tree_digest(out) == first
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging or old output left behind


@pytest.mark.parametrize("store", ["clean", "crashed"])
def test_segments_cut_into_byte_ranges_rebuild_the_same_files(spark, cfg, tmp_path, store, monkeypatch):
    """Every 128 KiB segment parsed in 7 byte ranges (storelib.broker.segments.Piece): the same files and rebuild.json
    as the parse of whole segments, none of them parsed whole again."""
    import jobs.pipeline.parse as parse_module

    whole = rebuild(Run(spark, cfg), str(FIXTURE_DIR / store), str(tmp_path / "whole"))
    monkeypatch.setattr(parse_module, "parse_task_bytes", lambda total, slots: 20_000)
    ranged = rebuild(Run(spark, cfg), str(FIXTURE_DIR / store), str(tmp_path / "ranged"))
    assert ranged.whole == frozenset()
    assert storecopy.tree_digest(tmp_path / "ranged") == storecopy.tree_digest(tmp_path / "whole")
    assert ranged.report == whole.report


def test_ranges_that_do_not_meet_are_parsed_whole_with_the_same_findings(spark, cfg, tmp_path, monkeypatch):
    """A damaged record before a range's end and a record with a damaged body after it: the first range's search
    past the damage takes neither (the second fails its BODYCRC), the next range starts at the second (it frames);
    the ranges do not meet, the segment is parsed whole and gives what the run without ranges gives."""
    import jobs.pipeline.parse as parse_module

    store = copy_store("clean", tmp_path / "store")
    seg = store / "commitlog" / "00000000000000393216"
    data = bytearray(seg.read_bytes())
    data[18546 + 4] ^= 0xFF  # the magic of the last record starting before the first range's end (18,725)
    data[18990 + 100] ^= 0xFF  # a body byte of the first record after it
    seg.write_bytes(bytes(data))
    monkeypatch.setattr(parse_module, "parse_task_bytes", lambda total, slots: 20_000)
    result = rebuild(Run(spark, cfg), str(store), str(tmp_path / "out"))
    assert result.whole == frozenset({seg.name})
    holes = [f for f in result.report.findings if f.kind == "damaged-records"]
    assert [(f.commitlog_offset, f.count) for f in holes] == [(393216 + 18546, 19181 - 18546)]
    monkeypatch.setattr(parse_module, "parse_task_bytes", lambda total, slots: 256 << 20)
    unranged = rebuild(Run(spark, cfg), str(store), str(tmp_path / "out2"))
    assert result.report == unranged.report
    assert storecopy.tree_digest(tmp_path / "out") == storecopy.tree_digest(tmp_path / "out2")


def copy_store(name: str, dest: Path) -> Path:
    """A writable copy of a fixture store's commitlog and checkpoint (no index to compare with)."""
    return storecopy.copy_store(FIXTURE_DIR / name, dest, without=("consumequeue", "index"))


def test_garbage_over_a_middle_segments_first_record_costs_that_record(spark, cfg, tmp_path):
    """Before the scan went past damage, this stopped the run (segment-bad-magic) and skip-segment left the whole
    segment out; now the record is a damaged byte range and the segment's other 478 records are indexed."""
    store = copy_store("clean", tmp_path / "store")
    seg = store / "commitlog" / "00000000000000393216"
    data = bytearray(seg.read_bytes())
    data[0:16] = b"\xde\xad\xbe\xef" * 4  # over the segment's first TOTALSIZE and magic: framing is lost
    seg.write_bytes(bytes(data))
    out = tmp_path / "out"
    result = rebuild(Run(spark, cfg), str(store), str(out))
    errors = [f for f in result.report.findings if f.severity == "error"]
    assert {f.kind for f in errors} == {"damaged-records", "queue-offset-gap"}
    (hole,) = [f for f in errors if f.kind == "damaged-records"]
    assert (hole.file, hole.commitlog_offset, hole.count) == ("commitlog/00000000000000393216", 393216, 136)
    (gap,) = [f for f in errors if f.kind == "queue-offset-gap"]
    assert (gap.topic, gap.queue_id, gap.queue_offset, gap.count) == ("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0, 18, 1)
    assert result.summaries[seg.name].messages == 478


def test_missing_segment_is_a_reported_gap(spark, cfg, tmp_path):
    store = copy_store("clean", tmp_path / "store")
    (store / "commitlog" / "00000000000001048576").unlink()
    with pytest.raises(DamageStop) as err:
        rebuild(Run(spark, cfg), str(store), str(tmp_path / "out"))
    gaps = [f for f in err.value.findings if f.kind == "segment-gap"]
    assert [(g.commitlog_offset, g.count) for g in gaps] == [(1048576, 131072)]


def test_output_inside_the_store_is_refused(spark, cfg, tmp_path):
    store = copy_store("expired", tmp_path / "store")
    with pytest.raises(ValueError, match="never writes into a store"):
        rebuild(Run(spark, cfg), str(store), str(store / "rebuilt"))


def test_hostile_topic_never_becomes_a_path(spark, tmp_path):
    # hand-made records carry no release's fingerprint and two puts share a slot (hashSlotCount differs before
    # 4.7.1): the release is given
    cfg = BrokerConfig(
        mappedFileSizeCommitLog=4096,
        mappedFileSizeConsumeQueue=200,
        maxHashSlotNum=7,
        maxIndexNum=10,
        brokerVersion="4.9.8",
    )
    records = b""
    for i, topic in enumerate(["ok_topic", "../../escape", "ok_topic"]):
        m = Message(
            topic=topic,
            body=b"x",
            queue_offset=0 if i < 2 else 1,
            physical_offset=len(records),
            store_timestamp=1_700_000_000_000 + i,
            properties="KEYS\x01k",
        )
        records += encode_message(m)
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    (store / "commitlog" / "00000000000000000000").write_bytes(records + bytes(4096 - len(records)))
    out = tmp_path / "out"
    result = rebuild(Run(spark, cfg), str(store), str(out))
    hostile = [f for f in result.report.findings if f.kind == "hostile-topic-name"]
    assert [h.topic for h in hostile] == ["../../escape"]
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == sorted(
        [
            "store/commitlog/00000000000000000000",
            "out/consumequeue/ok_topic/0/00000000000000000000",
            "out/checkpoint",
            "out/rebuild.json",
            *[f"out/index/{f.name}" for f in result.report.index_files],
        ]
    )


def divisor_at_least(n: int, low: int) -> int:
    return next(d for d in range(low, n + 1) if n % d == 0)


def last_message_has_index_keys(store: Path) -> bool:
    *_, last = walk_commitlog(store / "commitlog")
    keys = [k for k in last.properties.get("KEYS", "").split(" ") if k]
    return last.sys_flag & 0xC != 0xC and ("UNIQ_KEY" in last.properties or bool(keys))


@pytest.mark.parametrize("exact_fill", [False, True])
def test_rebuild_reproduces_generated_stores(spark, tmp_path, exact_fill):
    """Every feature of the generator (expired head, BLANK rolls, v2 records, IPv6, all transaction types,
    delays, several IndexFiles). With ``exact_fill`` the entries fill the IndexFiles exactly and keyless
    messages follow, so the broker's empty successor file must appear."""
    preset = PRESETS["demo"]
    spec = dataclasses.replace(preset.spec, messages=6000, long_topic=True, deleted_head_segments=2)
    cfg = broker_config_from_properties({**preset.broker, "mappedFileSizeCommitLog": str(256 << 10)})
    if exact_fill:
        spec = dataclasses.replace(spec, keyed_fraction=0.5, uniq_key_fraction=0.0)
        for seed in range(20):  # a seed whose last message has no index keys
            spec = dataclasses.replace(spec, seed=seed)
            entries = generate_store(tmp_path / f"probe{seed}", spec, cfg).index_entries
            if not last_message_has_index_keys(tmp_path / f"probe{seed}"):
                break
        cfg = dataclasses.replace(cfg, maxIndexNum=divisor_at_least(entries, entries // 7) + 1)
    summary = generate_store(tmp_path / "store", spec, cfg)
    assert summary.deleted_segments == 2 and summary.kinds["v2"] > 0
    result = rebuild(Run(spark, cfg), str(tmp_path / "store"), str(tmp_path / "out"))
    assert_index_equals_reference(tmp_path / "store", tmp_path / "out", cfg)
    assert len(result.report.index_files) == summary.index_files > 2
    if exact_fill:
        assert [f.index_count for f in result.report.index_files[-2:]] == [cfg.maxIndexNum, 1]
    assert [f for f in result.report.findings if f.severity != "info"] == []


def test_the_index_stage_waits_for_every_summary_and_gives_up_once_the_parse_is_over(tmp_path: Path) -> None:
    """wait_for_summaries: the summaries as soon as all are there; an error, not a hang, when the queue writers'
    job has ended (``parsed``) and one is still missing."""
    from jobs.pipeline.rebuild_flow import wait_for_summaries
    from storelib.broker.segments import Piece, PieceSummary, Segment, SegmentSummary
    from udfs.parse import summary_path

    segments = [Segment(f"file:///s/{n:020d}", f"{n:020d}", n, 1024) for n in (0, 1024)]
    tasks = [[Piece(s, 0, s.size) for s in segments]]
    scratch = str(tmp_path)

    def piece(seg: Segment) -> str:
        summary = SegmentSummary(seg.name, "zero-tail", seg.start, "", 0, 0, 0, 0, 0, -1, 0, "crc32:00000000:0")
        return PieceSummary(seg.name, summary, seg.start, None, False, ()).to_json()

    Path(summary_path(scratch, segments[0].name)).write_text(piece(segments[0]))
    parsed = threading.Event()
    parsed.set()
    with pytest.raises(RuntimeError, match="no summary of 1 piece"):
        wait_for_summaries(scratch, tasks, parsed)
    waiter = threading.Timer(0.3, lambda: _land(summary_path(scratch, segments[1].name), piece(segments[1])))
    waiter.start()
    found = wait_for_summaries(scratch, tasks, threading.Event())  # polls until the second one lands
    assert sorted(found.summaries) == [s.name for s in segments]
    assert found.entries == [(s.name, s.name, 0) for s in segments]


def _land(path: str, text: str) -> None:
    """Write a summary as a parse task does: whole, by rename (a poll must never read it half written)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(f"{path}.part").write_text(text)
    os.replace(f"{path}.part", path)


def test_the_index_stage_lists_the_scratch_directory_only_once_it_exists(tmp_path: Path, monkeypatch) -> None:
    """pyarrow fails a listing that meets the directory being made (by the first parse task), allow_not_found or
    not: wait_for_summaries makes ``scratch`` before it looks."""
    import jobs.pipeline.parse as parse_module
    from storelib.broker.segments import Piece, PieceSummary, Segment, SegmentSummary
    from udfs.parse import summary_path

    class Listed:
        """The local filesystem, but a listing of a directory that is not there fails the test."""

        def __init__(self, fs: Any) -> None:
            self.fs = fs

        def get_file_info(self, selector: Any) -> Any:
            assert Path(selector.base_dir).is_dir(), f"listed {selector.base_dir} before it was made"
            return self.fs.get_file_info(selector)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.fs, name)

    resolve = parse_module.resolve
    monkeypatch.setattr(parse_module, "resolve", lambda uri: (Listed(resolve(uri)[0]), resolve(uri)[1]))
    seg = Segment(f"file:///s/{0:020d}", f"{0:020d}", 0, 1024)
    scratch = str(tmp_path / "scratch")  # no parse task has made it yet
    summary = SegmentSummary(seg.name, "zero-tail", 0, "", 0, 0, 0, 0, 0, -1, 0, "crc32:00000000:0")
    text = PieceSummary(seg.name, summary, 0, None, False, ()).to_json()
    threading.Timer(0.1, lambda: _land(summary_path(scratch, seg.name), text)).start()
    found = parse_module.wait_for_summaries(scratch, [[Piece(seg, 0, seg.size)]], threading.Event())
    assert sorted(found.summaries) == [seg.name]


@pytest.mark.parametrize("first", ["later", "earlier"])
def test_runs_of_one_queue_offset_are_written_in_commitlog_order_whatever_order_spark_has(spark, tmp_path, first):
    """Two runs from queue offset 0 of one queue: the broker dispatches in commitlog order and keeps the first unit
    of a queue offset, so the earlier record's units are written and the later ones are the duplicates, in whatever
    order the rows reach the writer."""
    from jobs.pipeline.consume_queues import write_consume_queues
    from jobs.pipeline.context import spark_schema
    from tests.test_write import CFG, runs, unit
    from udfs.schema import CQ_RUN_SCHEMA

    scratch, out = tmp_path / "scratch", tmp_path / "out"
    later = runs(scratch, "p1", ("Orders", 0, 0, [7, 8]), ("Orders", 0, 2, [9]))
    earlier = runs(scratch, "p0", ("Orders", 0, 0, [2, 3]))
    rows = (later.to_pylist() + earlier.to_pylist()) if first == "later" else earlier.to_pylist() + later.to_pylist()
    df = spark.createDataFrame(rows, spark_schema(CQ_RUN_SCHEMA)).coalesce(1)
    queues, findings = write_consume_queues(Run(spark, CFG), df, str(out), str(scratch))
    assert (out / "consumequeue/Orders/0/00000000000000000000").read_bytes() == unit(2) + unit(3) + unit(9)
    assert [(f.kind, f.queue_offset, f.commitlog_offset) for f in findings] == [
        ("duplicate-queue-offset", 0, 7000),
        ("duplicate-queue-offset", 1, 8000),
    ]
    assert [(q.entries, q.min_offset, q.max_offset) for q in queues] == [(3, 0, 3)]
