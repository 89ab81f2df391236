"""The rebuild on the driver: CommitLog segments -> ConsumeQueue and IndexFile files, byte-exact.

0. the store's rules: BatchCQ topics (config/topics.json, batchconsumequeue/) and the broker release's rule set
   (``--broker-version``, else detected from the store: storelib.versions), into ``run.cfg``;
1. list the segments (names, sizes; nothing read on the driver) and group them into parse tasks by bytes;
2. one Spark job: parse the tasks on executors (udfs.parse) and, through a shuffle by queue, stream every
   queue's units into its ConsumeQueue files (udfs.write); each segment leaves its summary and its
   IndexFile entries in the scratch directory;
3. judge the segments' ends and damage (storelib.segments): stop, or leave damaged segments out;
4. one Spark job: every IndexFile built by its own task from exactly its range of entries;
5. checkpoint and rebuild.json, everything in a staging directory published at the end.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import io
import json
import posixpath
import sys
import threading
import time
import uuid
from collections.abc import Collection, Iterable
from typing import Any

import numpy as np
import pyarrow.fs as pafs
from pyspark.sql import Window
from pyspark.sql import functions as F

from jobs.pipeline.context import Run, numbered_tasks, spark_schema
from jobs.pipeline.dledger import write_index as write_dledger_index
from jobs.pipeline.listing import check_outside_store, segment_files
from jobs.pipeline.progress import Progress
from storelib.checkpoint import Checkpoint
from storelib.commitlog import DLEDGER_FRAMING, SegmentScanner
from storelib.config import BrokerConfig, batch_cq_topics
from storelib.dispatch import TAG_KEY_INFIX, dispatch_batch
from storelib.errors import BadInput, DamageStop, StoreFormatError
from storelib.findings import Finding, finding
from storelib.indexfile import (
    IndexFileReader,
    IndexHeader,
    build_index_file_head,
    entries_per_file,
    index_file_plans,
    index_file_size,
    key_hash_of,
    needs_empty_tail_file,
)
from storelib.layout import (
    BATCH_CONSUMEQUEUE,
    CHECKPOINT,
    COMMITLOG,
    CONSUMEQUEUE,
    INDEX,
    deterministic_index_names,
    is_index_name,
)
from storelib.report import REBUILD_REPORT, IndexFileRecord, QueueRecord, RebuildReport, build_rebuild_report
from storelib.rocksdbcq import ROCKSDB_CQ_DIRS, is_rocksdb
from storelib.rocksdbcq import batch_cq_topics as rocksdb_batch_cq_topics
from storelib.segments import (
    Piece,
    PieceSummary,
    Segment,
    SegmentSummary,
    damage_findings,
    judge_ends,
    merge_pieces,
    plan_parse_tasks,
    plan_segments,
    segment_errors,
    settle_torn_tail,
)
from storelib.versions import (
    CONFIG_JSON,
    BrokerRules,
    RuleInputs,
    StoreFacts,
    config_keys,
    record_clues,
    select,
)
from udfs.fs import delete_tree, is_object_store, join, map_file, read_file, resolve, write_file
from udfs.parse import segment_parser, summary_path
from udfs.schema import (
    CQ_RUN_SCHEMA,
    INDEX_SUMMARY_SCHEMA,
    MESSAGE_SCHEMA,
    QUEUE_SUMMARY_SCHEMA,
)
from udfs.write import consume_queue_writer, index_file_writer, index_header, index_part_name

ON_ERROR = ("stop", "skip-segment")
#: a parse task takes consecutive segments up to this many bytes (a bigger segment is a task alone)
TASK_BYTES = 256 << 20
#: rows per Arrow batch handed to the writers: a run row holds up to a few MB of packed units
RUN_ROWS_PER_BATCH = 16
#: detection reads this much of each of at most SAMPLE_SEGMENTS segments, until it has this many tagged messages
SAMPLE_BYTES = 4 << 20
SAMPLE_SEGMENTS = 8
TAG_KEY_SAMPLE = 32


@dataclasses.dataclass
class RebuildResult:
    report: RebuildReport  # also OUT/rebuild.json
    seconds: float
    out: str
    worker_peak_rss: int  # bytes: the largest Python worker seen by a parse task
    run: Run
    segments: list[Segment]
    summaries: dict[str, SegmentSummary]  # each segment as the parse found it (skipped ones included)
    whole: frozenset[str] = frozenset()  # segments parsed whole: their byte ranges did not meet

    @functools.cached_property
    def records(self) -> Any:
        """One MESSAGE_SCHEMA row per message record (a second parse), persisted: unpersist it."""
        with self.run.work_dir(self.out) as scratch:
            records = parse_store(self.run, self.segments, "messages", scratch, self.whole).persist()
            records.count()  # parsed now, while its scratch directory exists
        return records


def list_segments(store: str, cfg: BrokerConfig) -> tuple[list[Segment], list[Finding]]:
    """The log segments in offset order (``commitlog/``, DLedger data files), and findings about their names,
    sizes and gaps."""
    dirs, listed = segment_files(store)
    if not dirs:
        raise BadInput(f"{store}: no commitlog directory, nor a DLedger one (is this a store root?)")
    segments, findings = plan_segments(listed, cfg)
    if not segments:
        raise BadInput(f"{store}: {' and '.join(dirs)} hold no segments")
    return segments, findings


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What a rebuild reads of the store before it needs Spark (``prepare``): the segments, the findings about their
    names and sizes, the config with the store's settings and its rules (``resolve_rules``)."""

    store: str
    segments: list[Segment]
    findings: list[Finding]
    cfg: BrokerConfig
    rules: BrokerRules


