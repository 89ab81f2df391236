"""``rmqstore rebuild``: CommitLog segments -> ConsumeQueue and IndexFile files, byte-exact, with Spark.

1. list the segments (names, sizes; nothing read on the driver), check they are contiguous;
2. parse every segment on an executor (udfs.parse, one task per segment) into dispatch rows;
3. ConsumeQueue: rows grouped by topic/queue, sorted by queue offset, written as streams;
4. IndexFile: entries in commitlog order are numbered from per-segment counts, cut into
   files of maxIndexNum - 1 entries, and every file is built by its own task;
5. checkpoint and rebuild.json, everything in a staging directory published by rename.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

import argparse
import contextlib
import dataclasses
import functools
import json
import posixpath
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow.fs as pafs

from storelib.checkpoint import Checkpoint
from storelib.commitlog import DAMAGE_CRC, END_BLANK, END_EOF, END_UNREADABLE, END_ZERO_TAIL
from storelib.config import BrokerConfig
from storelib.constants import offset_file_name, offset_layout_problems
from storelib.findings import Finding
from storelib.indexfile import (
    build_index_file_head,
    deterministic_names,
    entries_per_file,
    index_file_size,
    needs_empty_tail_file,
)
from udfs.fs import join, list_files, resolve, write_file
from udfs.parse import index_scratch_path, segment_parser
from udfs.schema import (
    INDEX_SUMMARY_SCHEMA,
    INDEX_TASK_SCHEMA,
    KIND_CQ_RUN,
    KIND_DAMAGE,
    KIND_SEGMENT_END,
    QUEUE_SUMMARY_SCHEMA,
    RECORD_SCHEMA,
    SEGMENT_SCHEMA,
)
from udfs.write import INDEX_HEADER_FIELDS, consume_queue_writer, index_file_writer, index_part_name

REPORT_FORMAT = "rmq-store-rebuild/1"
REPORT_NAME = "rebuild.json"
ON_ERROR = ("stop", "skip-segment")


class RebuildError(RuntimeError):
    """The rebuild stopped; nothing was published. ``findings`` say where and why."""

    def __init__(self, message: str, findings: list[Finding]) -> None:
        super().__init__(message)
        self.findings = findings


@dataclasses.dataclass
class Segment:
    uri: str
    name: str
    start: int
    size: int


@dataclasses.dataclass
class RebuildResult:
    report: dict[str, Any]  # also OUT/rebuild.json
    seconds: float
    out: str
    worker_peak_rss: int  # bytes: the largest Python worker seen by a parse task
    spark: Any
    segments: list[Segment]
    cfg: BrokerConfig

    @functools.cached_property
    def records(self) -> Any:
        """One row per message record (parse_store "messages" mode), persisted on first use: unpersist it."""
        return parse_store(self.spark, self.segments, self.cfg).persist()


# --- 1. segments --------------------------------------------------------------------------


def list_segments(store: str, cfg: BrokerConfig) -> tuple[list[Segment], list[Finding]]:
    """The commitlog segments in offset order, and findings about their names, sizes and gaps."""
    fs, root = resolve(store)
    commitlog = join(root, "commitlog")
    if fs.get_file_info(commitlog).type != pafs.FileType.Directory:
        raise FileNotFoundError(f"{store}: no commitlog directory (is this a store root?)")
    findings: list[Finding] = []
    segments: list[Segment] = []
    for info in list_files(fs, commitlog):
        name = info.base_name
        if not (len(name) == 20 and name.isdigit()):
            findings.append(
                Finding("stray-file", "warning", f"commitlog/{name}", "not a commitlog segment name; ignored")
            )
            continue
        uri = store.rstrip("/") + "/commitlog/" + name if "://" in store else info.path
        segments.append(Segment(uri, name, int(name), info.size))
    segments.sort(key=lambda s: s.start)
    seg_size = cfg.mappedFileSizeCommitLog
    for kind, start, expected in offset_layout_problems([s.start for s in segments], seg_size):
        rel = f"commitlog/{offset_file_name(start)}"
        if kind == "misaligned":
            message = f"start offset is not a multiple of mappedFileSizeCommitLog {seg_size}"
            findings.append(Finding("segment-misaligned", "error", rel, message, commitlog_offset=start))
            continue
        message = (
            f"{(start - expected) // seg_size} segment(s) missing before this one: commitlog offsets "
            f"{expected} to {start} are not in the store"
        )
        findings.append(
            Finding("segment-gap", "error", rel, message, commitlog_offset=expected, count=start - expected)
        )
    for seg in segments:
        if seg.size != seg_size:
            findings.append(
                Finding(
                    "segment-size",
                    "error",
                    f"commitlog/{seg.name}",
                    f"segment is {seg.size} bytes, mappedFileSizeCommitLog is {seg_size}",
                    commitlog_offset=seg.start,
                    expected=str(seg_size),
                    actual=str(seg.size),
                )
            )
    return segments, findings


# --- 2. parse -------------------------------------------------------------------------------


def parse_store(
    spark: Any, segments: list[Segment], cfg: BrokerConfig, mode: str = "messages", scratch: str = ""
) -> Any:
    """RECORD_SCHEMA DataFrame of the segments, one task per segment (modes and scratch: see udfs.parse)."""
    rows = [(s.uri, s.name, s.start, s.size) for s in segments]
    seg_df = spark.createDataFrame(spark.sparkContext.parallelize(rows, len(rows)), _spark_schema(SEGMENT_SCHEMA))
    return seg_df.mapInArrow(segment_parser(cfg, mode, scratch), _spark_schema(RECORD_SCHEMA))


def _spark_schema(arrow_schema: Any) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema)


def classify_ends(segments: list[Segment], ends: dict[str, dict[str, Any]]) -> list[Finding]:
    """How each segment's records stop, judged by its place in the log.

    Before the last segment holding messages only a BLANK (or records to the very end) is
    a normal end; after it, zero tails are preallocated space and a torn record is the
    crash tail the broker would truncate.
    """
    findings = []
    with_messages = [i for i, s in enumerate(segments) if ends[s.name]["messages"] > 0]
    last = with_messages[-1] if with_messages else -1
    for i, seg in enumerate(segments):
        end = ends[seg.name]
        reason, offset, detail = end["reason"], end["commitlog_offset"], end["detail"]
        rel = f"commitlog/{seg.name}"
        if reason == END_UNREADABLE:
            findings.append(Finding("unreadable-file", "error", rel, detail, commitlog_offset=seg.start))
        elif i < last:
            if reason in (END_BLANK, END_EOF):
                continue
            findings.append(
                Finding(
                    f"segment-{reason}",
                    "error",
                    rel,
                    f"records stop at {offset} ({reason}) in the middle of the log: {detail}".rstrip(": "),
                    commitlog_offset=offset,
                    file_offset=offset - seg.start,
                )
            )
        elif reason in (END_ZERO_TAIL, END_EOF, END_BLANK):
            continue
        else:
            findings.append(
                Finding(
                    "commitlog-torn-tail",
                    "warning",
                    rel,
                    f"the log ends with a damaged record at {offset} ({reason}): {detail}; "
                    "the broker would truncate here",
                    commitlog_offset=offset,
                    file_offset=offset - seg.start,
                )
            )
    return findings


def damage_findings(rows: list[dict[str, Any]], segments: list[Segment]) -> list[Finding]:
    starts = {s.name: s.start for s in segments}
    out = []
    for r in rows:
        crc = r["reason"] == DAMAGE_CRC
        what = "kept: the record frames correctly and is dispatched" if crc else "not dispatched"
        out.append(
            Finding(
                r["reason"],
                "warning" if crc else "error",
                f"commitlog/{r['segment']}",
                f"{r['detail']} ({what})",
                commitlog_offset=r["commitlog_offset"],
                file_offset=r["commitlog_offset"] - starts[r["segment"]],
            )
        )
    return out


# --- 3, 4. write ----------------------------------------------------------------------------

#: rows per Arrow batch handed to the writers: a run row holds up to a few MB of packed units
#: or entries, so Spark's default (10,000 rows) could hand a task gigabytes at once
RUN_ROWS_PER_BATCH = 16


@contextlib.contextmanager
def arrow_batch_rows(spark: Any, rows: int) -> Iterator[None]:
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key, None)
    spark.conf.set(key, str(rows))
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def write_consume_queues(runs: Any, staging: str, cfg: BrokerConfig, partitions: int) -> list[dict[str, Any]]:
    """Runs of units grouped by queue and ordered by queue offset, each queue streamed into its files."""
    entries = runs.where(f"kind = {KIND_CQ_RUN}").select("topic", "queue_id", "queue_offset", "count", "data")
    written = (
        entries.repartition(partitions, "topic", "queue_id")
        .sortWithinPartitions("topic", "queue_id", "queue_offset")
        .mapInArrow(consume_queue_writer(staging, cfg), _spark_schema(QUEUE_SUMMARY_SCHEMA))
    )
    return sorted((r.asDict() for r in written.collect()), key=lambda q: (q["topic"], q["queue_id"]))


def index_file_plans(
    segments: list[Segment], counts: dict[str, int], per_file: int, scratch: str
) -> list[dict[str, object]]:
    """Where each IndexFile's entries are: entry g (0-based, commitlog order) goes to file
    g // per_file; the segments' entry counts say which scratch file holds it, at which position."""
    located, total = [], 0  # (first entry, entries, scratch file) of each segment with entries
    for s in segments:
        if counts[s.name]:
            located.append((total, counts[s.name], index_scratch_path(scratch, s.name)))
            total += counts[s.name]
    plans: list[dict[str, object]] = []
    for k in range(-(-total // per_file)):
        lo, hi = k * per_file, min((k + 1) * per_file, total)
        slices = [
            [uri, max(lo, base) - base, min(hi, base + n) - base]
            for base, n, uri in located
            if base < hi and base + n > lo
        ]
        inherited = None
        if k:
            base, _, uri = next(seg for seg in reversed(located) if seg[0] <= lo - 1)
            inherited = [uri, lo - 1 - base]
        plans.append({"slices": slices, "inherited": inherited})
    return plans


def write_index_files(
    spark: Any, staging: str, scratch: str, cfg: BrokerConfig, segments: list[Segment], ends: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Build every IndexFile in its own task, reading its entries from the segments' scratch files.

    Files are written under temporary names and renamed once every file's first store
    timestamp is known (see deterministic_names); a full last file followed by more messages
    gets the broker's empty successor file.
    """
    if not cfg.messageIndexEnable:
        return []
    last_message = max((e["last_message_offset"] for e in ends.values()), default=-1)
    if last_message < 0:
        return []
    counts = {s.name: ends[s.name]["index_seq"] for s in segments}
    total = sum(counts.values())
    plans = index_file_plans(segments, counts, entries_per_file(cfg.maxIndexNum), scratch)
    summaries = []
    if plans:
        tasks = [(k, json.dumps(p)) for k, p in enumerate(plans)]
        built = spark.createDataFrame(
            spark.sparkContext.parallelize(tasks, len(tasks)), _spark_schema(INDEX_TASK_SCHEMA)
        ).mapInArrow(index_file_writer(staging, cfg), _spark_schema(INDEX_SUMMARY_SCHEMA))
        summaries = sorted((r.asDict() for r in built.collect()), key=lambda s: s["file_no"])
    last = summaries[-1] if summaries else {"end_phy_offset": -1, "end_timestamp": 0}
    fs, root = resolve(staging)
    if needs_empty_tail_file(total, cfg.maxIndexNum, last_message > last["end_phy_offset"]):
        inherited = (last["end_phy_offset"], last["end_timestamp"]) if summaries else (0, 0)
        header, head = build_index_file_head([], [], [], inherited, cfg)
        size = index_file_size(cfg.maxHashSlotNum, cfg.maxIndexNum)
        write_file(fs, join(root, "index", index_part_name(len(plans))), head, size)
        summaries.append(
            {"file_no": len(plans), "first_store_timestamp": header.end_timestamp, **dataclasses.asdict(header)}
        )
    names = deterministic_names([s["first_store_timestamp"] for s in summaries])
    for s, name in zip(summaries, names):
        fs.move(join(root, "index", index_part_name(s["file_no"])), join(root, "index", name))
        s["name"] = name
    return [{k: s[k] for k in ("name", *INDEX_HEADER_FIELDS)} for s in summaries]


# --- 5. publish -----------------------------------------------------------------------------


def _inside(a: str, b: str) -> bool:
    a, b = posixpath.normpath(a), posixpath.normpath(b)
    return a == b or a.startswith(b.rstrip("/") + "/")


def check_output(store: str, out: str) -> None:
    """OUT is never inside the store (nothing writes into a live store) nor the store inside OUT."""
    _, store_path = resolve(store)
    fs, out_path = resolve(out)
    if _inside(out_path, store_path) or _inside(store_path, out_path):
        raise ValueError(f"--out {out} overlaps the store {store}: the rebuild never writes into a store")
    info = fs.get_file_info(out_path)
    if info.type == pafs.FileType.File:
        raise ValueError(f"--out {out} is a file")
    nonempty = info.type == pafs.FileType.Directory and fs.get_file_info(pafs.FileSelector(out_path))
    if nonempty and fs.get_file_info(join(out_path, REPORT_NAME)).type != pafs.FileType.File:
        raise ValueError(f"--out {out} is a non-empty directory that is not a previous rebuild; refusing to replace it")


def publish(staging: str, out: str) -> None:
    """Replace OUT with the staging directory: the old output is moved aside, then removed."""
    fs, out_path = resolve(out)
    _, staging_path = resolve(staging)
    old = None
    if fs.get_file_info(out_path).type == pafs.FileType.Directory:
        old = f"{out_path}.rmqstore-old-{uuid.uuid4().hex[:8]}"
        fs.move(out_path, old)
    fs.move(staging_path, out_path)
    if old:
        fs.delete_dir(old)


class Progress:
    """Prints segments parsed of total while the parse stage runs (from Spark's status tracker)."""

    def __init__(self, spark: Any, total_segments: int, total_bytes: int, every: float = 2.0) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.total, self.bytes, self.every = total_segments, total_bytes, every
        self.group = f"rmqstore-rebuild-{uuid.uuid4().hex[:8]}"
        spark.sparkContext.setJobGroup(self.group, "rmqstore rebuild")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Progress:
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            done = 0
            for job in self.tracker.getJobIdsForGroup(self.group):
                info = self.tracker.getJobInfo(job)
                for stage in info.stageIds if info else []:
                    s = self.tracker.getStageInfo(stage)
                    if s and s.numTasks == self.total:
                        done = max(done, s.numCompletedTasks)
            mb = self.bytes * done / max(1, self.total) / 1e6
            secs = time.monotonic() - self.t0
            print(f"  parse: {done}/{self.total} segments, {mb:,.0f} MB, {secs:.0f} s", file=sys.stderr, flush=True)


def rebuild(
    spark: Any, store: str, out: str, cfg: BrokerConfig, on_error: str = "stop", progress: bool = False
) -> RebuildResult:
    """Rebuild the index of ``store`` into ``out``; raises RebuildError (nothing published) on damage."""
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}")
    t0 = time.monotonic()
    check_output(store, out)
    segments, findings = list_segments(store, cfg)
    if not segments:
        raise FileNotFoundError(f"{store}: the commitlog directory holds no segments")
    fs, out_path = resolve(out)
    staging = f"{out_path}.rmqstore-staging-{uuid.uuid4().hex[:8]}"
    staging_uri = staging if "://" not in out else out.rstrip("/") + staging[len(out_path) :]
    scratch = staging_uri.rstrip("/") + "/.scratch"  # the segments' IndexFile entries; removed before publishing
    runs = parse_store(spark, segments, cfg, mode="dispatch", scratch=scratch).persist()
    try:
        report, ends = _rebuild(spark, out, cfg, on_error, progress, segments, findings, runs, staging_uri, scratch)
    except BaseException:
        if fs.get_file_info(staging).type == pafs.FileType.Directory:
            fs.delete_dir(staging)
        raise
    finally:
        runs.unpersist()
    peak = max((e["worker_peak_rss"] or 0 for e in ends.values()), default=0)
    return RebuildResult(report, time.monotonic() - t0, out, peak, spark, segments, cfg)


def _rebuild(
    spark: Any,
    out: str,
    cfg: BrokerConfig,
    on_error: str,
    progress: bool,
    segments: list[Segment],
    findings: list[Finding],
    runs: Any,
    staging_uri: str,
    scratch: str,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The rebuild after parsing: judge the damage, write ConsumeQueues and IndexFiles, publish."""
    with Progress(spark, len(segments), sum(s.size for s in segments)) if progress else contextlib.nullcontext():
        other = [r.asDict() for r in runs.where(f"kind IN ({KIND_SEGMENT_END}, {KIND_DAMAGE})").collect()]
    ends = {r["segment"]: r for r in other if r["kind"] == KIND_SEGMENT_END}
    findings += classify_ends(segments, ends)
    findings += damage_findings([r for r in other if r["kind"] != KIND_SEGMENT_END], segments)
    errors = [f for f in findings if f.severity == "error"]
    skipped: list[str] = []
    if errors and on_error == "stop":
        raise RebuildError(
            f"{len(errors)} error(s) in the commitlog; nothing was written "
            "(--on-error skip-segment leaves the damaged segments out)",
            findings,
        )
    if errors:
        bad = {f.file.split("/", 1)[1] for f in errors if f.file.startswith("commitlog/")}
        skipped = sorted(s.name for s in segments if s.name in bad)
        findings.append(
            Finding(
                "segments-skipped",
                "error",
                "commitlog",
                f"--on-error skip-segment: {len(skipped)} damaged segment(s) left out of the index: "
                + ", ".join(skipped),
                count=len(skipped),
            )
        )
    usable = [s for s in segments if s.name not in skipped]
    usable_runs = runs.where(~runs.segment.isin(skipped)) if skipped else runs
    for name in skipped:
        ends[name] = {**ends[name], "index_seq": 0, "messages": 0, "last_message_offset": -1}
    partitions = max(2, spark.sparkContext.defaultParallelism)
    # ConsumeQueues and IndexFiles are independent: two concurrent Spark jobs share the cores
    with arrow_batch_rows(spark, RUN_ROWS_PER_BATCH), ThreadPoolExecutor(2) as pool:
        queues_job = pool.submit(write_consume_queues, usable_runs, staging_uri, cfg, partitions)
        index_job = pool.submit(write_index_files, spark, staging_uri, scratch, cfg, usable, ends)
        queues, index_files = queues_job.result(), index_job.result()
    for q in queues:
        findings += [Finding.from_dict(d) for d in json.loads(q.pop("findings"))]
    checkpoint = Checkpoint(
        physic_msg_timestamp=max((e["last_store_timestamp"] for e in ends.values()), default=0),
        logics_msg_timestamp=max((e["last_cq_store_timestamp"] for e in ends.values()), default=0),
        index_msg_timestamp=index_files[-1]["end_timestamp"] if index_files else 0,
    )
    report = build_report(cfg, segments, ends, findings, queues, index_files, checkpoint)
    sfs, spath = resolve(staging_uri)
    sfs.delete_dir(resolve(scratch)[1])
    write_file(sfs, join(spath, "checkpoint"), checkpoint.pack())
    write_file(sfs, join(spath, REPORT_NAME), (json.dumps(report, indent=1, sort_keys=True) + "\n").encode())
    publish(staging_uri, out)
    return report, ends


def build_report(
    cfg: BrokerConfig,
    segments: list[Segment],
    ends: dict[str, dict[str, Any]],
    findings: list[Finding],
    queues: list[dict[str, Any]],
    index_files: list[dict[str, Any]],
    checkpoint: Checkpoint,
) -> dict[str, Any]:
    """rebuild.json: deterministic for the same input (no times, no run ids)."""
    with_messages = [s for s in segments if ends[s.name]["messages"] > 0]
    max_offset = ends[with_messages[-1].name]["commitlog_offset"] if with_messages else segments[0].start
    return {
        "format": REPORT_FORMAT,
        "broker_config": cfg.to_dict(),
        "commitlog": {
            "segments": [
                {
                    "file": s.name,
                    "start": s.start,
                    "size": s.size,
                    "messages": ends[s.name]["messages"],
                    "end_reason": ends[s.name]["reason"],
                    "end_offset": ends[s.name]["commitlog_offset"],
                    "detail": ends[s.name]["detail"] or "",
                }
                for s in segments
            ],
            "min_offset": segments[0].start,
            "max_offset": max_offset,
            "messages": sum(ends[s.name]["messages"] for s in segments),
        },
        "findings": [f.to_dict() for f in sorted(findings, key=_finding_order)],
        "consume_queues": queues,
        "index_files": index_files,
        "checkpoint": dataclasses.asdict(checkpoint),
    }


def _finding_order(f: Finding) -> tuple[Any, ...]:
    return (f.file, f.commitlog_offset or -1, f.queue_offset or -1, f.kind)


# --- command line ---------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    from jobs.cli import add_broker_config, add_spark_options

    p.add_argument("--store", required=True, help="store root (holds commitlog/); local path, hdfs:// or s3a://")
    p.add_argument("--out", required=True, help="where the rebuilt consumequeue/, index/, checkpoint go")
    p.add_argument(
        "--on-error",
        choices=ON_ERROR,
        default="stop",
        help="damaged segment: stop (default, nothing written) or leave the segment out and say so",
    )
    p.add_argument("--catalog", metavar="TABLE", help="also write the message catalog Delta table")
    p.add_argument("--store-id", help="store id in the catalog (default: derived from the store path)")
    add_broker_config(p)
    add_spark_options(p)


def run(args: argparse.Namespace) -> int:
    from jobs.cli import broker_config
    from jobs.session import spark_session

    cfg = broker_config(args)
    spark, startup = spark_session("rmqstore-rebuild", args.master, args.profile, args.conf)
    try:
        result = rebuild(spark, args.store, args.out, cfg, args.on_error, progress=True)
    except RebuildError as exc:
        print_findings(exc.findings)
        print(f"rmqstore rebuild: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"rmqstore rebuild: error: {exc}", file=sys.stderr)
        return 2
    if args.catalog:
        from jobs.catalog import default_store_id, write_catalog

        write_catalog(spark, result.records, args.catalog, args.store_id or default_store_id(args.store))
        result.records.unpersist()
    findings = [Finding.from_dict(f) for f in result.report["findings"]]
    print_findings(findings)
    print(summary_line(result, startup))
    return 1 if any(f.severity == "error" for f in findings) else 0


def print_findings(findings: list[Finding]) -> None:
    for f in findings:
        print(f"  {f.severity.upper():7} {f.kind}: {f.file}: {f.message}", file=sys.stderr)


def summary_line(result: RebuildResult, startup: float) -> str:
    r = result.report
    seg = r["commitlog"]["segments"]
    data = sum(s["end_offset"] - s["start"] for s in seg if s["messages"])
    secs = max(result.seconds, 1e-9)
    return (
        f"rebuild: {len(seg)} segments, {r['commitlog']['messages']:,} messages, {len(r['consume_queues'])} queues, "
        f"{len(r['index_files'])} index files in {result.seconds:.1f} s ({data / secs / 1e6:,.1f} MB/s, "
        f"{r['commitlog']['messages'] / secs:,.0f} msgs/s; Spark start-up {startup:.1f} s) -> {result.out}"
    )


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("rebuild", None))
