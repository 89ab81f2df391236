"""Delta tables on the deltalake path (no delta-spark JARs in CI): writer, reader, catalog, audit history."""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql.pandas.types import from_arrow_schema

from jobs.catalog import PARTITION_BY, SORT_BY, default_store_id, write_catalog
from jobs.delta import DELTA_EXTENSION, has_delta_spark, read_delta, write_delta
from jobs.history import append_history, last_clean_run, read_history, run_version
from storelib.findings import Finding, finding
from udfs.schema import MESSAGE_SCHEMA

README = Path(__file__).resolve().parents[1] / "README.md"
T0 = int(dt.datetime(2024, 5, 1, 21, 0, tzinfo=dt.UTC).timestamp() * 1000)  # 2024-05-01 21:00 UTC
HOUR = 3_600_000


def record(**fields: object) -> dict:
    return {**dict.fromkeys(MESSAGE_SCHEMA.names), "segment": "00000000000000000000", **fields}


def message(offset: int, topic: str, queue_id: int, queue_offset: int, ts: int, keys: str | None) -> dict:
    return record(
        commitlog_offset=offset,
        size=200,
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        sys_flag=0,
        tags_code=7,
        tags="TagA",
        keys=keys,
        uniq_key=f"UNIQ{offset:04d}",
        born_timestamp=ts - 5,
        store_timestamp=ts,
        to_consume_queue=True,
    )


#: broker-a: orders queue 1 hourly from 21:00, queue 0 at 22:30 and 03:00, one payment two days later
BROKER_A = [
    *(
        message(200 * i, "orders", 1, i, T0 + i * HOUR, keys)
        for i, keys in enumerate(["ORD-1230", "ORD-1231 X", "ORD-1234  ORD-9", None, "ORD-1233"])
    ),
    message(1000, "orders", 0, 0, T0 + 90 * 60_000, "ORD-2000"),
    message(1200, "orders", 0, 1, T0 + 6 * HOUR, ""),
    message(1400, "payments", 0, 0, T0 + 37 * HOUR, "ORD-1234"),
]
BROKER_B = [message(200 * i, "orders", 1, i, T0 + 30 * 60_000 + i * HOUR, f"B-{i}") for i in range(3)]


def records_df(spark, rows: list[dict]):
    return spark.createDataFrame(rows, from_arrow_schema(MESSAGE_SCHEMA))


@pytest.fixture(scope="module")
def catalog(spark, tmp_path_factory) -> tuple[str, list[dict]]:
    """broker-a written twice (a re-run), then broker-b; the table path and the three write results."""
    table = str(tmp_path_factory.mktemp("delta") / "catalog")
    results = [
        write_catalog(spark, records_df(spark, BROKER_A), table, "broker-a"),
        write_catalog(spark, records_df(spark, BROKER_A), table, "broker-a"),
        write_catalog(spark, records_df(spark, BROKER_B), table, "broker-b"),
    ]
    return table, results


def sorted_rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def test_write_read_history_schema_and_time_travel(spark, tmp_path):
    table = str(tmp_path / "t")
    df = spark.createDataFrame(
        [(i, f"v{i}", f"2024-05-0{1 + i % 2}") for i in range(6)], "n long, s string, day string"
    )
    first = write_delta(df, table, "append", ["day"], metadata={"job": "test"})
    second = write_delta(df.where("n < 2"), table, "append", ["day"])
    assert (first["version"], first["rows"], first["engine"]) == (0, 6, "deltalake")
    assert (second["version"], second["rows"]) == (1, 2)

    delta = DeltaTable(table)
    assert delta.version() == 1 and delta.metadata().partition_columns == ["day"]
    assert [(f.name, f.type.type) for f in delta.schema().fields] == [("n", "long"), ("s", "string"), ("day", "string")]
    history = delta.history()
    assert [h["operation"] for h in history] == ["WRITE", "CREATE TABLE"]
    assert '"job": "test"' in history[1]["userMetadata"]

    arrow = delta.to_pyarrow_table()
    assert arrow.num_rows == 8
    spark_rows = read_delta(spark, table).select("n", "s", "day").collect()
    assert sorted(tuple(r) for r in spark_rows) == sorted_rows(arrow)
    assert DeltaTable(table, version=0).to_pyarrow_table().num_rows == 6
    assert read_delta(spark, table, version=0).count() == 6

    adds = pa.record_batch(delta.get_add_actions(flatten=True)).to_pylist()
    assert len(adds) == first["files"] + second["files"]
    for add in adds:
        assert re.fullmatch(r"day=2024-05-0[12]/part-[^/]+\.parquet", add["path"])
        assert add["size_bytes"] == os.path.getsize(os.path.join(table, add["path"]))
        assert add["num_records"] >= 1 and add["min.n"] <= add["max.n"]
    assert sorted(os.listdir(table)) == ["_delta_log", "day=2024-05-01", "day=2024-05-02"]  # no staging left

    replaced = write_delta(df.where("n = 5"), table, "overwrite", ["day"])
    assert replaced["version"] == 2 and DeltaTable(table).to_pyarrow_table().column("n").to_pylist() == [5]