def prepare(store: str, cfg: BrokerConfig) -> Prepared:
    """list_segments and resolve_rules, Spark-free: run while the session starts (jobs/rebuild.py)."""
    segments, findings = list_segments(store, cfg)
    cfg, rules = resolve_rules(store, cfg, segments)
    return Prepared(store, segments, findings, cfg, rules)


def store_rules(run: Run, store: str, segments: list[Segment]) -> BrokerRules:
    """Put the store's settings (``resolve_rules``) into ``run.cfg``, once per run and store (``run.broker_rules``);
    detected rules are settled after the parse (``settle_rules``)."""
    if store in run.broker_rules:
        return run.broker_rules[store]
    run.cfg, rules = resolve_rules(store, run.cfg, segments)
    run.broker_rules[store] = rules
    if run.progress and rules.settled:
        print(rules.line, file=sys.stderr)
    return rules


def resolve_rules(store: str, cfg: BrokerConfig, segments: list[Segment]) -> tuple[BrokerConfig, BrokerRules]:
    """The store's BatchCQ topics, store type and broker rules, and the config that holds them.

    Store type: the config's ``storeType`` when it sets one (``default`` on a RocksDB store: rolled back to file
    ConsumeQueues, which the broker then rebuilds from the commitlog), else ``defaultRocksDB`` when a RocksDB is in
    consumequeue/ (or consumequeue_rocksdb/): every queue is then rebuilt as a ConsumeQueue, what that RocksDB
    holds (storelib.rocksdbcq). BatchCQ topics: ``queue.type=BatchCQ`` in config/topics.json, every
    ``batchconsumequeue/<topic>``, and under defaultRocksDB the RocksDB config/topics/ (RocksDBTopicConfigManager;
    a broker in file mode reads topics.json only: rolled back, ``rocksdbBatchCQTopics``). Rules:
    ``--broker-version`` when given, else what the store's clues say (storelib.versions.select).
    """
    fs, root = resolve(store)
    topics_json = join(root, "config", "topics.json")
    topics = set()
    if fs.get_file_info(topics_json).type == pafs.FileType.File:
        topics |= set(batch_cq_topics(read_file(fs, topics_json).decode("utf-8", "replace")))
    topics |= {i.base_name for i in _entries(fs, join(root, BATCH_CONSUMEQUEUE)) if i.type == pafs.FileType.Directory}
    rocksdb = any(is_rocksdb({i.base_name for i in _entries(fs, join(root, d))}) for d in ROCKSDB_CQ_DIRS)
    store_type = cfg.storeType or ("defaultRocksDB" if rocksdb else "default")
    topics_db = join(root, "config", "topics")
    rocksdb_topics: tuple[str, ...] = ()
    if (rocksdb or store_type == "defaultRocksDB") and fs.get_file_info(
        join(topics_db, "CURRENT")
    ).type == pafs.FileType.File:
        rocksdb_topics = rocksdb_batch_cq_topics(topics_db)
        topics |= set(rocksdb_topics) if store_type == "defaultRocksDB" else set()
    dledger = cfg.enableDLegerCommitLog or any(s.framing is DLEDGER_FRAMING for s in segments)
    cfg = dataclasses.replace(
        cfg,
        batchCQTopics=tuple(sorted(topics)),
        rocksdbBatchCQTopics=rocksdb_topics,
        storeType=store_type,
        enableDLegerCommitLog=dledger,
    )
    rules = select(cfg.brokerVersion, store_facts(fs, root, segments, cfg))
    return dataclasses.replace(cfg, brokerVersion=cfg.brokerVersion or rules.lowest_release), rules


