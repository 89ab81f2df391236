"""The parse stage on the driver: the segments' tasks (storelib.broker.segments.plan_parse_tasks: consecutive small
segments, or one byte range of a big one) run on executors (udfs.parse), and what they leave in the scratch
directory read back: each piece's summary, merged into its segment's (storelib.broker.segments.merge_pieces), or
RangesDisagree when a segment's ranges do not meet and it must be parsed whole.
"""

from __future__ import annotations

import dataclasses
import posixpath
import threading
from collections.abc import Collection
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from jobs.pipeline.context import Run, numbered_tasks, spark_schema
from jobs.pipeline.progress import Progress
from jobs.pipeline.tasks import parse_task_bytes
from storelib.broker.segments import (
    Piece,
    PieceSummary,
    Segment,
    SegmentSummary,
    merge_pieces,
    plan_parse_tasks,
    settle_damaged_ends,
    settle_torn_tail,
)
from udfs.fs import is_object_store, read_file, resolve
from udfs.parse import segment_parser, summary_path
from udfs.schema import CQ_RUN_SCHEMA, MESSAGE_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def parse_tasks(run: Run, segments: list[Segment], whole: Collection[str] = ()) -> list[list[Piece]]:
    """The parse's tasks: consecutive segments, or a byte range of a bigger one, of the bytes parse_task_bytes gives
    the run's task slots (``whole``: segments not cut into ranges)."""
    return plan_parse_tasks(segments, parse_task_bytes(sum(s.size for s in segments), run.slots), whole)


def parse_store(run: Run, segments: list[Segment], mode: str, scratch: str, whole: Collection[str] = ()) -> DataFrame:
    """CQ_RUN_SCHEMA (``dispatch``) or MESSAGE_SCHEMA (``messages``) rows of the segments, a task each of
    ``parse_tasks``."""
    tasks = parse_tasks(run, segments, whole)
    out = CQ_RUN_SCHEMA if mode == "dispatch" else MESSAGE_SCHEMA
    return numbered_tasks(run, len(tasks)).mapInArrow(segment_parser(run.cfg, mode, scratch, tasks), spark_schema(out))


def parse_progress(run: Run, segments: list[Segment], label: str = "parse", whole: Collection[str] = ()) -> Progress:
    """The console progress of parse_store's tasks over ``segments``."""
    return Progress(run, len(parse_tasks(run, segments, whole)), sum(s.size for s in segments), label)


def scan_segments(run: Run, segments: list[Segment], scratch: str) -> dict[str, SegmentSummary]:
    """Parse the segments for their summaries only (ends, damage, fingerprints): the rows are dropped. Segments
    whose byte ranges do not meet are parsed again whole."""
    whole: frozenset[str] = frozenset()
    while True:
        with parse_progress(run, segments, "scan", whole):
            parse_store(run, segments, "dispatch", scratch, whole).write.format("noop").mode("overwrite").save()
        try:
            return read_parsed(scratch, parse_tasks(run, segments, whole)).summaries
        except RangesDisagree as exc:
            whole = exc.parse_whole(whole)


class RangesDisagree(Exception):
    """The byte ranges of these segments did not meet (storelib.broker.segments.merge_pieces): parse them whole."""

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
    settled = {name: summary for name, summary in merged.items() if summary is not None}
    if len(settled) < len(merged):
        raise RangesDisagree(frozenset(merged.keys() - settled.keys()))
    entries = [(p.piece, name, p.summary.index_entries) for name, ps in pieces.items() for p in ps]
    ordered = sorted(segments.values(), key=lambda seg: seg.start)
    return Parsed(settle_damaged_ends(ordered, settle_torn_tail(ordered, settled)), entries)


#: seconds between two listings of the scratch directory while the parse runs: a local listing is cheap and the
#: IndexFile job waits for the last summary; an object store's costs a request
SUMMARY_POLL = {"local": 0.02, "object store": 0.1}


def wait_for_summaries(scratch: str, tasks: list[list[Piece]], parsed: threading.Event) -> Parsed:
    """read_parsed once every piece's summary is in ``scratch``; an error when ``parsed`` is set and one is
    still missing (the parse failed: the queue writers' job reports why).

    ``scratch`` is made first: a listing while the first parse task makes it fails (pyarrow finds no directory to
    list, then one that exists, and raises)."""
    fs, root = resolve(scratch)
    fs.create_dir(root, recursive=True)
    poll = SUMMARY_POLL["object store" if is_object_store(scratch) else "local"]
    wanted = {posixpath.basename(summary_path(scratch, p.name)) for task in tasks for p in task}
    while True:
        last_look = parsed.is_set()
        found = {i.base_name for i in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))}
        if wanted <= found:
            return read_parsed(scratch, tasks)
        if last_look:
            raise RuntimeError(f"the parse left no summary of {len(wanted - found)} piece(s) in {scratch}")
        parsed.wait(poll)
