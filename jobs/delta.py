"""Delta tables written from Spark: with delta-spark when the session has it, else committed with delta-rs.

Without Delta on the session's classpath, Spark still writes the Parquet files on the executors, into a
hidden staging folder inside the table (``<table>/_staging-<uuid>/``, never read by Delta readers nor
touched by VACUUM); the driver moves them to Hive-style partition folders (``<table>/col=value/...``, names
unique per Spark job), reads their footers for sizes and column statistics, and commits exactly those files
with the ``deltalake`` package in one transaction of add actions. delta-rs retries the commit when another
writer committed first, so concurrent appends lose nothing. Either way the table is an ordinary Delta table
(protocol 1/2) that delta-spark, delta-rs and Spark SQL read, with time travel by version.
"""

from __future__ import annotations

import json
import posixpath
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from udfs import fs

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
MAX_RECORDS_PER_FILE = 5_000_000
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_PLAIN = re.compile(r"[A-Za-z0-9._-]+")
_IO_THREADS = 16  # file moves and footer reads are round trips on object stores


def has_delta_spark(spark: SparkSession) -> bool:
    """True when ``spark.sql.extensions`` names Delta's extension and its class loads in the driver JVM."""
    if DELTA_EXTENSION not in spark.conf.get("spark.sql.extensions", ""):
        return False
    try:
        jvm = spark.sparkContext._jvm
        jvm.java.lang.Class.forName(
            DELTA_EXTENSION, False, jvm.java.lang.Thread.currentThread().getContextClassLoader()
        )
    except Exception:  # Py4JJavaError (class not found) or no JVM access (Spark Connect)
        return False
    return True


def _uri(table: str) -> str:
    """The table location for delta-rs: an absolute local path, or the URI (``s3a://`` read as ``s3://``)."""
    if "://" not in table:
        return posixpath.abspath(table)
    return "s3://" + table[len("s3a://") :] if table.startswith("s3a://") else table


def _spark_path(table: str) -> str:
    return table if "://" in table else posixpath.abspath(table)


def table_exists(spark: SparkSession, table: str) -> bool:
    """Whether ``table`` holds a Delta table (a ``_delta_log`` with at least one commit)."""
    if has_delta_spark(spark):
        from delta.tables import DeltaTable as SparkDeltaTable

        return SparkDeltaTable.isDeltaTable(spark, _spark_path(table))
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(_uri(table))


def table_history(spark: SparkSession, table: str, limit: int | None = None) -> list[dict]:
    """The table's commits, newest first: version, timestamp (ms), operation and the writer's ``metadata`` dict."""
    if has_delta_spark(spark):
        from delta.tables import DeltaTable as SparkDeltaTable

        rows = SparkDeltaTable.forPath(spark, _spark_path(table)).history(limit).collect()
        commits = [{**r.asDict(), "timestamp": int(r.timestamp.timestamp() * 1000)} for r in rows]
    else:
        from deltalake import DeltaTable

        commits = DeltaTable(_uri(table)).history(limit)
    return [
        {
            "version": c["version"],
            "timestamp": c["timestamp"],
            "operation": c["operation"],
            "metadata": json.loads(c.get("userMetadata") or "{}"),
            "metrics": c.get("operationMetrics") or {},
        }
        for c in commits
    ]


