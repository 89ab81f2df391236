"""One plan: ``rmqstore audit``'s report.json ``plan`` is what ``rmqstore recover`` prints in its dry run and what
``--apply`` then changes (its backup manifest), step for step, on the suite's damaged stores; the dry run on every
store the real brokers wrote for the suite (every harness variant of each version, ``broker``);
storelib.reports.plan alone."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from storelib.errors import EXIT_FINDINGS, EXIT_OK
from storelib.findings import KINDS, finding
from storelib.reports.plan import Plan, Step, recover_plan
from tests.broker.fixtures import release_param
from tests.broker.harness import CORE_VERSIONS, VARIANTS, VERSIONS
from tests.storecopy import rmqstore_main

STEP_LINE = re.compile(r"^  \d+\. (?:(replace|create|delete) (\S+):|zero (\S+) from file offset)")


def printed_steps(out: str) -> list[tuple[str, str]]:
    """(action, file) of every step line of recover's printed plan."""
    found = [m.groups() for line in out.splitlines() if (m := STEP_LINE.match(line))]
    return [(a, f) if a else ("truncate", t) for a, f, t in found]


def zero_one_cq_file(store: Path) -> None:
    """A ConsumeQueue file of the store zeroed whole (a lost page), the first one found."""
    victim = next(p for p in sorted((store / "consumequeue").glob("*/*/0*")) if p.is_file() and p.stat().st_size)
    victim.write_bytes(bytes(victim.stat().st_size))


def damaged_stores(fixture_dir: Path, v5_fixture: Path) -> dict[str, tuple[Path, Path, list[str], Callable]]:
    return {
        "4.9.8 crashed": (fixture_dir / "crashed", fixture_dir / "broker.conf", [], lambda s: None),
        "4.9.8 zeroed queue file": (fixture_dir / "clean", fixture_dir / "broker.conf", [], zero_one_cq_file),
        "5.5.0 index lost": (
            v5_fixture / "clean",
            v5_fixture / "broker.conf",
            ["--broker-version", "5.5.0"],
            lambda s: shutil.rmtree(s / "index"),
        ),
        "5.5.0 consumequeue lost": (
            v5_fixture / "clean",
            v5_fixture / "broker.conf",
            ["--broker-version", "5.5.0"],
            lambda s: [shutil.rmtree(s / d) for d in ("consumequeue", "batchconsumequeue")],
        ),
    }


@pytest.mark.parametrize(
    "case", ["4.9.8 crashed", "4.9.8 zeroed queue file", "5.5.0 index lost", "5.5.0 consumequeue lost"]
)
def test_the_audit_s_plan_is_recover_s_dry_run_and_its_actions(
    case: str, fixture_dir: Path, v5_fixture: Path, tmp_path: Path, capsys
) -> None:
    source, conf, flags, damage = damaged_stores(fixture_dir, v5_fixture)[case]
    store = tmp_path / "store"
    shutil.copytree(source, store)
    damage(store)
    common = ["--store", str(store), "--broker-config", str(conf), *flags]
    rmqstore_main(["audit", *common, "--report", str(tmp_path / "audit")])
    report = json.loads((tmp_path / "audit" / "report.json").read_text())
    advised, (dry, _) = report["plan"], report["verdict"]["recover"]["commands"]
    assert advised["steps"], "every case is damage recover repairs"
    capsys.readouterr()
    assert rmqstore_main(shlex.split(dry)[1:]) == 0  # the command the verdict prints, as an operator runs it
    assert printed_steps(capsys.readouterr().out) == [(s["action"], s["file"]) for s in advised["steps"]]
    backup = tmp_path / "backup"
    assert rmqstore_main([*shlex.split(dry)[1:], "--apply", "--backup-dir", str(backup)]) == 0
    manifest = json.loads((backup / "manifest.json").read_text())
    assert [(s["action"], s["file"]) for s in manifest["steps"]] == [(s["action"], s["file"]) for s in advised["steps"]]


