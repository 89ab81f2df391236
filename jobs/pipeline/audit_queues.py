"""The audit's ConsumeQueue stage: one task per queue reads the live and rebuilt files and classifies it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from jobs.pipeline.listing import list_queues
from storelib.audit import QueueAudit, queue_repairs
from storelib.findings import Finding
from udfs.audit import audit_queue

if TYPE_CHECKING:
    from jobs.pipeline.audit import Audit

_TASK_SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType()),
        T.StructField("queue_id", T.IntegerType()),
        T.StructField("live_files", T.ArrayType(T.StringType())),
        T.StructField("rebuilt_files", T.ArrayType(T.StringType())),
    ]
)


def audit_queues(a: Audit) -> list[dict[str, Any]]:
    """Queue findings and repairs into ``a``; the per-queue rows of the report.

    The queues are the union of the live and the rebuilt ones; since the base run, those whose last entry is in
    the audited segments.
    """
    live, a_findings = list_queues(a.store)
    a.findings += a_findings
    built, _ = list_queues(a.rebuilt)
    keys = sorted(set(live) | set(built))
    if a.scope.base:
        touched = {
            (q["topic"], q["queue_id"])
            for q in a.rebuild_report["consume_queues"]
            if q.get("last_commitlog_offset", a.scope.start) >= a.scope.start
        }
        a.scope.skip(len(keys) - len(touched & set(keys)), "queues without messages in the audited segments")
        keys = [k for k in keys if k in touched]
    if not keys:
        return []
    rows = [(t, q, sorted(live.get((t, q), {})), sorted(built.get((t, q), {}))) for t, q in keys]
    tasks = a.run.spark.createDataFrame(rows, _TASK_SCHEMA)
    store, rebuilt, cfg = a.store, a.rebuilt, a.cfg
    cl = a.rebuild_report["commitlog"]
    cl_min, cl_max = cl["min_offset"], cl["max_offset"]
    results = (
        tasks.repartition(min(len(keys), 200))
        .rdd.map(lambda row: audit_queue(row.asDict(True), store, rebuilt, cfg, cl_min, cl_max))
        .collect()
    )
    out = []
    for r in map(json.loads, results):
        a.findings += [Finding.from_dict(f) for f in r["findings"]]
        if r["row"]:
            out.append(r["row"])
            qa = QueueAudit(r["row"]["topic"], r["row"]["queue_id"], [], r["row"], r["write"], r["delete"])
            a.repairs += queue_repairs(qa, live.get((qa.topic, qa.queue_id), {}))
    return sorted(out, key=lambda q: (q["topic"], q["queue_id"]))
