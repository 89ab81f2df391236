"""Delta tables: the catalog written by delta-spark (MERGE, clustering), the history appended by delta-rs,
both read back by delta-rs (the oracle: it shares no code with the writers) and by Spark."""

from __future__ import annotations

import datetime as dt
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from jobs.runtime import jars
from jobs.tables.catalog import CLUSTER_BY, default_store_id, write_catalog
from jobs.tables.delta import DELTA_EXTENSION, append_rows, has_delta_spark, read_delta, table_history
from jobs.tables.history import append_history, last_clean_run, read_history, run_version
from storelib.findings import Finding, finding
from tests.catalog_rows import BROKER_A, BROKER_B, HOUR, T0, catalog_page_queries, message, records_df

#: broker-a as an earlier rebuild saw it: its last message differed, and one more message was there
BROKER_A_BEFORE = [
    *BROKER_A[:-1],
    {**BROKER_A[-1], "keys": "ORD-0"},
    message(1600, "payments", 0, 1, T0 + 38 * HOUR, "ORD-1"),
]


@pytest.fixture(scope="module")
def catalog(spark, tmp_path_factory) -> tuple[str, list[dict]]:
    """broker-a written as it was before, then as it is (a re-run), then broker-b; the table and the results."""
    table = str(tmp_path_factory.mktemp("delta") / "catalog")
    results = [
        write_catalog(spark, records_df(spark, BROKER_A_BEFORE), table, "broker-a"),
        write_catalog(spark, records_df(spark, BROKER_A), table, "broker-a"),
        write_catalog(spark, records_df(spark, BROKER_B), table, "broker-b"),
    ]
    return table, results


def arrow(table: str, version: int | None = None) -> pa.Table:
    """The table read by delta-rs (its dataset: to_pyarrow_table can abort the process at exit)."""
    return DeltaTable(table, version=version).to_pyarrow_dataset().to_table()


def test_append_rows_read_back_and_time_travel(spark, tmp_path):
    table = str(tmp_path / "t")
    first = append_rows(table, pa.table({"n": [1, 2, 3], "s": ["a", "b", "c"]}), {"job": "test"})
    second = append_rows(table, pa.table({"n": [4], "s": ["d"]}), {"job": "test", "n": "4"})
    assert (first, second) == (0, 1)
    assert sorted(arrow(table).column("n").to_pylist()) == [1, 2, 3, 4]
    assert arrow(table, version=0).num_rows == 3
    assert sorted(r.n for r in read_delta(spark, table).collect()) == [1, 2, 3, 4]
    assert read_delta(spark, table, version=0).count() == 3
    history = table_history(table)
    assert [(h["version"], h["metadata"].get("n")) for h in history] == [(1, "4"), (0, None)]


def test_concurrent_appends_all_land(tmp_path):
    table = str(tmp_path / "t")
    with ThreadPoolExecutor(8) as pool:
        versions = list(pool.map(lambda i: append_rows(table, pa.table({"n": [i]}), {"n": str(i)}), range(16)))
    assert sorted(versions) == list(range(16))  # every append its own commit, none overwritten
    assert sorted(arrow(table).column("n").to_pylist()) == list(range(16))
    committed = {h["version"]: h["metadata"]["n"] for h in table_history(table)}
    assert {v: str(i) for i, v in enumerate(versions)} == committed  # each append knows its version


def test_store_id_must_be_plain(spark, tmp_path):
    with pytest.raises(ValueError, match="store id"):
        write_catalog(spark, records_df(spark, BROKER_B), str(tmp_path / "t"), "/data/store")
    assert not (tmp_path / "t").exists()
    assert default_store_id("s3a://backups/broker-a/store") == "s3a_backups_broker-a_store"


def test_catalog_rerun_merges_the_store(catalog):
    table, results = catalog
    assert [{k: r[k] for k in ("inserted", "updated", "deleted")} for r in results] == [
        {"inserted": len(BROKER_A_BEFORE), "updated": 0, "deleted": 0},
        {"inserted": 0, "updated": 1, "deleted": 1},  # the changed message, the one no longer in the store
        {"inserted": len(BROKER_B), "updated": 0, "deleted": 0},
    ]
    assert results[0]["version"] < results[1]["version"] < results[2]["version"]
    rows = arrow(table).to_pylist()
    expected = [("broker-a", m["commitlog_offset"], m["keys"]) for m in BROKER_A]
    expected += [("broker-b", m["commitlog_offset"], m["keys"]) for m in BROKER_B]
    assert sorted((r["store_id"], r["commitlog_offset"], r["keys"]) for r in rows) == sorted(expected)
    before = arrow(table, version=results[0]["version"]).to_pylist()
    assert len(before) == len(BROKER_A_BEFORE) and {"ORD-0", "ORD-1"} <= {r["keys"] for r in before}  # time travel

    row = next(r for r in rows if r["uniq_key"] == "UNIQ0400")
    assert row["key_list"] == ["ORD-1234", "ORD-9"] and row["store_date"] == dt.date(2024, 5, 1)
    assert {k: row[k] for k in ("topic", "queue_id", "queue_offset", "commitlog_offset", "segment")} == {
        "topic": "orders",
        "queue_id": 1,
        "queue_offset": 2,
        "commitlog_offset": 400,
        "segment": "00000000000000000000",
    }
    assert [f.name for f in DeltaTable(table).schema().fields][:2] == ["store_id", "topic"]


