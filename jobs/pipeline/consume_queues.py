"""The ConsumeQueue stage on the driver: the parse's runs shuffled by queue, in each queue's order (QUEUE_ORDER),
each queue streamed into its files by one writer task (udfs.write.consume_queue_writer), in the same Spark job as the
parse.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

import pyarrow.fs as pafs
from pyspark.sql import functions as F

from jobs.pipeline.context import Run, spark_schema
from storelib.constants import LMQ_PREFIX
from storelib.findings import Finding
from storelib.formats.consumequeue import LooseEnds, strays
from storelib.reports.report import QueueRecord
from udfs.fs import join, resolve
from udfs.schema import QUEUE_SUMMARY_SCHEMA
from udfs.write import consume_queue_writer, contradicted

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row

#: the order a queue's runs are written in: by queue offset, and runs of one queue offset in commitlog order (the
#: broker dispatches in commitlog order and keeps the first unit of a queue offset), so the files are a function of
#: the commitlog's bytes, never of the order Spark's shuffle delivers ties in; a queue written at its write position
#: (BrokerConfig.at_write_position) takes its runs in commitlog order, as the broker dispatches them
QUEUE_ORDER = ("topic", "queue_id", "dispatch_order", "commitlog_offset")


def write_consume_queues(
    run: Run, runs: DataFrame, staging: str, scratch: str
) -> tuple[list[QueueRecord], list[Finding]]:
    """Runs grouped by queue, ordered by QUEUE_ORDER, each queue streamed into its files (one job with the parse)
    from the units the parse left in ``scratch``: the queues in (topic, queue id) order, and the writers' findings.

    Repartitioned by column, not to a count: spark.sql.shuffle.partitions writers, which adaptive execution
    merges by the bytes the parse produced (one writer task for a nearly empty store).
    """
    written = (
        runs.withColumn("dispatch_order", dispatch_order(run.cfg.appended_topics, run.cfg.appended_lmq))
        .repartition("topic", "queue_id")
        .sortWithinPartitions(*QUEUE_ORDER)
        .mapInArrow(consume_queue_writer(staging, scratch, run.cfg), spark_schema(QUEUE_SUMMARY_SCHEMA))
    )
    rows = sorted(written.collect(), key=lambda r: (r.topic, r.queue_id))
    findings = [Finding.from_dict(d) for r in rows for d in json.loads(r.findings)]
    ends = {(r.topic, r.queue_id): LooseEnds.from_json(r.loose_ends) for r in rows}
    found = strays(ends)
    strayed = [contradicted(*s, run.cfg.mappedFileSizeCommitLog) for s in found]
    untold = {(*queue, q): (lo, hi) for queue, e in ends.items() for q, lo, hi in e.gaps}
    for queue, m, _ in found:
        untold.pop((*queue, m.queue_offset), None)
    return [_queue_record(r) for r in rows], [_untold(f, untold) for f in findings] + strayed


def _untold(f: Finding, untold: dict[tuple[str, int, int], tuple[int, int]]) -> Finding:
    """A gap of one queue offset no record was found to fill: said so, and left (it may lie in damaged bytes)."""
    where = untold.get((f.topic or "", f.queue_id or 0, f.queue_offset or 0)) if f.kind == "queue-offset-gap" else None
    if where is None:
        return f
    lo, hi = where
    said = (
        f"; no record out of place lies between commitlog offsets {lo} and {hi}: the record that held it is in "
        "damaged bytes there, or cannot be told from a sound one"
    )
    return dataclasses.replace(f, message=f.message + said)


def _queue_record(row: Row) -> QueueRecord:
    """A QUEUE_SUMMARY_SCHEMA row less its findings (rebuild.json has them in ``findings``) and loose ends."""
    fields = {k: v for k, v in row.asDict().items() if k not in ("findings", "loose_ends")}
    return QueueRecord(**{**fields, "files": tuple(row.files)})


def dispatch_order(topics: tuple[str, ...], lmq: bool) -> Column:
    """A run's place in its queue: its commitlog offset in the queues written at their write position (those of
    ``topics``, and with ``lmq`` every LMQ queue: BrokerConfig.at_write_position), else its queue offset."""
    appended = F.col("topic").isin(*topics) | (F.lit(lmq) & F.col("topic").startswith(LMQ_PREFIX))
    return F.when(appended, F.col("commitlog_offset")).otherwise(F.col("queue_offset"))


def without_segments(
    run: Run, runs: DataFrame, staging: str, scratch: str, skipped: list[str]
) -> tuple[list[QueueRecord], list[Finding]]:
    """The ConsumeQueues written again without the skipped segments' runs (the rare damaged path)."""
    fs, root = resolve(staging)
    if fs.get_file_info(join(root, "consumequeue")).type == pafs.FileType.Directory:
        fs.delete_dir(join(root, "consumequeue"))
    return write_consume_queues(run, runs.where(~runs.segment.isin(skipped)), staging, scratch)