#: every store variant of the harness, for every version it is made for (the default stores of releases outside the
#: core three: test_release_matrix); variants of those releases run under make test-matrix
HARNESS_STORES = [
    release_param(v, variant)
    for variant, (_, versions) in VARIANTS.items()
    for v in VERSIONS
    if v in versions and (v in CORE_VERSIONS or variant != "default")
]


@pytest.mark.parametrize(("version", "variant"), HARNESS_STORES)
def test_the_audit_s_plan_is_recover_s_dry_run_on_every_harness_store(
    broker_store, tmp_path: Path, capsys, version: str, variant: str
) -> None:
    """Every store the real brokers wrote (as it is: a crash stays crashed), as a nightly job leaves it for an
    operator: rebuilt once, audited against that rebuild, whose verdict's dry run (reusing it) is then run: the
    audit's plan is the steps recover prints, with what recover says stays; nothing is changed."""
    store = broker_store(version, variant)
    report_dir, before = tmp_path / f"{version}-{variant}", _files(store.root)
    argv = ["--store", str(store.root), "--broker-config", str(store.broker_conf), "--broker-version", version]
    rebuilt = report_dir / "rebuilt"
    rmqstore_main(["rebuild", *argv, "--out", str(rebuilt)])
    reuse = ["--rebuilt", str(rebuilt)] if (rebuilt / "rebuild.json").is_file() else []
    rmqstore_main(["audit", *argv, *reuse, "--report", str(report_dir / "report")])
    report = json.loads((report_dir / "report" / "report.json").read_text())
    advice = report["verdict"]["recover"]
    dry = shlex.split(advice["commands"][0])[1:] if advice["possible"] else ["recover", *argv, *reuse]
    capsys.readouterr()
    code = rmqstore_main([*dry, "--work-dir", str(tmp_path / "work")])
    out, err = capsys.readouterr()
    assert _files(store.root) == before
    if any(KINDS[f["kind"]].blocks_recover for f in report["findings"]):  # refused, saying why
        assert (code, "cannot vouch" in err) == (EXIT_FINDINGS, True), (version, variant)
        return
    assert code == EXIT_OK, (version, variant)
    steps = [(s["action"], s["file"]) for s in report["plan"]["steps"]]
    assert (version, variant, printed_steps(out)) == (version, variant, steps)
    assert [n for n in report["plan"]["notes"] if n not in out] == [], (version, variant)
    assert bool(steps) == advice["possible"], (version, variant)


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file of a store with its size and modification time (a dry run leaves them as they are)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


# --- storelib.reports.plan.recover_plan ----------------------------------------------------------------------------

CQ = "consumequeue/T/0/00000000000000000000"
REPAIRS = [
    Step("replace", CQ, "cq-zeroed-entries", CQ),
    Step("create", "index/20260101000000000", "x", "index/20260101000000000"),
]
TORN = finding("commitlog-torn-tail", "commitlog/00000000000000000000", "torn", file_offset=700)


def test_the_checkpoint_comes_last_whenever_a_file_changes() -> None:
    plan = recover_plan([], REPAIRS, {}, truncate=False)
    assert [s.file for s in plan.steps] == [CQ, "index/20260101000000000", "checkpoint"]
    assert recover_plan([], [], {}, truncate=False).steps == ()
    for kind in (name for name, kind in KINDS.items() if kind.by_checkpoint):
        alone = recover_plan([finding(kind, "checkpoint", "x")], [], {}, truncate=False)
        assert alone.steps == (Step("replace", "checkpoint", "checkpoint for the rebuilt index"),)


def test_a_queue_the_broker_would_stop_reading_is_left_alone_and_said() -> None:
    plan = recover_plan([], REPAIRS, {"consumequeue/T/0": 7}, truncate=False)
    assert [s.file for s in plan.steps] == ["index/20260101000000000", "checkpoint"]
    assert plan.notes[0].startswith("consumequeue/T/0: left alone: the rebuilt queue has no entry for queue offset 7")