def test_catalog_is_clustered_and_readable_by_delta_rs(catalog):
    table = catalog[0]
    log = [json.loads(line) for p in sorted(Path(table, "_delta_log").glob("*.json")) for line in p.open()]
    protocol = next(a["protocol"] for a in log if "protocol" in a)
    assert protocol["minReaderVersion"] == 1 and "clustering" in protocol["writerFeatures"]
    assert "deletionVectors" not in protocol.get("readerFeatures", [])
    clustering = [json.loads(a["domainMetadata"]["configuration"]) for a in log if "domainMetadata" in a]
    assert clustering[-1]["clusteringColumns"] == [[c] for c in CLUSTER_BY]
    assert any(a.get("commitInfo", {}).get("operation") == "OPTIMIZE" for a in log)
    assert DeltaTable(table).metadata().partition_columns == []


def test_catalog_page_queries_run_on_the_catalog(spark, catalog):
    read_delta(spark, catalog[0]).createOrReplaceTempView("catalog")
    by_key, by_time, by_queue = (spark.sql(q).collect() for q in catalog_page_queries())

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
    assert clean.run_id == first["run_id"] and clean.started_at == first["started_at"]
    assert (clean.commitlog_max_offset, clean.segments_audited) == (1600, ("00000000000000000000",))
    assert last_clean_run(spark, table, "broker-c") is None

    history = read_history(spark, table)
    summary = history.where(f"row_type = 'summary' AND run_id = '{failed['run_id']}'").first()
    assert (summary.findings, summary.errors, summary.infos, summary.kinds["length-mismatch"]) == (2, 1, 1, 1)
    rows = history.where(f"row_type = 'finding' AND run_id = '{failed['run_id']}'").orderBy("severity").collect()
    assert [Finding.from_dict(r.asDict()) for r in rows] == FINDINGS
    assert run_version(spark, table, failed["run_id"]) == 1
    assert read_history(spark, table, as_of_run=first["run_id"]).count() == 1
    assert read_history(spark, table, version=1).count() == 4


def test_delta_spark_and_the_cached_jars(spark, monkeypatch):
    assert jars.cached_jars(), "run make jars"
    assert has_delta_spark(spark)  # the session took the cached jars (jobs.runtime.session)
    settings = jars.jar_settings()
    assert settings["spark.jars"].split(",") == [str(p) for p in jars.cached_jars()]
    assert settings["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert jars.jar_defaults({"spark.jars.packages": "io.delta:delta-spark_2.13:4.0.1"}) == {}  # the user's choice
    assert jars.jar_defaults({}) == settings
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")  # under spark-submit: too late for the driver's classpath
    assert jars.jar_defaults({}) == {}


def test_a_session_loads_only_the_jars_its_run_needs() -> None:
    assert jars.cached_jars(), "run make jars"
    names = {n: sorted(Path(j).name for j in jars.jar_settings(n).get("spark.jars", "").split(",") if j) for n in NEEDS}
    assert names[jars.JarNeeds(delta=True, s3a=False)] == ["delta-spark_2.13-4.0.1.jar", "delta-storage-4.0.1.jar"]
    s3a = names[jars.JarNeeds(delta=False, s3a=True)]
    assert "hadoop-aws-3.4.1.jar" in s3a and not any(n.startswith("delta") for n in s3a)
    assert len(s3a) == len(jars.read_lock()) - 2
    assert jars.jar_settings(jars.JarNeeds(delta=False, s3a=False)) == {}
    assert "spark.sql.extensions" not in jars.jar_settings(jars.JarNeeds(delta=False, s3a=True))
    assert jars.jar_settings(jars.JarNeeds(delta=True, s3a=False))["spark.sql.extensions"] == DELTA_EXTENSION
    assert jars.JarNeeds.of(["/data/store", None, 3, "s3a://bucket/out"], delta=False) == jars.JarNeeds(False, True)
    assert jars.JarNeeds.of(["/data/store", "s3://bucket/out"], delta=True) == jars.JarNeeds(True, False)


NEEDS = [jars.JarNeeds(d, s) for d in (False, True) for s in (False, True)]


def test_a_jar_that_differs_from_the_lock_is_refused(tmp_path):
    lock = jars.read_lock()
    name = "delta-storage-4.0.1.jar"
    data = bytearray((jars.CACHE / name).read_bytes())
    (tmp_path / name).write_bytes(data)
    assert jars.mismatches(tmp_path, {name: lock[name]}) == []
    data[100] ^= 1
    (tmp_path / name).write_bytes(data)
    (tmp_path / "extra.jar").write_bytes(b"")
    assert jars.mismatches(tmp_path, {name: lock[name], "gone.jar": ("0", "0")}) == [
        "missing gone.jar",
        "not in the lock: extra.jar",
        f"checksum differs: {name}",
    ]