def settle_rules(run: Run, store: str, summaries: Iterable[SegmentSummary]) -> BrokerRules:
    """The store's rules once the parse has counted what tells the allowed rule sets apart (AmbiguousRelease when
    they would write different files), said in one console line."""
    rules = run.broker_rules[store]
    if not rules.settled:
        rules = run.broker_rules[store] = rules.settle(sum((s.rule_inputs for s in summaries), RuleInputs()))
        if run.progress:
            print(rules.line, file=sys.stderr)
    return rules


def _entries(fs: pafs.FileSystem, path: str) -> list[pafs.FileInfo]:
    return sorted(fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)), key=lambda i: i.base_name)


def _read_at(fs: pafs.FileSystem, path: str, offset: int, size: int) -> bytes:
    """Up to ``size`` bytes from ``offset``; b"" when the file is missing or shorter."""
    if fs.get_file_info(path).type != pafs.FileType.File:
        return b""
    with fs.open_input_file(path) as f:
        return f.read_at(min(size, f.size() - offset), offset) if f.size() > offset else b""


def store_facts(fs: pafs.FileSystem, root: str, segments: list[Segment], cfg: BrokerConfig) -> StoreFacts:
    """The clues detection reads: root, config/ and consumequeue/ entries, the key paths of config/ JSON files, the
    checkpoint, and the first SAMPLE_BYTES of up to SAMPLE_SEGMENTS segments (``sampled_segments``) until
    TAG_KEY_SAMPLE tagged messages are found, whose tag keys are looked up in the live IndexFiles (a local
    IndexFile is memory-mapped, a remote one read whole)."""
    index_dir = join(root, INDEX)
    index = [i.path for i in _entries(fs, index_dir) if is_index_name(i.base_name) and i.size > 40]
    headers = [IndexHeader.unpack(_read_at(fs, p, 0, 40)) for p in index]
    cfg49 = dataclasses.replace(cfg, brokerVersion="4.9")
    counts: dict[str, int] = {}
    tagged: list[tuple[int, str, str]] = []  # (commitlog offset, topic#UNIQ_KEY, topic#T#tags)
    for seg in sampled_segments(segments, headers[-1].end_phy_offset if headers else None):
        data = _read_at(fs, _segment_path(seg), 0, SAMPLE_BYTES)
        scanner = SegmentScanner(io.BytesIO(data), seg.name, seg.start, len(data), check_crc=False, framing=seg.framing)
        for b in scanner:
            d = dispatch_batch(b, cfg49)
            counts.update(record_clues(b, counts))
            topics, tags, uniq = b.topic, d.tags, d.uniq_key
            for i in np.flatnonzero(d.to_consume_queue).tolist():
                if tags[i] and uniq[i] and len(tagged) < TAG_KEY_SAMPLE:
                    t = topics[i]
                    tagged.append((int(b.physical_offset[i]), f"{t}#{uniq[i]}", f"{t}#{TAG_KEY_INFIX}{tags[i]}"))
        if len(tagged) >= TAG_KEY_SAMPLE:
            break
    found, checked = _tag_keys_found(fs, index, headers, tagged, cfg)
    return StoreFacts(
        root_entries=frozenset(i.base_name for i in _entries(fs, root)),
        consumequeue_entries=frozenset(i.base_name for d in ROCKSDB_CQ_DIRS for i in _entries(fs, join(root, d))),
        checkpoint=_read_at(fs, join(root, CHECKPOINT), 0, 48),
        **counts,
        tag_keys_found=found,
        tag_keys_checked=checked,
        **_config_facts(fs, root),
    )