def write_delta(
    df: DataFrame,
    table: str,
    mode: Literal["append", "overwrite"],
    partition_by: list[str],
    replace: dict[str, str] | None = None,
    metadata: dict[str, str] | None = None,
) -> dict:
    """Write ``df`` to the Delta table at ``table`` (a path or URI) in one commit; creates the table if needed.

    ``replace`` (with ``overwrite``): values of the leading partition columns, which ``df`` does not have;
    the rows written get them, and they replace exactly those partitions (delta-spark's ``replaceWhere``).
    An overwrite without it replaces the whole table. ``metadata`` goes into the commit's ``userMetadata``
    (JSON), seen in ``table_history``. Returns ``{"version", "files", "rows", "engine"}``.
    """
    replace = replace or {}
    if mode not in ("append", "overwrite"):
        raise ValueError(f"mode must be append or overwrite, got {mode!r}")
    if replace and (
        mode != "overwrite" or list(replace) != partition_by[: len(replace)] or set(replace) & set(df.columns)
    ):
        raise ValueError("replace: overwrite only, values of leading partition columns that df does not have")
    write_id = uuid.uuid4().hex
    user_metadata = json.dumps({**(metadata or {}), "write_id": write_id}, sort_keys=True)
    full = df.select(*(F.lit(v).alias(k) for k, v in replace.items()), "*")
    spark = df.sparkSession
    if has_delta_spark(spark):
        engine = "delta-spark"
        writer = full.write.format("delta").mode(mode).partitionBy(*partition_by).option("userMetadata", user_metadata)
        if replace:
            where = " AND ".join(f"`{k}` = {_sql_literal(v)}" for k, v in replace.items())
            writer = writer.option("replaceWhere", where)
        writer.option("maxRecordsPerFile", MAX_RECORDS_PER_FILE).save(_spark_path(table))
    else:
        engine = "deltalake"
        actions = _write_deltalake(df, full.schema, table, mode, partition_by, replace, user_metadata)
    # this write's commit, found by its id: other writers may have committed since
    commit = next((c for c in table_history(spark, table, 100) if c["metadata"].get("write_id") == write_id), None)
    if commit is None:
        raise RuntimeError(f"commit of write {write_id} not found in the history of {table}")
    if engine == "deltalake":
        files, rows = len(actions), sum(json.loads(a.stats)["numRecords"] for a in actions)
    else:
        files, rows = int(commit["metrics"].get("numFiles", 0)), int(commit["metrics"].get("numOutputRows", 0))
    return {"version": commit["version"], "files": files, "rows": rows, "engine": engine}


def _sql_literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _write_deltalake(
    df: DataFrame,
    schema: StructType,
    table: str,
    mode: str,
    partition_by: list[str],
    replace: dict[str, str],
    user_metadata: str,
) -> list:
    """Spark writes the files into a staging folder; they move into place and commit in one transaction.

    The ``replace`` columns are constants, so Spark does not write them: their folders prefix the paths
    (Spark would otherwise re-sort the rows by them and drop the DataFrame's own order).
    """
    from deltalake import CommitProperties, DeltaTable, Schema
    from deltalake.exceptions import DeltaError
    from deltalake.transaction import create_table_with_add_actions

    filesystem, root = fs.resolve(table)
    staging = fs.join(root, f"_staging-{uuid.uuid4().hex}")
    prefix = "".join(f"{k}={v}/" for k, v in replace.items())
    try:
        writer = df.write.partitionBy(*partition_by[len(replace) :])
        writer.option("maxRecordsPerFile", MAX_RECORDS_PER_FILE).parquet(
            posixpath.join(_spark_path(table), posixpath.basename(staging))
        )
        rels = {
            prefix + posixpath.relpath(i.path, staging): i.path
            for i in fs.list_files(filesystem, staging, recursive=True)
            if i.path.endswith(".parquet")
        }
        placed = [(rel, path, _partition_values(rel, partition_by)) for rel, path in rels.items()]
        with ThreadPoolExecutor(_IO_THREADS) as pool:
            actions = list(pool.map(lambda p: _publish(filesystem, root, *p), placed))
    finally:
        if filesystem.get_file_info(staging).type != pafs.FileType.NotFound:
            filesystem.delete_dir(staging)

    delta_schema = Schema.from_json(json.dumps(_nullable(schema.jsonValue())))
    props = CommitProperties(custom_metadata={"userMetadata": user_metadata})
    uri = _uri(table)
    if not DeltaTable.is_deltatable(uri):
        try:
            create_table_with_add_actions(
                uri, delta_schema, actions, mode="error", partition_by=partition_by, commit_properties=props
            )
            return actions
        except DeltaError:
            if not DeltaTable.is_deltatable(uri):  # not lost to a concurrent creator: a real error
                raise
    filters = [(k, "=", v) for k, v in replace.items()] or None
    DeltaTable(uri).create_write_transaction(
        actions, mode, delta_schema, partition_by, filters, commit_properties=props
    )
    return actions


