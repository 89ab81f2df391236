"""``rmqstore audit --stores``: a fleet audited in one Spark application (copies of the 4.9.8 fixture's clean/ store
and a directory that is no store), one report and one history row per store, the bad one not stopping the rest."""

from __future__ import annotations

import json

from jobs.tables.catalog import default_store_id
from jobs.tables.history import SUMMARY, read_history
from tests.conftest import FIXTURE_DIR
from tests.storecopy import copy_store, run_cli


def test_a_fleet_in_one_application_each_store_its_report_and_row_the_worst_exit_code(
    spark, fixture_dir, tmp_path, capsys
) -> None:
    fleet, table, reports = tmp_path / "fleet", tmp_path / "history", tmp_path / "reports"
    for name in ("broker-a", "broker-c"):
        copy_store(fixture_dir / "clean", fleet / name / "store")
    (fleet / "broker-b" / "store").mkdir(parents=True)  # between the two: its failure must not stop broker-c
    argv = ["audit", "--stores", str(fleet / "*" / "store"), "--report", str(reports), "--history", str(table)]
    code = run_cli([*argv, "--broker-config", str(FIXTURE_DIR / "broker.conf"), "--broker-version", "4.9.8"])
    out = capsys.readouterr().out
    assert code == 2, out
    ids = {name: default_store_id(str(fleet / name / "store")) for name in ("broker-a", "broker-b", "broker-c")}
    for name in ("broker-a", "broker-c"):
        report = json.loads((reports / ids[name] / "report.json").read_text())
        assert (report["run"]["store"], report["summary"]["exit_code"]) == (str(fleet / name / "store"), 0)
    assert not (reports / ids["broker-b"] / "report.json").exists()
    rows = read_history(spark, str(table)).where(f"row_type = '{SUMMARY}'").collect()
    assert sorted((r["store"], r["exit_code"]) for r in rows) == sorted(
        [(ids["broker-a"], 0), (ids["broker-b"], 2), (ids["broker-c"], 0)]
    )
    assert "audit: 3 stores: 2 clean, 0 divergent, 1 could not be audited; exit code 2" in out


def test_stores_lists_globs_and_named_roots_in_order_each_once(tmp_path) -> None:
    from jobs.audit import expand_stores

    for name in ("b", "a", "c"):
        (tmp_path / name).mkdir()
    got = expand_stores(f"{tmp_path}/c, {tmp_path}/[ab],,s3a://bucket/x, {tmp_path}/a, broker-d=s3a://b/d/store")
    roots = [f"{tmp_path}/c", f"{tmp_path}/a", f"{tmp_path}/b", "s3a://bucket/x"]
    assert got == {**{default_store_id(r): r for r in roots}, "broker-d": "s3a://b/d/store"}
    assert list(got.values()) == [*roots, "s3a://b/d/store"]
    # a named root keeps its id (the one a single-store --store-id gave it); its first mention wins
    assert expand_stores("a=/x/store, b=/x/store, a=/y/store") == {"a": "/x/store", "b": "/x/store"}


def test_stores_refuses_options_that_name_one_store(tmp_path, capsys) -> None:
    code = run_cli(["audit", "--stores", str(tmp_path), "--report", str(tmp_path / "r"), "--rebuilt", str(tmp_path)])
    assert code == 2
    assert "--rebuilt and --store-id name one store" in capsys.readouterr().err