def _config_facts(fs: pafs.FileSystem, root: str) -> dict[str, frozenset[str]]:
    """StoreFacts ``config_entries`` (the names in config/) and ``config_keys`` (of its CONFIG_JSON files)."""
    entries = _entries(fs, join(root, "config"))
    files = [i for i in entries if i.base_name in CONFIG_JSON and i.type == pafs.FileType.File]
    keys = [config_keys(i.base_name, read_file(fs, i.path).decode("utf-8", "replace")) for i in files]
    return {"config_entries": frozenset(i.base_name for i in entries), "config_keys": frozenset().union(*keys)}


def sampled_segments(segments: list[Segment], index_end: int | None) -> list[Segment]:
    """The segments detection samples, at most SAMPLE_SEGMENTS: the one holding ``index_end`` (the newest live
    IndexFile's last entry; else the last segment) and those before it, newest first."""
    end = segments[-1].start if index_end is None else index_end
    upto = [s for s in segments if s.start <= end] or segments[:1]
    return upto[::-1][:SAMPLE_SEGMENTS]


def _segment_path(seg: Segment) -> str:
    return resolve(seg.uri)[1]


def _index_reader(fs: pafs.FileSystem, path: str, cfg: BrokerConfig) -> IndexFileReader | None:
    """A live IndexFile to look keys up in (memory-mapped when local); None when it does not fit the settings."""
    try:
        return IndexFileReader(map_file(fs, path), cfg, path)
    except StoreFormatError:
        return None


def _tag_keys_found(
    fs: pafs.FileSystem,
    index: list[str],
    headers: list[IndexHeader],
    tagged: list[tuple[int, str, str]],
    cfg: BrokerConfig,
) -> tuple[int, int]:
    """Of the tagged messages whose ``topic#UNIQ_KEY`` the live IndexFile covering them finds, how many have a
    ``topic#T#tags`` entry too: (found, checked). An IndexFile that does not fit the settings (the audit names it)
    tells nothing."""
    readers: dict[int, IndexFileReader | None] = {}
    found = checked = 0
    for offset, uniq_key, tag_key in tagged:
        k = next((k for k, h in enumerate(headers) if h.begin_phy_offset <= offset <= h.end_phy_offset), None)
        if k is None:
            continue
        if k not in readers:
            readers[k] = _index_reader(fs, index[k], cfg)
        r = readers[k]
        hashes = r.message_key_hashes(uniq_key, offset) if r is not None else None
        if hashes is not None:
            checked += 1
            found += key_hash_of(tag_key) in hashes
    return found, checked


def parse_store(run: Run, segments: list[Segment], mode: str, scratch: str, whole: Collection[str] = ()) -> Any:
    """CQ_RUN_SCHEMA (``dispatch``) or MESSAGE_SCHEMA (``messages``) rows of the segments, a task per byte range
    (``whole``: segments not cut into ranges)."""
    tasks = plan_parse_tasks(segments, TASK_BYTES, whole)
    out = CQ_RUN_SCHEMA if mode == "dispatch" else MESSAGE_SCHEMA
    return numbered_tasks(run, len(tasks)).mapInArrow(segment_parser(run.cfg, mode, scratch, tasks), spark_schema(out))


def parse_progress(run: Run, segments: list[Segment], label: str = "parse", whole: Collection[str] = ()) -> Progress:
    """The console progress of parse_store's tasks over ``segments``."""
    return Progress(run, len(plan_parse_tasks(segments, TASK_BYTES, whole)), sum(s.size for s in segments), label)


def scan_segments(run: Run, segments: list[Segment], scratch: str) -> dict[str, SegmentSummary]:
    """Parse the segments for their summaries only (ends, damage, fingerprints): the rows are dropped. Segments
    whose byte ranges do not meet are parsed again whole."""
    whole: frozenset[str] = frozenset()
    while True:
        with parse_progress(run, segments, "scan", whole):
            parse_store(run, segments, "dispatch", scratch, whole).write.format("noop").mode("overwrite").save()
        try:
            return read_summaries(scratch, segments, whole)
        except RangesDisagree as exc:
            whole = exc.parse_whole(whole)


