"""The rebuild on the driver: CommitLog segments -> ConsumeQueue and IndexFile files, byte-exact.

1. list the segments (names, sizes; nothing read on the driver) and group them into parse tasks by bytes;
2. one Spark job: parse the tasks on executors (udfs.parse) and, through a shuffle by queue, stream every
   queue's units into its ConsumeQueue files (udfs.write); each segment leaves its summary and its
   IndexFile entries in the scratch directory;
3. judge the segments' ends and damage (storelib.segments): stop, or leave damaged segments out;
4. one Spark job: every IndexFile built by its own task from exactly its range of entries;
5. checkpoint and rebuild.json, everything in a staging directory published at the end.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
import uuid
from typing import Any

import pyarrow.fs as pafs

from jobs.pipeline.context import Run, spark_schema
from jobs.pipeline.listing import check_outside_store
from jobs.pipeline.progress import Progress
from storelib.checkpoint import Checkpoint
from storelib.errors import BadInput, DamageStop
from storelib.findings import Finding, finding
from storelib.indexfile import (
    build_index_file_head,
    entries_per_file,
    index_file_plans,
    index_file_size,
    needs_empty_tail_file,
)
from storelib.layout import COMMITLOG, deterministic_index_names
from storelib.report import REBUILD_REPORT, build_rebuild_report
from storelib.segments import (
    RECORD_DAMAGE,
    ListedFile,
    Segment,
    SegmentSummary,
    damage_findings,
    judge_ends,
    plan_parse_tasks,
    plan_segments,
    settle_torn_tail,
)
from udfs.fs import delete_tree, is_object_store, join, list_files, read_file, resolve, write_file
from udfs.parse import segment_parser, summary_path
from udfs.schema import (
    CQ_RUN_SCHEMA,
    INDEX_SUMMARY_SCHEMA,
    INDEX_TASK_SCHEMA,
    MESSAGE_SCHEMA,
    PARSE_TASK_SCHEMA,
    QUEUE_SUMMARY_SCHEMA,
)
from udfs.write import INDEX_HEADER_FIELDS, consume_queue_writer, index_file_writer, index_part_name

ON_ERROR = ("stop", "skip-segment")
#: a parse task takes consecutive segments up to this many bytes (a bigger segment is a task alone)
TASK_BYTES = 256 << 20
#: rows per Arrow batch handed to the writers: a run row holds up to a few MB of packed units
RUN_ROWS_PER_BATCH = 16


@dataclasses.dataclass
class RebuildResult:
    report: dict[str, Any]  # also OUT/rebuild.json
    seconds: float
    out: str
    worker_peak_rss: int  # bytes: the largest Python worker seen by a parse task
    run: Run
    segments: list[Segment]
    summaries: dict[str, SegmentSummary]  # each segment as the parse found it (skipped ones included)

    @functools.cached_property
    def records(self) -> Any:
        """One MESSAGE_SCHEMA row per message record (a second parse), persisted: unpersist it."""
        with self.run.work_dir(self.out) as scratch:
            records = parse_store(self.run, self.segments, "messages", scratch).persist()
            records.count()  # parsed now, while its scratch directory exists
        return records


def list_segments(store: str, run: Run) -> tuple[list[Segment], list[Finding]]:
    """The commitlog segments in offset order, and findings about their names, sizes and gaps."""
    fs, root = resolve(store)
    commitlog = join(root, COMMITLOG)
    if fs.get_file_info(commitlog).type != pafs.FileType.Directory:
        raise BadInput(f"{store}: no commitlog directory (is this a store root?)")
    listed = [
        ListedFile(i.base_name, i.size, f"{store.rstrip('/')}/{COMMITLOG}/{i.base_name}" if "://" in store else i.path)
        for i in list_files(fs, commitlog)
    ]
    segments, findings = plan_segments(listed, run.cfg)
    if not segments:
        raise BadInput(f"{store}: the commitlog directory holds no segments")
    return segments, findings


def parse_store(run: Run, segments: list[Segment], mode: str, scratch: str) -> Any:
    """CQ_RUN_SCHEMA (``dispatch``) or MESSAGE_SCHEMA (``messages``) rows of the segments, a task per byte range."""
    tasks = [
        (k, json.dumps([dataclasses.asdict(s) for s in t]))
        for k, t in enumerate(plan_parse_tasks(segments, TASK_BYTES))
    ]
    rdd = run.spark.sparkContext.parallelize(tasks, len(tasks))
    out = CQ_RUN_SCHEMA if mode == "dispatch" else MESSAGE_SCHEMA
    return run.spark.createDataFrame(rdd, spark_schema(PARSE_TASK_SCHEMA)).mapInArrow(
        segment_parser(run.cfg, mode, scratch), spark_schema(out)
    )


def scan_segments(run: Run, segments: list[Segment], scratch: str) -> dict[str, SegmentSummary]:
    """Parse the segments for their summaries only (ends, damage, fingerprints): the rows are dropped."""
    with Progress(run, len(plan_parse_tasks(segments, TASK_BYTES)), sum(s.size for s in segments), "scan"):
        parse_store(run, segments, "dispatch", scratch).write.format("noop").mode("overwrite").save()
    return read_summaries(scratch, segments)


def read_summaries(scratch: str, segments: list[Segment]) -> dict[str, SegmentSummary]:
    """The SegmentSummary every parse task left in ``scratch``, by segment name (a crash tail settled)."""
    out = {}
    for s in segments:
        fs, path = resolve(summary_path(scratch, s.name))
        out[s.name] = SegmentSummary.from_json(read_file(fs, path).decode())
    return settle_torn_tail(segments, out)


def write_consume_queues(run: Run, runs: Any, staging: str) -> list[dict[str, Any]]:
    """Runs grouped by queue, ordered by queue offset, each queue streamed into its files (one job with the parse)."""
    partitions = max(2, run.spark.sparkContext.defaultParallelism)
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = run.spark.conf.get(key, None)
    run.spark.conf.set(key, str(RUN_ROWS_PER_BATCH))
    try:
        written = (
            runs.repartition(partitions, "topic", "queue_id")
            .sortWithinPartitions("topic", "queue_id", "queue_offset")
            .mapInArrow(consume_queue_writer(staging, run.cfg), spark_schema(QUEUE_SUMMARY_SCHEMA))
        )
        rows = [r.asDict() for r in written.collect()]
    finally:
        run.spark.conf.set(key, before) if before is not None else run.spark.conf.unset(key)
    return sorted(rows, key=lambda q: (q["topic"], q["queue_id"]))


def write_index_files(
    run: Run, staging: str, scratch: str, segments: list[Segment], summaries: dict[str, SegmentSummary]
) -> list[dict[str, Any]]:
    """Every IndexFile built by its own task from the segments' scratch files, then named (see layout).

    A full last file followed by more messages gets the broker's empty successor file.
    """
    cfg = run.cfg
    last_message = max((summaries[s.name].last_message_offset for s in segments), default=-1)
    if not cfg.messageIndexEnable or last_message < 0:
        return []
    counts = [(s.name, summaries[s.name].index_entries) for s in segments]
    plans = index_file_plans(counts, entries_per_file(cfg.maxIndexNum))
    built = []
    if plans:
        tasks = [(k, p.to_json()) for k, p in enumerate(plans)]
        df = run.spark.createDataFrame(
            run.spark.sparkContext.parallelize(tasks, len(tasks)), spark_schema(INDEX_TASK_SCHEMA)
        )
        rows = df.mapInArrow(index_file_writer(staging, scratch, cfg), spark_schema(INDEX_SUMMARY_SCHEMA)).collect()
        built = sorted((r.asDict() for r in rows), key=lambda s: s["file_no"])
    fs, root = resolve(staging)
    total = sum(n for _, n in counts)
    last = built[-1] if built else {"end_phy_offset": -1, "end_timestamp": 0}
    if needs_empty_tail_file(total, cfg.maxIndexNum, last_message > last["end_phy_offset"]):
        inherited = (last["end_phy_offset"], last["end_timestamp"]) if built else (0, 0)
        header, head = build_index_file_head([], [], [], inherited, cfg)
        write_file(
            fs,
            join(root, "index", index_part_name(len(plans))),
            head,
            index_file_size(cfg.maxHashSlotNum, cfg.maxIndexNum),
        )
        built.append(
            {"file_no": len(plans), "first_store_timestamp": header.end_timestamp, **dataclasses.asdict(header)}
        )
    for s, name in zip(built, deterministic_index_names([s["first_store_timestamp"] for s in built])):
        fs.move(join(root, "index", index_part_name(s["file_no"])), join(root, "index", name))
        s["name"] = name
    return [{k: s[k] for k in ("name", *INDEX_HEADER_FIELDS)} for s in built]


def judge(
    segments: list[Segment], summaries: dict[str, SegmentSummary], findings: list[Finding], on_error: str
) -> list[str]:
    """Add the segments' end and damage findings; the segments to leave out (skip-segment), or DamageStop.

    Damage to one record is reported and loses only that record: it never stops or skips a segment.
    """
    findings += judge_ends(segments, summaries) + damage_findings(segments, summaries)
    errors = [f for f in findings if f.severity == "error" and f.kind not in RECORD_DAMAGE]
    if not errors:
        return []
    if on_error == "stop":
        raise DamageStop(
            f"{len(errors)} error(s) in the commitlog; nothing was written "
            "(--on-error skip-segment leaves the damaged segments out)",
            findings,
        )
    bad = {f.file.split("/", 1)[1] for f in errors if f.file.startswith(f"{COMMITLOG}/")}
    skipped = sorted(s.name for s in segments if s.name in bad)
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
    for part in ("checkpoint", "consumequeue", "index"):
        delete_tree(f"{out.rstrip('/')}/{part}")
    return out


def rebuild(run: Run, store: str, out: str, on_error: str = "stop") -> RebuildResult:
    """Rebuild the index of ``store`` into ``out``; raises DamageStop (nothing published) on damage."""
    if on_error not in ON_ERROR:
        raise BadInput(f"on_error must be one of {ON_ERROR}")
    t0 = time.monotonic()
    check_output(store, out, run.work_root)
    segments, findings = list_segments(store, run)
    with run.work_dir(out) as work, run.work_dir(out, same_filesystem=True) as near:
        staging = in_place(out) if is_object_store(out) else f"{near}/out"
        scratch = f"{work}/scratch"
        runs = parse_store(run, segments, "dispatch", scratch)
        with Progress(run, len(plan_parse_tasks(segments, TASK_BYTES)), sum(s.size for s in segments)):
            queues = write_consume_queues(run, runs, staging)
        summaries = read_summaries(scratch, segments)
        scanned = dict(summaries)
        skipped = judge(segments, summaries, findings, on_error)
        if skipped:
            queues = _without(run, runs, staging, skipped)
            summaries.update({name: summaries[name].without_messages() for name in skipped})
        index_files = write_index_files(run, staging, scratch, segments, summaries)
        for q in queues:
            findings += [Finding.from_dict(d) for d in json.loads(q.pop("findings"))]
        checkpoint = rebuilt_checkpoint(summaries.values(), index_files)
        report = build_rebuild_report(run.cfg, segments, summaries, findings, queues, index_files, checkpoint)
        sfs, spath = resolve(staging)
        write_file(sfs, join(spath, "checkpoint"), checkpoint.pack())
        write_file(sfs, join(spath, REBUILD_REPORT), (json.dumps(report, indent=1, sort_keys=True) + "\n").encode())
        publish(staging, out)
    peak = max((s.worker_peak_rss for s in summaries.values()), default=0)
    return RebuildResult(report, time.monotonic() - t0, out, peak, run, segments, scanned)


def _without(run: Run, runs: Any, staging: str, skipped: list[str]) -> list[dict[str, Any]]:
    """The ConsumeQueues written again without the skipped segments' runs (the rare damaged path)."""
    fs, root = resolve(staging)
    if fs.get_file_info(join(root, "consumequeue")).type == pafs.FileType.Directory:
        fs.delete_dir(join(root, "consumequeue"))
    return write_consume_queues(run, runs.where(~runs.segment.isin(skipped)), staging)


def rebuilt_checkpoint(summaries: Any, index_files: list[dict[str, Any]]) -> Checkpoint:
    """physicMsgTimestamp = the last message's store time, logicsMsgTimestamp = the last ConsumeQueue-dispatched
    message's, indexMsgTimestamp = the last IndexFile's endTimestamp (every rebuilt file is complete)."""
    summaries = list(summaries)
    return Checkpoint(
        physic_msg_timestamp=max((s.last_store_timestamp for s in summaries), default=0),
        logics_msg_timestamp=max((s.last_cq_store_timestamp for s in summaries), default=0),
        index_msg_timestamp=index_files[-1]["end_timestamp"] if index_files else 0,
    )
