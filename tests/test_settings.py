"""One resolution of settings for every verb that reads a store: ``--broker-config`` and ``--broker-version``
each change what inspect, rebuild, audit and recover do, and a store whose release its clues cannot tell is
never given guessed rules (the verb stops, writes nothing, and prints the commands that name the release)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from storelib.broker.config import BrokerConfig
from storelib.synthetic.generator import generate_store
from storelib.synthetic.spec import GeneratorSpec
from tests.storecopy import rmqstore_main, tree_digest

CFG = BrokerConfig(mappedFileSizeCommitLog=1 << 16, mappedFileSizeConsumeQueue=400, maxHashSlotNum=97, maxIndexNum=400)
CONF = "".join(
    f"{k}={getattr(CFG, k)}\n"
    for k in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum")
)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A generated store of tagged messages (4.9 rules: no ``topic#T#<TAGS>`` keys) and its broker.conf."""
    root = tmp_path_factory.mktemp("settings")
    generate_store(root / "store", GeneratorSpec(messages=400, topics=2, queues_per_topic=2, seed=5), CFG)
    (root / "broker.conf").write_text(CONF)
    (root / "other.conf").write_text(CONF.replace("mappedFileSizeConsumeQueue=400", "mappedFileSizeConsumeQueue=800"))
    return root


def copy(store: Path, tmp_path: Path, *lost: str) -> Path:
    out = tmp_path / "store"
    shutil.copytree(store / "store", out)
    for name in lost:
        shutil.rmtree(out / name)
    return out


def index_bytes(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((root / "index").iterdir())]


def test_inspect_reports_the_rules_and_settings_it_was_given(store: Path, capsys) -> None:
    conf = ["--broker-config", str(store / "broker.conf")]
    assert rmqstore_main(["inspect", str(store / "store"), *conf, "--json"]) == 0
    detected = json.loads(capsys.readouterr().out)
    assert (detected["broker_rules"]["source"], detected["broker_rules"]["name"]) == ("detected", "4.9.1")
    # read as a 5.5.0 store, the generated store (no config/delayOffset.json beside delivered delay-level messages)
    # is one whose broker would deliver those messages again: a problem, so exit 1
    assert rmqstore_main(["inspect", str(store / "store"), *conf, "--json", "--broker-version", "5.5.0"]) == 1
    given = json.loads(capsys.readouterr().out)
    assert any("schedule-offsets-missing" in p for p in given["problems"])
    assert (given["broker_rules"]["source"], given["broker_rules"]["version"]) == ("--broker-version", "5.5.0")
    rmqstore_main(["inspect", str(store / "store"), "--broker-config", str(store / "other.conf"), "--json"])
    assert json.loads(capsys.readouterr().out)["config"]["mappedFileSizeConsumeQueue"] == 800
    assert rmqstore_main(["inspect", str(store / "store"), *conf]) == 0
    assert "broker rules 4.9.1 (detected, releases 4.9.1 up to 5.2.0; verified by" in capsys.readouterr().out


def test_rebuild_writes_what_each_flag_says(store: Path, tmp_path: Path, capsys) -> None:
    conf = ["--store", str(store / "store"), "--broker-config", str(store / "broker.conf")]
    assert rmqstore_main(["rebuild", *conf, "--out", str(tmp_path / "a")]) == 0
    assert "broker rules 4.9.1 (detected" in capsys.readouterr().err
    assert rmqstore_main(["rebuild", *conf, "--out", str(tmp_path / "b"), "--broker-version", "5.5.0"]) == 0
    assert "broker rules 5.5 (--broker-version; verified by the 5.5.0 broker's files)" in capsys.readouterr().err
    assert index_bytes(tmp_path / "a") == index_bytes(store / "store")
    assert index_bytes(tmp_path / "b") != index_bytes(tmp_path / "a")  # topic#T#<TAGS> keys
    other = ["--store", str(store / "store"), "--broker-config", str(store / "other.conf")]
    assert rmqstore_main(["rebuild", *other, "--out", str(tmp_path / "c")]) == 0
    sizes = {p.stat().st_size for p in (tmp_path / "c" / "consumequeue").rglob("0000*")}
    assert sizes == {800}


