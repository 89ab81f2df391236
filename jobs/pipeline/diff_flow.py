"""The diff on the driver: two stores of one broker compared message by message (storelib.audit.message_diff).

1. each store's segments listed and its rules resolved (jobs.pipeline.store_rules), as the rebuild does;
2. one Spark job: both stores parsed into message rows (jobs.pipeline.parse, udfs.parse), keyed, shuffled by key
   into tasks spread by bytes, compared (udfs.diff_tasks); the DIFF_SCHEMA rows go to the work directory;
3. what the parse said of each segment read back: a segment whose byte ranges did not meet is parsed whole, in a
   second run; a damaged one stops the diff (its records after the damage would read as missing);
4. the rows counted by kind, store and topic (the driver gets counts only) and, with ``out``, the missing
   messages read back from their segments into a Parquet table (udfs.schema.MISSING_MESSAGE_SCHEMA).
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from jobs.pipeline import parse
from jobs.pipeline.context import Run, spark_schema
from jobs.pipeline.parse import RangesDisagree, read_parsed
from jobs.pipeline.progress import Progress
from jobs.pipeline.rebuild_flow import list_segments
from jobs.pipeline.store_rules import store_rules
from jobs.pipeline.tasks import task_count
from storelib.audit.message_diff import (
    DIFF_SCHEMA,
    KEYED_SCHEMA,
    MISSING,
    RECORD_SCHEMA,
    DiffCounts,
    DiffGroup,
)
from storelib.broker.segments import Segment, SegmentSummary
from storelib.errors import BadInput, CannotCompare
from storelib.formats.scanner import DAMAGE_CRC
from udfs.diff_tasks import compared, keyed, message_reader
from udfs.fs import resolve
from udfs.schema import MISSING_MESSAGE_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclasses.dataclass(frozen=True)
class Side:
    """One of the two stores: its root, segments and run (its settings and rules)."""

    store: str
    segments: list[Segment]
    run: Run


@dataclasses.dataclass(frozen=True)
class DiffResult:
    counts: DiffCounts
    groups: list[DiffGroup]  # DIFF_SCHEMA rows counted by kind, store and topic
    seconds: float
    out: str | None


def check_out(out: str | None, stores: tuple[str, str]) -> None:
    """Refuse an ``--out`` that exists (a table is never overwritten) or is inside a store."""
    if out is None:
        return
    fs, path = resolve(out)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        raise BadInput(f"{out}: already exists; the missing messages go to a new directory")
    for store in stores:
        if path.startswith(resolve(store)[1].rstrip("/") + "/"):
            raise BadInput(f"{out}: inside the store {store}; nothing is ever written into a store")


def diff(run: Run, stores: tuple[str, str], beside: str, out: str | None = None) -> DiffResult:
    """Compare ``stores`` (the first, the other); with ``out``, the missing messages as a Parquet table there.
    The work directory is made next to ``beside`` (the report) unless the run has its own."""
    t0 = time.monotonic()
    sides = [_side(run, store) for store in stores]
    if out is not None and any(seg.framing.header for s in sides for seg in s.segments):
        raise BadInput("--out reads records by their offset in a plain commitlog: convert a DLedger store first")
    whole = [frozenset[str](), frozenset[str]()]
    with run.work_dir(beside) as work:
        while True:
            try:
                rows, records = _compare(run, sides, whole, work)
                break
            except _SideRangesDisagree as exc:
                whole[exc.side] = exc.disagree.parse_whole(whole[exc.side])
        groups = [DiffGroup.of_row(r.asDict()) for r in _grouped(rows).collect()]
        counts = DiffCounts.of(records, [(g.kind, g.side, g.records) for g in groups])
        if out is not None and counts.kinds[MISSING] != (0, 0):
            _write_missing(run, sides, rows, groups, out)
    return DiffResult(counts, groups, time.monotonic() - t0 - run.waited, out)


def _side(run: Run, store: str) -> Side:
    segments, _ = list_segments(store, run.cfg)  # their names' and sizes' findings are the audit's
    return Side(store, segments, store_rules(run, store, segments))


class _SideRangesDisagree(Exception):
    def __init__(self, side: int, disagree: RangesDisagree) -> None:
        super().__init__(str(disagree))
        self.side, self.disagree = side, disagree


def _compare(run: Run, sides: list[Side], whole: list[frozenset[str]], work: str) -> tuple[DataFrame, tuple[int, int]]:
    """The DIFF_SCHEMA rows of the two stores, written under ``work``, and each store's message records (its
    segments' parse summaries, each checked for damage)."""
    from pyspark.sql import functions as F

    scratch = [f"{work}/scratch-{i}" for i in range(len(sides))]
    parts = [
        parse.parse_store(s.run, s.segments, "messages", scratch[i], whole[i]).select(
            F.lit(i).cast("byte").alias("side"), *RECORD_SCHEMA.names[1:]
        )
        for i, s in enumerate(sides)
    ]
    records = parts[0].unionByName(parts[1]).mapInArrow(keyed, spark_schema(KEYED_SCHEMA))
    size = sum(seg.size for s in sides for seg in s.segments)
    tasks = task_count(size, size, run.slots)
    rows = records.repartition(tasks, "key").mapInArrow(compared, spark_schema(DIFF_SCHEMA))
    target = f"{work}/diff"
    with Progress(run, tasks, size, "compare"):
        rows.write.parquet(target)
    counted = []
    for i, s in enumerate(sides):
        try:
            parsed = read_parsed(scratch[i], parse.parse_tasks(s.run, s.segments, whole[i]))
        except RangesDisagree as exc:
            raise _SideRangesDisagree(i, exc) from None
        _refuse_damage(s, parsed.summaries)
        counted.append(sum(summary.messages for summary in parsed.summaries.values()))
    return run.spark.read.parquet(target), (counted[0], counted[1])


def _refuse_damage(side: Side, summaries: dict[str, SegmentSummary]) -> None:
    """Damage that lost records (not a mere BODYCRC mismatch, whose record is compared as it is): they would read
    as missing."""
    for seg in side.segments:
        for d in summaries[seg.name].damage:
            if d.kind == DAMAGE_CRC:
                continue
            raise CannotCompare(
                f"{side.store}/{seg.rel} @ {d.commitlog_offset}: {d.kind}: {d.detail}; "
                "its records after the damage cannot be compared (rmqstore audit says more)"
            )


def _grouped(rows: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return rows.groupBy("kind", "side", "topic").agg(
        F.count("*").alias("records"),
        F.sum("size").alias("bytes"),
        F.min("commitlog_offset").alias("first_commitlog_offset"),
        F.max("commitlog_offset").alias("last_commitlog_offset"),
        F.min("store_timestamp").alias("first_store_timestamp"),
        F.max("store_timestamp").alias("last_store_timestamp"),
    )


def _write_missing(run: Run, sides: list[Side], rows: DataFrame, groups: list[DiffGroup], out: str) -> None:
    """The missing records read back from their segments, spread by their bytes, as Parquet at ``out``."""
    from pyspark.sql import functions as F

    missing = [g for g in groups if g.kind == MISSING]
    tasks = task_count(sum(g.records for g in missing), sum(g.bytes for g in missing), run.slots)
    segments = {(i, seg.name): seg.uri for i, s in enumerate(sides) for seg in s.segments}
    reader = message_reader((sides[0].store, sides[1].store), segments)
    (
        rows.filter(F.col("kind") == MISSING)
        .repartitionByRange(tasks, "side", "commitlog_offset")
        .mapInArrow(reader, spark_schema(MISSING_MESSAGE_SCHEMA))
        .write.parquet(out)
    )