def test_partition_values_must_be_plain(spark, tmp_path):
    table = tmp_path / "t"
    with pytest.raises(ValueError, match="partition value"):
        write_delta(spark.createDataFrame([(1, "a b")], "n long, p string"), str(table), "append", ["p"])
    assert [p for p in table.iterdir() if p.name != "_delta_log"] == []
    with pytest.raises(ValueError, match="store id"):
        write_catalog(spark, records_df(spark, BROKER_B), str(table), "/data/store")
    assert default_store_id("s3a://backups/broker-a/store") == "s3a_backups_broker-a_store"


def test_catalog_rerun_replaces_the_store(catalog):
    table, results = catalog
    assert [r["version"] for r in results] == [0, 1, 2]
    assert [r["rows"] for r in results] == [len(BROKER_A), len(BROKER_A), len(BROKER_B)]
    delta = DeltaTable(table)
    assert delta.metadata().partition_columns == PARTITION_BY
    counts = {}
    for store in delta.to_pyarrow_table().column("store_id").to_pylist():
        counts[store] = counts.get(store, 0) + 1
    assert counts == {"broker-a": len(BROKER_A), "broker-b": len(BROKER_B)}  # the re-run did not duplicate
    assert DeltaTable(table, version=0).to_pyarrow_table().num_rows == len(BROKER_A)
    assert {p["store_date"] for p in delta.partitions()} == {"2024-05-01", "2024-05-02", "2024-05-03"}
    assert [f.name for f in delta.schema().fields][:2] == ["store_id", "topic"]
    for path in pa.record_batch(delta.get_add_actions()).column("path").to_pylist():
        assert path.startswith(("store_id=broker-a/store_date=2024-05-0", "store_id=broker-b/store_date=2024-05-0"))
        rows = pq.read_table(os.path.join(table, path), columns=SORT_BY).to_pylist()
        assert [tuple(r.values()) for r in rows] == sorted(tuple(r.values()) for r in rows)  # files sorted by queue

    row = delta.to_pyarrow_table(filters=[("store_id", "=", "broker-a"), ("uniq_key", "=", "UNIQ0400")]).to_pylist()[0]
    assert row["key_list"] == ["ORD-1234", "ORD-9"] and row["store_date"] == dt.date(2024, 5, 1)
    assert {k: row[k] for k in ("topic", "queue_id", "queue_offset", "commitlog_offset", "segment")} == {
        "topic": "orders",
        "queue_id": 1,
        "queue_offset": 2,
        "commitlog_offset": 400,
        "segment": "00000000000000000000",
    }


def readme_queries() -> list[str]:
    text = README.read_text()
    section = text[text.index("<!-- BEGIN delta -->") : text.index("<!-- END delta -->")]
    return re.findall(r"```sql\n(.*?)```", section, re.S)


def test_readme_queries_run_on_the_catalog(spark, catalog):
    read_delta(spark, catalog[0]).createOrReplaceTempView("catalog")
    by_key, by_time, by_queue = (spark.sql(q).collect() for q in readme_queries())

    assert [(r.topic, r.queue_offset, r.commitlog_offset) for r in by_key] == [
        ("orders", 2, 400),
        ("payments", 0, 1400),
    ]
    assert {r.store_id for r in by_key} == {"broker-a"}
    # 22:00 to 02:00: broker-a queue 1 offsets 1-4 and queue 0 offset 0 (22:30); broker-b 22:30, 23:30, 00:30
    assert [(r.store_id, r.queue_id, r.queue_offset) for r in by_time] == [
        ("broker-a", 1, 1),
        ("broker-a", 0, 0),
        ("broker-b", 1, 1),
        ("broker-a", 1, 2),
        ("broker-b", 1, 2),
        ("broker-a", 1, 3),
        ("broker-a", 1, 4),
    ]
    assert [r.queue_offset for r in by_queue] == [2, 3, 4]


