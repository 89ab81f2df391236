"""S3 end to end on a real server (s3proxy on loopback, tests/s3server.py): the catalog written by delta-spark
and read by delta-rs, concurrent audit-history appends from two processes, the story-6 query over three
backups, and a rebuild from and to S3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable

from jobs.pipeline.context import Run
from jobs.pipeline.rebuild_flow import list_segments, parse_store
from jobs.tables.catalog import write_catalog
from tests.catalog_rows import BROKER_A, BROKER_B, catalog_page_queries, records_df
from tests.conftest import FIXTURE_DIR
from tests.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server, s3_server  # noqa: F401 (fixture s3)
from udfs.fs import S3Options, delta_storage_options, is_object_store, s3_options, spark_s3_settings, to_s3

pytestmark = pytest.mark.s3
CLEAN = FIXTURE_DIR / "clean"
RMQSTORE = Path(sys.executable).with_name("rmqstore")


def client(server: S3Server) -> pafs.S3FileSystem:
    """The test's own S3 client (shares nothing with udfs.fs): it judges what the jobs wrote."""
    host = server.endpoint.removeprefix("http://")
    return pafs.S3FileSystem(
        access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION, scheme="http", endpoint_override=host
    )


def rs_rows(server: S3Server, key: str) -> list[dict]:
    """The Delta table at ``s3://BUCKET/key`` read by delta-rs with explicit options."""
    options = {
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_ALLOW_HTTP": "true",
    }
    table = DeltaTable(f"s3://{server.bucket}/{key}", storage_options=options)
    return table.to_pyarrow_dataset().to_table().to_pylist()