class RangesDisagree(Exception):
    """The byte ranges of these segments did not meet (storelib.segments.merge_pieces): parse them whole."""

    def __init__(self, segments: frozenset[str]) -> None:
        super().__init__(f"the byte ranges of {len(segments)} segment(s) did not meet: {', '.join(sorted(segments))}")
        self.segments = segments

    def parse_whole(self, whole: frozenset[str]) -> frozenset[str]:
        """The segments to parse whole next time: ``whole`` and these (a segment parsed whole always merges)."""
        if self.segments <= whole:
            raise RuntimeError(f"segments parsed whole did not merge: {', '.join(sorted(self.segments))}")
        return whole | self.segments


@dataclasses.dataclass(frozen=True)
class Parsed:
    """What the parse tasks left in the scratch directory: each segment's summary (a crash tail settled), and the
    IndexFile entries of each piece (piece name, segment name, entries), in offset order."""

    summaries: dict[str, SegmentSummary]
    entries: list[tuple[str, str, int]]


def read_parsed(scratch: str, tasks: list[list[Piece]]) -> Parsed:
    """The PieceSummary every parse task left in ``scratch``, merged by segment; RangesDisagree when the pieces
    of a segment do not meet."""
    pieces: dict[str, list[PieceSummary]] = {}
    segments: dict[str, Segment] = {}
    for piece in (p for task in tasks for p in task):
        fs, path = resolve(summary_path(scratch, piece.name))
        pieces.setdefault(piece.segment.name, []).append(PieceSummary.from_json(read_file(fs, path).decode()))
        segments[piece.segment.name] = piece.segment
    merged = {name: merge_pieces(segments[name], p) for name, p in pieces.items()}
    disagree = frozenset(name for name, summary in merged.items() if summary is None)
    if disagree:
        raise RangesDisagree(disagree)
    entries = [(p.piece, name, p.summary.index_entries) for name, ps in pieces.items() for p in ps]
    return Parsed(settle_torn_tail(list(segments.values()), merged), entries)  # type: ignore[arg-type]


def read_summaries(scratch: str, segments: list[Segment], whole: Collection[str] = ()) -> dict[str, SegmentSummary]:
    """The SegmentSummary of every segment parse_store(..., ``whole``) parsed into ``scratch``, by segment name."""
    return read_parsed(scratch, plan_parse_tasks(segments, TASK_BYTES, whole)).summaries


def write_consume_queues(run: Run, runs: Any, staging: str) -> tuple[list[QueueRecord], list[Finding]]:
    """Runs grouped by queue, ordered by queue offset, each queue streamed into its files (one job with the parse):
    the queues in (topic, queue id) order, and the writers' findings.

    Repartitioned by column, not to a count: spark.sql.shuffle.partitions writers, which adaptive execution
    merges by the bytes the parse produced (one writer task for a nearly empty store).
    """
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = run.spark.conf.get(key, None)
    run.spark.conf.set(key, str(RUN_ROWS_PER_BATCH))
    try:
        written = (
            appended_at_write_position(runs, run.cfg.appended_topics)
            .repartition("topic", "queue_id")
            .sortWithinPartitions("topic", "queue_id", "queue_offset")
            .mapInArrow(consume_queue_writer(staging, run.cfg), spark_schema(QUEUE_SUMMARY_SCHEMA))
        )
        rows = sorted(written.collect(), key=lambda r: (r.topic, r.queue_id))
    finally:
        run.spark.conf.set(key, before) if before is not None else run.spark.conf.unset(key)
    return [_queue_record(r) for r in rows], [Finding.from_dict(d) for r in rows for d in json.loads(r.findings)]


def _queue_record(row: Any) -> QueueRecord:
    """A QUEUE_SUMMARY_SCHEMA row less its findings (rebuild.json has them in ``findings``)."""
    fields = {k: v for k, v in row.asDict().items() if k != "findings"}
    return QueueRecord(**{**fields, "files": tuple(row.files)})