def _partition_values(rel: str, partition_by: list[str]) -> dict[str, str | None]:
    """Partition values of a file from its ``col=value/`` folders.

    Values must be plain (letters, digits, ``._-``): delta-rs and Spark escape other characters in folder
    names differently, so a table with them would not read back the same everywhere.
    """
    values: dict[str, str | None] = {}
    for part in rel.split("/")[:-1]:
        key, _, value = part.partition("=")
        if value != _HIVE_NULL and not _PLAIN.fullmatch(value):
            raise ValueError(f"partition value {key}={value!r}: use only letters, digits, '.', '_' and '-'")
        values[key] = None if value == _HIVE_NULL else value
    if list(values) != partition_by:
        raise RuntimeError(f"file {rel}: partition folders {list(values)}, expected {partition_by}")
    return values


def _nullable(node: object) -> object:
    """A Spark schema's JSON with every field, element and value nullable, as Spark writes files."""
    if isinstance(node, list):
        return [_nullable(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _nullable(v) for k, v in node.items()}
    for key in ("nullable", "containsNull", "valueContainsNull"):
        if key in out:
            out[key] = True
    return out


def _publish(filesystem: pafs.FileSystem, root: str, rel: str, path: str, values: dict[str, str | None]):
    """Move one staged file to ``<table>/<rel>``; its add action (size, mtime, partition values, stats)."""
    from deltalake.transaction import AddAction

    target = fs.join(root, rel)
    filesystem.create_dir(posixpath.dirname(target), recursive=True)
    filesystem.move(path, target)
    info = filesystem.get_file_info(target)
    with filesystem.open_input_file(target) as f:
        footer = pq.read_metadata(f)
    return AddAction(
        path=rel,
        size=info.size,
        partition_values=values,
        modification_time=info.mtime_ns // 1_000_000,
        data_change=True,
        stats=json.dumps(_stats(footer)),
    )


def _stats(footer: pq.FileMetaData) -> dict:
    """Delta file statistics from a Parquet footer: numRecords, and min/max/nullCount of flat columns.

    A column gets min/max only when every row group has them and they are numbers or short strings
    (Delta readers skip files on these values, so they must bound the data exactly).
    """
    minimum: dict[str, object] = {}
    maximum: dict[str, object] = {}
    nulls: dict[str, int] = {}
    for c in range(footer.num_columns):
        name = footer.schema.column(c).path
        if "." in name:  # nested (array/map/struct): Delta keeps no stats for it
            continue
        stats = [footer.row_group(g).column(c).statistics for g in range(footer.num_row_groups)]
        if not stats or any(s is None for s in stats):
            continue
        if all(s.has_null_count for s in stats):
            nulls[name] = sum(s.null_count for s in stats)
        if all(s.has_min_max for s in stats):
            lo, hi = min(s.min for s in stats), max(s.max for s in stats)
            if all(_stat_value(v) for v in (lo, hi)):
                minimum[name], maximum[name] = lo, hi
    return {"numRecords": footer.num_rows, "minValues": minimum, "maxValues": maximum, "nullCount": nulls}


def _stat_value(value: object) -> bool:
    return (type(value) in (int, float) and value == value) or (type(value) is str and len(value) <= 32)


def read_delta(spark: SparkSession, table: str, version: int | None = None) -> DataFrame:
    """The Delta table at ``table`` as a DataFrame, as of ``version`` when given (time travel).

    Without delta-spark, delta-rs lists the version's files and Spark reads them with the table's
    schema, partition values taken from the Hive-style folders (the layout both writers produce).
    """
    if has_delta_spark(spark):
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(_spark_path(table))
    from deltalake import DeltaTable

    delta_table = DeltaTable(_uri(table), version=version)
    schema = StructType.fromJson(json.loads(delta_table.schema().to_json()))
    root = _spark_path(table)
    files = [posixpath.join(root, p) for p in delta_table.get_add_actions().column("path").to_pylist()]
    if not files:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).option("basePath", root).parquet(*files)
