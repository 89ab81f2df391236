"""The audit history: one Delta table holding, per audit run, its findings and one summary row.

Written by ``rmqstore audit --history TABLE``. Rows have ``row_type`` ``"finding"`` (the Finding fields,
storelib.findings) or ``"summary"`` (exit code, counts, what the run covered and skipped); both carry
``run_id``, ``store`` and ``started_at``. Each run is one commit whose userMetadata names the run, so the
table can be read as it was after any earlier run. Not partitioned: a few rows per run.

Appended by delta-rs from the driver (jobs.tables.delta.append_rows), not by Spark: many audits append at once,
on S3 too, and delta-rs's conditional-write commits lose none of them. Read by Spark or delta-rs.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import uuid

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from jobs.tables.delta import append_rows, read_delta, table_exists, table_history
from storelib.audit.scope import CleanRun
from storelib.errors import EXIT_OK
from storelib.findings import Finding

FINDING, SUMMARY = "finding", "summary"
_FINDING_FIELDS = [
    T.StructField(f.name, T.LongType() if "int" in str(f.type) else T.StringType()) for f in dataclasses.fields(Finding)
]
_SUMMARY_FIELDS = [
    T.StructField("finished_at", T.TimestampType()),
    T.StructField("exit_code", T.IntegerType()),
    T.StructField("findings", T.LongType()),
    T.StructField("errors", T.LongType()),
    T.StructField("warnings", T.LongType()),
    T.StructField("infos", T.LongType()),
    T.StructField("kinds", T.MapType(T.StringType(), T.LongType())),  # finding kind -> count
    T.StructField("commitlog_max_offset", T.LongType()),  # the commitlog's max offset when audited
    T.StructField("segments_audited", T.ArrayType(T.StringType())),  # commitlog segment names read
    T.StructField("skipped", T.ArrayType(T.StringType())),  # what a --since-last run did not audit, and why
    T.StructField("base_run_id", T.StringType()),  # the clean run a --since-last run built on
]
HISTORY_SCHEMA = T.StructType(
    [
        T.StructField("row_type", T.StringType()),
        T.StructField("run_id", T.StringType()),
        T.StructField("store", T.StringType()),
        T.StructField("started_at", T.TimestampType()),
        *_FINDING_FIELDS,
        *_SUMMARY_FIELDS,
    ]
)
HISTORY_ARROW_SCHEMA = to_arrow_schema(HISTORY_SCHEMA)  # timestamps as timestamp[us, UTC], Delta's timestamp
RUN_KEYS = ("store", "started_at", "finished_at", "exit_code")  # required keys of append_history's run


def append_history(spark: SparkSession, table: str, run: dict, findings: list[dict]) -> int:
    """Append one audit run to the history table at ``table`` (created if missing); returns its Delta version.

    ``run`` keys: ``store``, ``started_at``, ``finished_at`` (datetimes; naive ones are taken as UTC),
    ``exit_code``; optional ``run_id`` (default: a new UUID, set in ``run``), ``commitlog_max_offset``,
    ``segments_audited`` and ``skipped`` (lists of str), ``base_run_id``. ``findings`` are
    ``Finding.to_dict()`` dicts; their counts per severity and kind go into the summary row.
    Concurrent appends (several audits sharing a table, several processes) all land: the delta-rs commit
    retries on conflict. ``spark`` is not used by the write (a few rows, committed from the driver).
    """
    missing = [k for k in RUN_KEYS if k not in run]
    if missing:
        raise ValueError(f"run lacks {', '.join(missing)}")
    run.setdefault("run_id", uuid.uuid4().hex)
    common = {"run_id": run["run_id"], "store": run["store"], "started_at": _utc(run["started_at"])}
    severities = collections.Counter(f["severity"] for f in findings)
    summary = {
        **{k: run.get(k) for k in ("exit_code", "commitlog_max_offset", "segments_audited", "skipped", "base_run_id")},
        "finished_at": _utc(run["finished_at"]),
        "findings": len(findings),
        "errors": severities["error"],
        "warnings": severities["warning"],
        "infos": severities["info"],
        "kinds": list(collections.Counter(f["kind"] for f in findings).items()),  # an Arrow map: (key, value) pairs
    }
    rows = [{**common, **summary, "row_type": SUMMARY}] + [{**f, **common, "row_type": FINDING} for f in findings]
    data = pa.Table.from_pylist(rows, schema=HISTORY_ARROW_SCHEMA)
    return append_rows(table, data, {"job": "audit", "run_id": run["run_id"], "store": run["store"]})


def _utc(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value


def read_history(
    spark: SparkSession, table: str, version: int | None = None, as_of_run: str | None = None
) -> DataFrame:
    """The history table, now, as of Delta ``version``, or as it was right after run ``as_of_run`` committed."""
    if as_of_run is not None:
        version = run_version(spark, table, as_of_run)
    return read_delta(spark, table, version)


def run_version(spark: SparkSession, table: str, run_id: str) -> int:
    """The Delta version that committed run ``run_id``; KeyError when no commit of the table names it."""
    for commit in table_history(table):
        if commit["metadata"].get("run_id") == run_id:
            return commit["version"]
    raise KeyError(f"run {run_id} is not in the history of {table}")


def last_clean_run(spark: SparkSession, table: str, store: str) -> CleanRun | None:
    """The newest summary of ``store`` with exit code 0 (None if none, or no table yet), for ``--since-last``."""
    if not table_exists(table):
        return None
    summaries = read_history(spark, table).where(
        (F.col("row_type") == SUMMARY) & (F.col("store") == store) & (F.col("exit_code") == EXIT_OK)
    )
    newest = summaries.orderBy(F.col("started_at").desc(), F.col("finished_at").desc()).limit(1).collect()
    if not newest:
        return None
    row = newest[0]
    return CleanRun(
        row.run_id,
        row.started_at.astimezone(dt.UTC),  # Spark hands back naive local times
        row.commitlog_max_offset,
        tuple(row.segments_audited or ()),
    )