def test_the_torn_tail_is_truncated_only_when_asked() -> None:
    left = recover_plan([TORN], [], {}, truncate=False)
    assert left.steps == () and "left alone (--truncate-torn-tail)" in left.notes[0]
    cut = recover_plan([TORN], [], {}, truncate=True)
    assert cut.steps[0] == Step("truncate", TORN.file, "commitlog-torn-tail", offset=700)
    assert cut.steps[-1].file == "checkpoint"


def test_a_plan_survives_report_json() -> None:
    plan = recover_plan([TORN], REPAIRS, {"consumequeue/U/1": 3}, truncate=True)
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


@pytest.mark.broker
@pytest.mark.parametrize(("back", "fixed"), [(3, True), (1, False)])
def test_the_checkpoint_step_claims_a_truncation_only_where_the_real_broker_then_keeps_the_log(
    tmp_path: Path, back: int, fixed: bool
) -> None:
    """A copy of the real 5.5.0 broker's kill -9 store (abort present), one body byte flipped in a record of the
    ``back``-th last segment holding messages. Its crash recovery would truncate there. Three segments from the end,
    recover's new checkpoint starts that recovery past it: the audit says recovery-would-truncate, the plan's
    checkpoint step claims it, and after the verdict's recover the real broker serves every message it served from
    the undamaged store. In the last segment the new start is that segment: the audit says
    recovery-would-truncate-after-recover, no step claims it, and after recover the broker still serves no message
    from the damaged record on."""
    from tests.broker.fixtures import harness_store
    from tests.broker.harness import read_jsonl, served
    from tests.builders import scan

    built = harness_store("5.5.0", "kill9")
    copy = tmp_path / "broker" / "store"
    shutil.copytree(built / "store", copy, ignore=shutil.ignore_patterns("lock"))
    shutil.copyfile(built / "broker.conf", copy.parent / "broker.conf")
    segments = sorted((copy / "commitlog").iterdir())
    seg = [s for s in segments if scan(s.read_bytes(), base=int(s.name)).offsets()][-back]
    data = bytearray(seg.read_bytes())
    rows = scan(bytes(data), base=int(seg.name)).rows()
    victim = next(r for r in rows[len(rows) // 2 :] if r["body_length"] > 0)
    flags, at = victim["sys_flag"], victim["physical_offset"] - int(seg.name)
    body = at + 4 * 4 + 4 + 8 + 8 + 4 + 8 + (20 if flags & 0x10 else 8) + 8 + (20 if flags & 0x20 else 8) + 4 + 8 + 4
    data[body] ^= 0xFF
    seg.write_bytes(bytes(data))
    damage = victim["physical_offset"]

    argv = ["--store", str(copy), "--broker-config", str(copy.parent / "broker.conf"), "--broker-version", "5.5.0"]
    assert rmqstore_main(["audit", *argv, "--report", str(tmp_path / "report")]) == EXIT_FINDINGS
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    (cut,) = [f for f in report["findings"] if KINDS[f["kind"]].truncation]
    kind = "recovery-would-truncate" if fixed else "recovery-would-truncate-after-recover"
    assert (cut["kind"], cut["commitlog_offset"]) == (kind, damage)
    claimed = {r["kind"] for s in report["verdict"]["recover"]["steps"] for r in s["resolves"]}
    assert (kind in claimed) == fixed

    apply = shlex.split(report["verdict"]["recover"]["commands"][1])[1:]
    code = rmqstore_main([*apply, "--backup-dir", str(tmp_path / "backup"), "--work-dir", str(tmp_path / "work")])
    assert code == EXIT_OK  # its re-audit: nothing repairable left (the truncation after recover is not)
    assert (tmp_path / "backup").is_dir()

    def messages(lines: list[dict]) -> set[tuple[str, int, int, int]]:
        return {
            (m["topic"], m["queueId"], m["queueOffset"], m["commitLogOffset"]) for m in lines if m["kind"] == "message"
        }

    alone, after = messages(read_jsonl(built / "served.jsonl")), messages(served("5.5.0", copy))
    assert any(m[3] >= damage for m in alone)
    if fixed:
        assert after == alone
    else:
        assert not any(m[3] >= damage for m in after)
        assert after == {m for m in alone if m[3] < damage}