def test_s3_settings_from_the_environment_and_hadoop(monkeypatch):
    env = {"AWS_ENDPOINT_URL": "http://10.0.0.5:9000", "AWS_REGION": "eu-west-1"}
    env |= {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    options = s3_options({})
    assert options == S3Options("http://10.0.0.5:9000", "eu-west-1", "id", "secret")
    hadoop = {"fs.s3a.endpoint": "minio:9000", "fs.s3a.connection.ssl.enabled": "false", "fs.s3a.access.key": "k"}
    assert s3_options(hadoop) == S3Options("http://minio:9000", "eu-west-1", "k", "secret")  # --conf wins
    assert spark_s3_settings(options) == {
        "spark.hadoop.fs.s3a.access.key": "id",
        "spark.hadoop.fs.s3a.secret.key": "secret",
        "spark.hadoop.fs.s3a.endpoint": "http://10.0.0.5:9000",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }
    rs = delta_storage_options("s3a://b/t", options)
    assert (rs["AWS_ENDPOINT_URL"], rs["AWS_ALLOW_HTTP"], rs["AWS_CONDITIONAL_PUT"]) == (
        env["AWS_ENDPOINT_URL"],
        "true",
        "etag",
    )
    assert delta_storage_options("/data/t", options) == {}
    assert spark_s3_settings(S3Options(None, None, None, None)) == {}
    assert (to_s3("s3a://b/k"), to_s3("hdfs://n/k")) == ("s3://b/k", "hdfs://n/k")
    uris = ("s3a://b/k", "s3://b", "gs://b/k", "hdfs://n/k", "/data", "file:///data")
    stores = [u for u in uris if is_object_store(u)]
    assert stores == ["s3a://b/k", "s3://b", "gs://b/k"]


@pytest.fixture(scope="module")
def s3_spark(spark, s3: S3Server):
    """The test session, pointed at the server (it started before the server: set on its Hadoop configuration)."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in spark_s3_settings().items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    return spark


def test_catalog_on_s3_written_by_delta_spark_read_by_delta_rs(s3_spark, s3: S3Server):
    table = s3.uri("catalog-small")
    write_catalog(s3_spark, records_df(s3_spark, BROKER_A), table, "broker-a")
    rerun = write_catalog(s3_spark, records_df(s3_spark, BROKER_A), table, "broker-a")
    write_catalog(s3_spark, records_df(s3_spark, BROKER_B), table, "broker-b")
    assert (rerun["inserted"], rerun["updated"], rerun["deleted"]) == (0, 0, 0)
    got = sorted((r["store_id"], r["commitlog_offset"], r["uniq_key"]) for r in rs_rows(s3, "catalog-small"))
    expected = [("broker-a", m["commitlog_offset"], m["uniq_key"]) for m in BROKER_A]
    assert got == sorted(expected + [("broker-b", m["commitlog_offset"], m["uniq_key"]) for m in BROKER_B])
    assert client(s3).get_file_info(f"{s3.bucket}/catalog-small/_delta_log/").type == pafs.FileType.Directory


APPENDER = textwrap.dedent(
    """
    import datetime as dt, sys, time
    from jobs.tables.history import append_history
    table, store, start_at, runs = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    time.sleep(max(0.0, start_at - time.time()))
    now = dt.datetime.now(dt.UTC)
    finding = {"kind": "crc-mismatch", "severity": "warning", "file": "commitlog/0", "message": "m"}
    for i in range(runs):
        run = {"store": store, "started_at": now, "finished_at": now, "exit_code": 1, "run_id": f"{store}-{i}"}
        print(append_history(None, table, run, [finding]), flush=True)
    """
)


def test_two_audits_append_to_one_history_on_s3_at_once(s3: S3Server):
    """Two processes (two nightly audits) append 10 runs each, starting at the same instant: none is lost."""
    table, runs = s3.uri("history"), 10
    start_at = str(time.time() + 3)  # both interpreters are up by then
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, table, store, start_at, str(runs)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parents[1],
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
        )
        for store in ("broker-a", "broker-b")
    ]
    versions = []
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0
        versions += [int(v) for v in out.split()]
    assert sorted(versions) == list(range(2 * runs))  # one commit each, none overwritten
    rows = rs_rows(s3, "history")
    summaries = sorted(r["run_id"] for r in rows if r["row_type"] == "summary")
    assert summaries == sorted(f"{s}-{i}" for s in ("broker-a", "broker-b") for i in range(runs))
    assert sum(r["row_type"] == "finding" for r in rows) == 2 * runs


def test_two_nightly_audits_of_one_store_record_both_runs_on_s3(s3: S3Server, tmp_path):
    """Two ``rmqstore audit --history s3a://...`` processes (the sample store as broker-a and broker-b)
    started together, their JVMs, rebuilds and audits overlapping: both runs are in the history, each in its
    own version."""
    table, store = s3.uri("nightly-history"), str(CLEAN)
    argv = [str(RMQSTORE), "audit", "--store", store, "--broker-config", str(FIXTURE_DIR / "broker.conf")]
    procs = [
        subprocess.Popen(
            [*argv, "--history", table, "--store-id", f"broker-{n}", "--report", str(tmp_path / n)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for n in "ab"
    ]
    assert [p.wait(timeout=900) for p in procs] == [0, 0]
    reports = [json.loads((tmp_path / n / "report.json").read_text())["run"]["history"] for n in "ab"]
    assert sorted(r["version"] for r in reports) == [0, 1]
    summaries = {(r["store"], r["run_id"]) for r in rs_rows(s3, "nightly-history") if r["row_type"] == "summary"}
    assert summaries == {(f"broker-{n}", r["run_id"]) for n, r in zip("ab", reports)}


def test_story_6_was_a_key_ever_stored_across_three_backups(s3_spark, s3: S3Server, fixture_cfg, tmp_path):
    """Three backups of one store (the 4.9.8 sample as it was 6 and 3 segments ago, and now) in one catalog
    on S3; the key query of docs/delta-tables.md finds a message of the first segment in all three, timed."""
    run = Run(s3_spark, fixture_cfg)
    segments, _ = list_segments(str(CLEAN), run.cfg)
    records = parse_store(run, segments, "messages", str(tmp_path / "scratch")).persist()
    table = s3.uri("catalog")
    backups = {"broker-a.day-1": segments[-6].start, "broker-a.day-2": segments[-3].start, "broker-a.day-3": None}
    try:
        for store_id, end in backups.items():
            part = records if end is None else records.where(records.commitlog_offset < end)
            write_catalog(s3_spark, part, table, store_id)
        first = records.where("keys IS NOT NULL AND keys != ''").orderBy("commitlog_offset").first()
    finally:
        records.unpersist()
    key = first["keys"].split(" ")[0]

    query = catalog_page_queries()[0].replace("ORD-1234", key)
    s3_spark.read.format("delta").load(table).createOrReplaceTempView("catalog")
    t0 = time.monotonic()
    found = s3_spark.sql(query).collect()
    seconds = time.monotonic() - t0
    print(f"\nstory 6: key {key} found {len(found)} times in 3 backups on S3 in {seconds:.2f} s")

    expected = sorted(
        (r["store_id"], r["commitlog_offset"])
        for r in rs_rows(s3, "catalog")
        if key in (r["key_list"] or [])  # the oracle: delta-rs and a Python scan
    )
    assert sorted((r.store_id, r.commitlog_offset) for r in found) == expected
    assert {r.store_id for r in found} == set(backups)


def upload(server: S3Server, local: Path, key: str) -> None:
    pafs.copy_files(str(local), f"{server.bucket}/{key}", destination_filesystem=client(server))


def test_rebuild_from_and_to_s3_is_byte_exact(s3: S3Server, tmp_path):
    upload(s3, CLEAN / "commitlog", "store/commitlog")
    argv = [str(RMQSTORE), "rebuild", "--store", s3.uri("store"), "--out", s3.uri("rebuilt")]
    argv += ["--broker-config", str(FIXTURE_DIR / "broker.conf")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-3000:]

    pafs.copy_files(f"{s3.bucket}/rebuilt", str(tmp_path / "rebuilt"), source_filesystem=client(s3))
    rebuilt = tmp_path / "rebuilt"
    for part in ("consumequeue",):
        live = {p.relative_to(CLEAN): p.read_bytes() for p in sorted((CLEAN / part).rglob("*")) if p.is_file()}
        got = {p.relative_to(rebuilt): p.read_bytes() for p in sorted((rebuilt / part).rglob("*")) if p.is_file()}
        assert sorted(got) == sorted(live) and [k for k in live if got[k] != live[k]] == []
    live_index = [p.read_bytes() for p in sorted((CLEAN / "index").iterdir())]
    assert [p.read_bytes() for p in sorted((rebuilt / "index").iterdir())] == live_index  # by order: names are times