def appended_at_write_position(runs: Any, topics: tuple[str, ...]) -> Any:
    """The runs with the queue offsets a file ConsumeQueue gives the queues of ``topics``
    (BrokerConfig.appended_topics): the queue's first unit stays at its record's queue offset, every later run
    follows the one before (a run is consecutive units, whose records' queue offsets strictly increase)."""
    if not topics:
        return runs
    queue = Window.partitionBy("topic", "queue_id")
    before = queue.orderBy("queue_offset").rowsBetween(Window.unboundedPreceding, -1)
    position = F.min("queue_offset").over(queue) + F.coalesce(F.sum("count").over(before), F.lit(0))
    return runs.withColumn(
        "queue_offset", F.when(F.col("topic").isin(*topics), position).otherwise(F.col("queue_offset"))
    )


def write_index_files(
    run: Run,
    staging: str,
    scratch: str,
    segments: list[Segment],
    summaries: dict[str, SegmentSummary],
    counts: list[tuple[str, int]],
) -> list[IndexFileRecord]:
    """Every IndexFile built by its own task from the pieces' scratch files (``counts``: each piece's name and
    entries, in offset order), then named (see layout).

    A full last file followed by more messages gets the broker's empty successor file.
    """
    cfg = run.cfg
    last_message = max((summaries[s.name].last_message_offset for s in segments), default=-1)
    if not cfg.messageIndexEnable or last_message < 0:
        return []
    plans = index_file_plans(counts, entries_per_file(cfg.maxIndexNum))
    built: list[tuple[int, IndexHeader]] = []  # (first entry's store timestamp, header) by file number
    if plans:
        writer = index_file_writer(staging, scratch, cfg, plans)
        rows = numbered_tasks(run, len(plans)).mapInArrow(writer, spark_schema(INDEX_SUMMARY_SCHEMA)).collect()
        built = [(r.first_store_timestamp, index_header(r)) for r in sorted(rows, key=lambda r: r.file_no)]
    fs, root = resolve(staging)
    total = sum(n for _, n in counts)
    last = built[-1][1] if built else IndexHeader(end_phy_offset=-1)
    if needs_empty_tail_file(total, cfg.maxIndexNum, last_message > last.end_phy_offset):
        inherited = (last.end_phy_offset, last.end_timestamp) if built else (0, 0)
        header, head = build_index_file_head([], [], [], inherited, cfg)
        write_file(
            fs,
            join(root, "index", index_part_name(len(plans))),
            head,
            index_file_size(cfg.maxHashSlotNum, cfg.maxIndexNum),
        )
        built.append((header.end_timestamp, header))
    names = deterministic_index_names([first for first, _ in built])
    for file_no, name in enumerate(names):
        fs.move(join(root, "index", index_part_name(file_no)), join(root, "index", name))
    return [IndexFileRecord.of(name, header) for name, (_, header) in zip(names, built)]


def judge(
    segments: list[Segment], summaries: dict[str, SegmentSummary], findings: list[Finding], on_error: str
) -> list[str]:
    """Add the segments' end and damage findings; the segments to leave out (skip-segment), or DamageStop.

    Damage to one record is reported and loses only that record: it never stops or skips a segment.
    """
    findings += judge_ends(segments, summaries) + damage_findings(segments, summaries)
    errors = segment_errors(findings)
    if not errors:
        return []
    if on_error == "stop":
        raise DamageStop(
            f"{len(errors)} error(s) in the commitlog; nothing was written "
            "(--on-error skip-segment leaves the damaged segments out)",
            findings,
        )
    bad = {f.file for f in errors}
    skipped = sorted(s.name for s in segments if s.rel in bad)
    message = f"--on-error skip-segment: {len(skipped)} damaged segment(s) left out of the index: " + ", ".join(skipped)
    findings.append(finding("segments-skipped", COMMITLOG, message, count=len(skipped)))
    return skipped


def check_output(store: str, out: str, work_dir: str | None = None) -> None:
    """OUT and the work directory are never inside the store, nor the store inside them, links followed."""
    check_outside_store(store, out, "--out")
    if work_dir is not None:
        check_outside_store(store, work_dir, "--work-dir")
    fs, out_path = resolve(out)
    info = fs.get_file_info(out_path)
    if info.type == pafs.FileType.File:
        raise BadInput(f"--out {out} is a file")
    nonempty = info.type == pafs.FileType.Directory and fs.get_file_info(pafs.FileSelector(out_path))
    if nonempty and fs.get_file_info(join(out_path, REBUILD_REPORT)).type != pafs.FileType.File:
        raise BadInput(f"--out {out} is a non-empty directory that is not a previous rebuild; refusing to replace it")