def test_audit_judges_by_the_given_release(store: Path, tmp_path: Path, capsys) -> None:
    conf = ["--store", str(store / "store"), "--broker-config", str(store / "broker.conf")]
    assert rmqstore_main(["audit", *conf, "--report", str(tmp_path / "r1")]) == 0
    assert rmqstore_main(["audit", *conf, "--report", str(tmp_path / "r2"), "--broker-version", "5.5.0"]) == 1
    report = json.loads((tmp_path / "r2" / "report.json").read_text())
    assert report["run"]["broker_rules"]["version"] == "5.5.0"
    assert "index-keys-not-found" in {f["kind"] for f in report["findings"]}  # the topic#T#<TAGS> keys
    assert report["verdict"]["recover"]["commands"][0].endswith(" --broker-version 5.5.0")
    other = ["--store", str(store / "store"), "--broker-config", str(store / "other.conf")]
    assert rmqstore_main(["audit", *other, "--report", str(tmp_path / "r3")]) == 1  # the live files are 400 bytes


def test_recover_refuses_only_where_the_releases_allowed_differ(v5_fixture: Path, tmp_path: Path, capsys) -> None:
    """The real 5.5.0 broker's sample store with index/ and config/ lost allows 5.2.0 or later: 5.2 ... 5.3.x write
    no tag keys: recover refuses, naming one release of each, and leaves the store as it was. With config/ back,
    5.4.0 or later ran last, but its first records may be an older release's (before an in-place upgrade): still
    refused, saying so; with --broker-version 5.5.0 the broker's own IndexFiles are written."""
    lost = tmp_path / "store"
    shutil.copytree(v5_fixture / "clean", lost)
    shutil.rmtree(lost / "index")
    before = tree_digest(lost)
    conf = ["--store", str(lost), "--broker-config", str(v5_fixture / "broker.conf"), "--apply"]
    conf += ["--backup-dir", str(tmp_path / "backup")]
    shutil.rmtree(lost / "config")
    before = tree_digest(lost)
    assert rmqstore_main(["recover", *conf]) == 2
    err = capsys.readouterr().err
    assert "cannot tell which broker release wrote it" in err and "topic#T#<TAGS>" in err
    assert f"rmqstore recover {' '.join(conf)} --broker-version 5.2.0" in err
    assert f"rmqstore recover {' '.join(conf)} --broker-version 5.4.0" in err
    assert tree_digest(lost) == before and not (tmp_path / "backup").exists()
    shutil.copytree(v5_fixture / "clean" / "config", lost / "config")
    before = tree_digest(lost)
    assert rmqstore_main(["recover", *conf]) == 2
    err = capsys.readouterr().err
    assert "5.4.0 or later for the release that ran last but before 4.9.1 or 5.2.0 or later for its first" in err
    assert tree_digest(lost) == before and not (tmp_path / "backup").exists()
    assert rmqstore_main(["recover", *conf, "--broker-version", "5.5.0"]) == 0
    assert index_bytes(lost) == index_bytes(v5_fixture / "clean")


def test_recover_writes_the_given_release_s_index(store: Path, tmp_path: Path) -> None:
    lost = copy(store, tmp_path, "index")
    conf = ["--store", str(lost), "--broker-config", str(store / "broker.conf"), "--apply"]
    assert rmqstore_main(["recover", *conf, "--backup-dir", str(tmp_path / "a")]) == 0
    assert index_bytes(lost) == index_bytes(store / "store")  # 4.9 … 5.1.2 index these messages alike
    shutil.rmtree(lost / "index")
    assert rmqstore_main(["recover", *conf, "--broker-version", "5.5.0", "--backup-dir", str(tmp_path / "b")]) == 0
    written = index_bytes(lost)
    assert written and written != index_bytes(store / "store")


def test_generate_writes_4_9_stores_only_and_the_given_settings(store: Path, tmp_path: Path, capsys) -> None:
    base = ["generate", "--messages", "50", "--seed", "1"]
    assert rmqstore_main([*base, "--out", str(tmp_path / "a"), "--broker-version", "5.5.0"]) == 2
    assert "writes 4.9.x stores" in capsys.readouterr().err and not (tmp_path / "a").exists()
    assert rmqstore_main([*base, "--out", str(tmp_path / "b"), "--broker-version", "4.9.8"]) == 0
    conf = ["--broker-config", str(store / "other.conf")]
    assert rmqstore_main([*base, "--out", str(tmp_path / "c"), *conf]) == 0
    assert {p.stat().st_size for p in (tmp_path / "c" / "consumequeue").glob("*/*/0*")} == {800}
