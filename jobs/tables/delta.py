"""Delta tables of the jobs, and who writes each one.

- The **message catalog** is written by delta-spark (jobs.tables.catalog): MERGE, liquid clustering and OPTIMIZE
  need it, and one rebuild writes one store's rows at a time. delta-spark's log store on S3 is safe for one
  writing driver at a time only (two drivers appending at once lost a commit): run catalog writes one after
  another on S3, or configure Delta's S3DynamoDBLogStore.
- The **audit history** is appended by delta-rs from the driver (jobs.tables.history): 20 nightly audits append at
  once, and delta-rs commits with a conditional write (put if absent), retrying on a newer version, so no
  commit is lost on S3 either.

Both stay readable by delta-rs, the no-JVM reader: reader protocol 1, no deletion vectors, no column mapping.
Table locations are local paths or URIs (``s3a://`` for Spark; delta-rs reads it as ``s3://``, udfs.fs).
"""

from __future__ import annotations

import json
import posixpath
from typing import Literal

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from udfs import fs

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
#: commit attempts of one append: each lost race moves to the next version (20 audits at once lose at most 19)
MAX_COMMIT_RETRIES = 100


def has_delta_spark(spark: SparkSession) -> bool:
    """True when ``spark.sql.extensions`` names Delta's extension and its class loads in the driver JVM."""
    if DELTA_EXTENSION not in (spark.conf.get("spark.sql.extensions", "") or ""):
        return False
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None  # a session's driver JVM
        jvm.java.lang.Class.forName(
            DELTA_EXTENSION, False, jvm.java.lang.Thread.currentThread().getContextClassLoader()
        )
    except Exception:  # Py4JJavaError (class not found) or no JVM access (Spark Connect)
        return False
    return True


def require_delta_spark(spark: SparkSession) -> None:
    """RuntimeError naming the fix when the session lacks delta-spark."""
    if not has_delta_spark(spark):
        raise RuntimeError(
            "this write needs delta-spark on the session: run `make jars` (jobs.runtime.jars puts the jars on "
            "spark.jars); under spark-submit add $(python -m jobs.runtime.jars --submit-args) or --packages "
            "io.delta:delta-spark_2.13:4.0.1"
        )


def spark_path(table: str) -> str:
    """The table location for Spark: an absolute local path, or the URI as given."""
    return table if "://" in table else posixpath.abspath(table)


def rs_uri(table: str) -> str:
    """The table location for delta-rs: an absolute local path, or the URI (``s3a://`` read as ``s3://``)."""
    return fs.to_s3(table) if "://" in table else posixpath.abspath(table)


def rs_table(table: str, version: int | None = None):
    """delta-rs's ``DeltaTable`` at ``table`` (as of ``version``), with the S3 settings of udfs.fs."""
    from deltalake import DeltaTable

    uri = rs_uri(table)
    return DeltaTable(uri, version=version, storage_options=fs.delta_storage_options(uri))


def table_exists(table: str) -> bool:
    """Whether ``table`` holds a Delta table (a ``_delta_log`` with at least one commit)."""
    from deltalake import DeltaTable

    uri = rs_uri(table)
    return DeltaTable.is_deltatable(uri, storage_options=fs.delta_storage_options(uri))


def table_history(table: str, limit: int | None = None) -> list[dict]:
    """The table's commits, newest first: version, timestamp (ms), operation, the writer's ``metadata`` dict
    (its commit's userMetadata) and ``metrics``; read by delta-rs, whoever wrote them."""
    return [
        {
            "version": c["version"],
            "timestamp": c["timestamp"],
            "operation": c["operation"],
            "metadata": json.loads(c.get("userMetadata") or "{}"),
            "metrics": c.get("operationMetrics") or {},
        }
        for c in rs_table(table).history(limit)
    ]


def find_commit(table: str, write_id: str) -> dict:
    """The commit (as in table_history) whose userMetadata carries ``write_id``; others may have committed since."""
    for commit in table_history(table, 100):
        if commit["metadata"].get("write_id") == write_id:
            return commit
    raise RuntimeError(f"commit of write {write_id} not found in the history of {table}")


def append_rows(table: str, rows: pa.Table, metadata: dict[str, str]) -> int:
    """Append ``rows`` to the Delta table at ``table`` (created if missing) in one delta-rs commit; its version.

    ``metadata`` goes into the commit's userMetadata (JSON). The commit is a conditional write: when another
    writer took the version first, delta-rs retries on the next one, so concurrent appends from many processes
    all land. (The version is the written DeltaTable's: delta-rs's history is not reliable during others' commits.)
    """
    from deltalake import CommitProperties, DeltaTable, write_deltalake
    from deltalake.exceptions import DeltaError

    uri = rs_uri(table)
    user_metadata = json.dumps(metadata, sort_keys=True)
    props = CommitProperties(custom_metadata={"userMetadata": user_metadata}, max_commit_retries=MAX_COMMIT_RETRIES)
    options = fs.delta_storage_options(uri)

    def write(target: str | DeltaTable, mode: Literal["error", "append"]) -> None:
        write_deltalake(target, rows, mode=mode, storage_options=options, commit_properties=props)

    if not table_exists(table):
        try:
            write(uri, "error")  # creates the table: version 0, or fails when another writer created it first
            return 0
        except DeltaError:
            if not table_exists(table):  # not a lost race to create the table: a real error
                raise
    target = rs_table(table)
    write(target, "append")
    return target.version()


def read_delta(spark: SparkSession, table: str, version: int | None = None) -> DataFrame:
    """The Delta table at ``table`` as a DataFrame, as of ``version`` when given (time travel).

    Without delta-spark, delta-rs lists the version's files and Spark reads them with the table's schema,
    partition values taken from the Hive-style folders.
    """
    if has_delta_spark(spark):
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(spark_path(table))
    delta_table = rs_table(table, version)
    schema = StructType.fromJson(json.loads(delta_table.schema().to_json()))
    root = spark_path(table)
    files = [posixpath.join(root, p) for p in delta_table.get_add_actions().column("path").to_pylist()]
    if not files:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).option("basePath", root).parquet(*files)