def publish(staging: str, out: str) -> None:
    """Replace OUT with the staging directory: the old output is moved aside, then removed.

    On an object store there is no rename: the files were written to their final keys (``in_place``) and
    rebuild.json, written last, is the commit.
    """
    if staging == out:
        return
    fs, out_path = resolve(out)
    _, staging_path = resolve(staging)
    old = None
    if fs.get_file_info(out_path).type == pafs.FileType.Directory:
        old = f"{out_path}.rmqstore-old-{uuid.uuid4().hex[:8]}"
        fs.move(out_path, old)
    fs.move(staging_path, out_path)
    if old:
        fs.delete_dir(old)


def in_place(out: str) -> str:
    """Object stores: OUT itself, emptied of a previous rebuild, its rebuild.json (the commit) removed first, so
    a failed run leaves no rebuild.json and is never taken for a rebuild."""
    delete_tree(f"{out.rstrip('/')}/{REBUILD_REPORT}")
    for part in (CHECKPOINT, CONSUMEQUEUE, INDEX):
        delete_tree(f"{out.rstrip('/')}/{part}")
    return out


def rebuild(run: Run, store: str, out: str, on_error: str = "stop", prepared: Prepared | None = None) -> RebuildResult:
    """Rebuild the index of ``store`` into ``out``; raises DamageStop (nothing published) on damage. A segment
    whose byte ranges do not meet (damage near a range's edge) is parsed whole, in a second run of the stages.
    ``prepared``: the store's segments and rules, read while the session started (``prepare``, same config)."""
    if on_error not in ON_ERROR:
        raise BadInput(f"on_error must be one of {ON_ERROR}")
    t0 = time.monotonic()
    check_output(store, out, run.work_root)
    if prepared is not None and prepared.store == store and store not in run.broker_rules:
        segments, findings = prepared.segments, list(prepared.findings)
        run.cfg, run.broker_rules[store] = prepared.cfg, prepared.rules
        if run.progress and prepared.rules.settled:
            print(prepared.rules.line, file=sys.stderr)
    else:
        segments, findings = list_segments(store, run.cfg)
    store_rules(run, store, segments)
    whole: frozenset[str] = frozenset()
    while True:
        try:
            result = _rebuild(run, store, out, on_error, segments, list(findings), whole)
        except RangesDisagree as exc:
            whole = exc.parse_whole(whole)
            continue
        result.seconds = time.monotonic() - t0
        return result


def _rebuild(
    run: Run,
    store: str,
    out: str,
    on_error: str,
    segments: list[Segment],
    findings: list[Finding],
    whole: frozenset[str],
) -> RebuildResult:
    with run.work_dir(out) as work, run.work_dir(out, same_filesystem=True) as near:
        staging = in_place(out) if is_object_store(out) else f"{near}/out"
        scratch = f"{work}/scratch"
        tasks = plan_parse_tasks(segments, TASK_BYTES, whole)
        runs = parse_store(run, segments, "dispatch", scratch, whole)
        parsed = threading.Event()  # set when the queue writers are done (every parse task was then too)
        with parse_progress(run, segments, whole=whole), concurrent.futures.ThreadPoolExecutor(1) as pool:
            args = (run, store, staging, scratch, segments, tasks, findings, on_error, parsed)
            indexing = pool.submit(index_stage, *args)
            try:
                queues, queue_findings = write_consume_queues(run, runs, staging)
            finally:
                parsed.set()
        indexed = indexing.result()
        summaries, index_files = indexed.summaries, indexed.index_files
        dledger_index_files = write_dledger_index(run, segments, indexed.scanned, scratch, staging)
        if indexed.skipped:
            queues, queue_findings = _without(run, runs, staging, indexed.skipped)
        checkpoint = rebuilt_checkpoint(summaries.values(), index_files).with_5x_fields_of(live_checkpoint(store))
        report = build_rebuild_report(
            run.cfg,
            run.broker_rules[store],
            segments,
            summaries,
            findings + queue_findings,
            queues,
            index_files,
            dledger_index_files,
            checkpoint,
        )
        sfs, spath = resolve(staging)
        write_file(sfs, join(spath, CHECKPOINT), checkpoint.pack())
        write_file(sfs, join(spath, REBUILD_REPORT), report.to_json().encode())
        publish(staging, out)
    peak = max((s.worker_peak_rss for s in summaries.values()), default=0)
    return RebuildResult(report, 0.0, out, peak, run, segments, indexed.scanned, whole)