def run(store: str, hour: int, exit_code: int, **extra: object) -> dict:
    started = dt.datetime(2024, 5, 2, hour, tzinfo=dt.UTC)
    return {
        "store": store,
        "started_at": started,
        "finished_at": started + dt.timedelta(minutes=5),
        "exit_code": exit_code,
        **extra,
    }


FINDINGS = [
    finding("length-mismatch", "commitlog/00000000000000000000", "fields do not add up", commitlog_offset=400),
    finding("cq-expired-head", "consumequeue/orders/1/00000000000000000000", "expired", count=2),
]


def test_history_last_clean_run_and_earlier_runs(spark, tmp_path):
    table = str(tmp_path / "history")
    assert last_clean_run(spark, table, "broker-a") is None
    first = run("broker-a", 1, 0, commitlog_max_offset=1600, segments_audited=["00000000000000000000"], skipped=[])
    assert append_history(spark, table, first, []) == 0
    failed = run("broker-a", 2, 1, commitlog_max_offset=2000)
    assert append_history(spark, table, failed, [f.to_dict() for f in FINDINGS]) == 1
    append_history(spark, table, run("broker-b", 3, 0), [])

    clean = last_clean_run(spark, table, "broker-a")
    assert clean["run_id"] == first["run_id"] and clean["started_at"] == first["started_at"]
    assert (clean["commitlog_max_offset"], clean["segments_audited"]) == (1600, ["00000000000000000000"])
    assert last_clean_run(spark, table, "broker-c") is None

    history = read_history(spark, table)
    summary = history.where(f"row_type = 'summary' AND run_id = '{failed['run_id']}'").first()
    assert (summary.findings, summary.errors, summary.infos, summary.kinds["length-mismatch"]) == (2, 1, 1, 1)
    rows = history.where(f"row_type = 'finding' AND run_id = '{failed['run_id']}'").orderBy("severity").collect()
    assert [Finding.from_dict(r.asDict()) for r in rows] == FINDINGS
    assert run_version(spark, table, failed["run_id"]) == 1
    assert read_history(spark, table, as_of_run=first["run_id"]).count() == 1
    assert read_history(spark, table, version=1).count() == 4


def gate(monkeypatch, owner: object, name: str) -> list[object]:
    """Make two threads reach ``owner.name`` before either runs it; returns the first argument of each call."""
    barrier = threading.Barrier(2, timeout=60)
    real = getattr(owner, name)
    calls: list[object] = []

    def gated(*args: object, **kwargs: object) -> object:
        calls.append(args[0])
        barrier.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, gated)
    return calls


def test_concurrent_audits_lose_no_rows(spark, tmp_path, monkeypatch):
    table = str(tmp_path / "history")

    def two_audits(hour: int) -> list[dict]:
        runs = [run(f"broker-{i}", hour, 1) for i in "ab"]
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(append_history, spark, table, r, [FINDINGS[0].to_dict()]) for r in runs]
            for f in futures:
                f.result()
        return runs

    gate(monkeypatch, deltalake.transaction, "create_table_with_add_actions")  # both create the table
    runs = two_audits(1)
    monkeypatch.undo()
    snapshots = gate(monkeypatch, DeltaTable, "create_write_transaction")  # both commit on the same version
    runs += two_audits(2)
    assert [s.version() for s in snapshots] == [1, 1]  # so one commit conflicted and was retried

    delta = DeltaTable(table)
    assert delta.version() == 3
    assert sorted(delta.to_pyarrow_table().column("run_id").to_pylist()) == sorted(2 * [r["run_id"] for r in runs])
    assert sorted(run_version(spark, table, r["run_id"]) for r in runs) == [0, 1, 2, 3]


def test_delta_spark_needs_its_class_on_the_classpath(spark):
    assert not has_delta_spark(spark)  # CI: no Delta JARs, the deltalake path
    configured = types.SimpleNamespace(conf={"spark.sql.extensions": DELTA_EXTENSION}, sparkContext=spark.sparkContext)
    assert not has_delta_spark(configured)