@dataclasses.dataclass
class Indexed:
    """What the index stage leaves: the segments' summaries as scanned, the segments left out, the IndexFiles built."""

    scanned: dict[str, SegmentSummary]
    skipped: list[str]
    index_files: list[IndexFileRecord]

    @property
    def summaries(self) -> dict[str, SegmentSummary]:
        """As scanned, the skipped segments without their messages (what the index and the report count)."""
        return {name: s.without_messages() if name in self.skipped else s for name, s in self.scanned.items()}


def index_stage(
    run: Run,
    store: str,
    staging: str,
    scratch: str,
    segments: list[Segment],
    tasks: list[list[Piece]],
    findings: list[Finding],
    on_error: str,
    parsed: threading.Event,
) -> Indexed:
    """Judge the segments and build the IndexFiles as soon as every parse task has left its summary, while the
    ConsumeQueue writers run (a second driver thread: the IndexFile job is not a tail after them)."""
    found = wait_for_summaries(scratch, tasks, parsed)
    scanned = found.summaries
    settle_rules(run, store, scanned.values())
    skipped = judge(segments, scanned, findings, on_error)
    indexed = Indexed(scanned, skipped, [])
    counts = [(piece, n) for piece, segment, n in found.entries if segment not in skipped]
    indexed.index_files = write_index_files(run, staging, scratch, segments, indexed.summaries, counts)
    return indexed


#: seconds between two listings of the scratch directory while the parse runs
SUMMARY_POLL = 0.1


def wait_for_summaries(scratch: str, tasks: list[list[Piece]], parsed: threading.Event) -> Parsed:
    """read_parsed once every piece's summary is in ``scratch``; an error when ``parsed`` is set and one is
    still missing (the parse failed: the queue writers' job reports why)."""
    fs, root = resolve(scratch)
    wanted = {posixpath.basename(summary_path(scratch, p.name)) for task in tasks for p in task}
    while True:
        last_look = parsed.is_set()
        found = {i.base_name for i in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))}
        if wanted <= found:
            return read_parsed(scratch, tasks)
        if last_look:
            raise RuntimeError(f"the parse left no summary of {len(wanted - found)} piece(s) in {scratch}")
        parsed.wait(SUMMARY_POLL)


def _without(run: Run, runs: Any, staging: str, skipped: list[str]) -> tuple[list[QueueRecord], list[Finding]]:
    """The ConsumeQueues written again without the skipped segments' runs (the rare damaged path)."""
    fs, root = resolve(staging)
    if fs.get_file_info(join(root, "consumequeue")).type == pafs.FileType.Directory:
        fs.delete_dir(join(root, "consumequeue"))
    return write_consume_queues(run, runs.where(~runs.segment.isin(skipped)), staging)


def live_checkpoint(store: str) -> Checkpoint | None:
    """The store's checkpoint, None when missing or shorter than its first five fields."""
    fs, root = resolve(store)
    data = _read_at(fs, join(root, CHECKPOINT), 0, 48)
    return Checkpoint.unpack(data) if len(data) >= 40 else None


def rebuilt_checkpoint(summaries: Any, index_files: list[IndexFileRecord]) -> Checkpoint:
    """physicMsgTimestamp = the last message's store time, logicsMsgTimestamp = the last ConsumeQueue-dispatched
    message's, indexMsgTimestamp = the last IndexFile's endTimestamp (every rebuilt file is complete); the 5.x
    offsets are the live checkpoint's (``Checkpoint.with_5x_fields_of``)."""
    summaries = list(summaries)
    return Checkpoint(
        physic_msg_timestamp=max((s.last_store_timestamp for s in summaries), default=0),
        logics_msg_timestamp=max((s.last_cq_store_timestamp for s in summaries), default=0),
        index_msg_timestamp=index_files[-1].end_timestamp if index_files else 0,
    )
