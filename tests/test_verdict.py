"""storelib.reports.verdict: the broker's outcome, one line per area, recover's command and plan — without Spark.

The crashed/ report (tests/data/crashed-4.9.8-report.json) is a real audit of a copy of the 4.9.8 sample's crashed/
store; the expected figures come from that fixture's DAMAGE.md (what the real broker did), not from the code.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from storelib.findings import Finding, finding
from storelib.reports.plan import Step, recover_plan
from storelib.reports.report import AuditReport
from storelib.reports.verdict import closing_line, human_bytes, plan_lines, plural, verdict

DATA = Path(__file__).parent / "data"
CRASHED_STORE = "/tmp/report-crashed"
BROKER_CONF = "/work/shared/fixtures/rocketmq-4.9.8-sample/broker.conf"
# DAMAGE.md: recovery stops at the first CRC failure, physical offset 1,965,519, keeping 6,836 of 11,967 messages
TRUNCATED_AT, MESSAGES_KEPT, MESSAGES = 1_965_519, 6_836, 11_967


def typed(report: dict[str, Any]) -> AuditReport:
    """A report.json as the verdict reads it."""
    return AuditReport.from_json(json.dumps(report))


def with_plan(report: dict[str, Any]) -> dict[str, Any]:
    """The report with recover's plan as the audit puts it there (no rebuilt queue the broker stops at)."""
    findings = [Finding.from_dict(f) for f in report["findings"]]
    repairs = [Step(r["action"], r["file"], r["reason"], r["source"]) for r in report["repairs"]]
    return dict(report, plan=recover_plan(findings, repairs, {}, truncate=False).to_dict())


def crashed() -> dict[str, Any]:
    """The saved crashed/ report without the verdict the audit computed (the tests compute it)."""
    report = json.loads((DATA / "crashed-4.9.8-report.json").read_text())
    report.pop("verdict")
    return report


def report_of(*findings: dict[str, Any], repairs: list[dict[str, Any]] = (), exit_code: int = 1) -> dict[str, Any]:
    """A minimal report.json around ``findings`` (dicts of storelib.findings.finding)."""
    return with_plan(
        {
            "run": {
                "store": "/data/store a",
                "rebuilt": "/tmp/w/rebuilt",
                "rebuilt_temporary": True,
                "broker_config": {},
            },
            "summary": {"exit_code": exit_code, "commitlog": {"min_offset": 0, "max_offset": 1000}},
            "findings": list(findings),
            "repairs": list(repairs),
        }
    )


def test_the_crashed_store_is_truncated_where_the_real_broker_truncated_it() -> None:
    v = verdict(typed(crashed()), MESSAGES - MESSAGES_KEPT)
    assert v["broker"] == "truncate"
    assert v["truncate"]["commitlog_offset"] == TRUNCATED_AT
    assert v["truncate"]["share"] == pytest.approx(0.43, abs=0.005)
    assert v["headline"] == (
        "Starting the broker now truncates the commitlog at offset 1,965,519: 1.4 MiB (43% of the log) "
        "and 5,131 messages after it are lost to consumers."
    )


def test_the_audit_counted_the_messages_the_truncation_loses() -> None:
    saved = json.loads((DATA / "crashed-4.9.8-report.json").read_text())
    assert saved["verdict"]["truncate"]["messages"] == MESSAGES - MESSAGES_KEPT
    assert saved["summary"]["commitlog"]["messages"] == MESSAGES


def test_one_line_per_damaged_area() -> None:
    lines = {p["area"]: p["text"] for p in verdict(typed(crashed()))["problems"]}
    assert list(lines) == ["commitlog", "ConsumeQueue", "IndexFile", "checkpoint and abort"]
    assert lines["ConsumeQueue"] == (
        "cq-wrong-entries: Audit-Log/0 at queue offset 517, 1 entry; "
        "cq-zeroed-entries: Metrics/0 at queue offset 1,000, 200 entries (recover fixes them)"
    )
    assert lines["commitlog"].startswith("recovery-would-truncate: commitlog offset 1,965,519; crc-mismatch ×2")
    assert lines["commitlog"].endswith("(recover fixes 1 of 3)")


def test_the_next_command_names_the_store_and_the_broker_config() -> None:
    advice = verdict(typed(crashed()))["recover"]
    assert advice["possible"] and advice["stop_broker_first"]
    assert advice["commands"] == [
        f"rmqstore recover --store {CRASHED_STORE} --broker-config {BROKER_CONF}",
        f"rmqstore recover --store {CRASHED_STORE} --broker-config {BROKER_CONF} --apply",
    ]
    assert advice["backup"] == f"{CRASHED_STORE}-rmqstore-backup-<UTC time>"


def test_each_step_names_what_it_fixes_and_the_checkpoint_averts_the_truncation() -> None:
    steps = {s["file"]: {r["kind"] for r in s["resolves"]} for s in verdict(typed(crashed()))["recover"]["steps"]}
    assert steps == {
        "consumequeue/Audit-Log/0/00000000000000008000": {"cq-wrong-entries"},
        "consumequeue/Metrics/0/00000000000000016000": {"cq-zeroed-entries"},
        "index/20261122015838886": {"index-file-differs", "index-header-inconsistent", "index-keys-not-found"},
        "checkpoint": {"recovery-would-truncate", "index-deleted-on-recovery"},
    }
    remains = {r["kind"]: r["count"] for r in verdict(typed(crashed()))["recover"]["remains"]}
    assert remains == {"abort-marker": 1, "crc-mismatch": 2}


def test_a_clean_store_starts_normally_and_needs_no_recover() -> None:
    v = verdict(typed(report_of(exit_code=0)))
    assert (v["broker"], v["headline"], v["problems"]) == ("start", "The broker would start normally.", [])
    assert v["recover"]["possible"] is False
    assert v["recover"]["why_not"] == "nothing for recover to change"


def test_a_torn_consume_queue_file_stops_the_broker_from_starting() -> None:
    torn = finding("cq-torn-file", "consumequeue/t/0/00000000000000000000", "7990 bytes", topic="t", queue_id=0)
    fix = {"action": "replace", "file": torn.file, "source": torn.file, "reason": "cq-torn-file"}
    v = verdict(typed(report_of(torn.to_dict(), repairs=[fix])))
    assert v["broker"] == "refuse"
    assert "refuses to start" in v["headline"]
    assert [s["file"] for s in v["recover"]["steps"]] == [torn.file, "checkpoint"]
    assert v["recover"]["commands"][0] == "rmqstore recover --store '/data/store a'"


def test_recover_is_not_offered_when_the_rebuilt_index_cannot_vouch_for_the_store() -> None:
    stale = finding("rebuilt-stale", "commitlog/00000000000000000000", "other records")
    v = verdict(typed(report_of(stale.to_dict(), exit_code=2)))
    assert v["broker"] == "unknown"
    assert v["recover"]["possible"] is False
    assert v["recover"]["why_not"].startswith("rebuild the index")


def test_a_remote_store_is_recovered_on_the_broker_host() -> None:
    report = report_of(finding("checkpoint-unreadable", "checkpoint", "missing").to_dict())
    report["run"]["store"] = "hdfs://nn/backups/broker-a"
    assert "local stores only" in verdict(typed(report))["recover"]["why_not"]


def test_words_and_sizes() -> None:
    assert [plural(1, "entry", "entries"), plural(2, "entry", "entries"), plural(1234, "message")] == [
        "1 entry",
        "2 entries",
        "1,234 messages",
    ]
    assert [human_bytes(53), human_bytes(1), human_bytes(131072), human_bytes(1_479_476), human_bytes(3 << 40)] == [
        "53 bytes",
        "1 byte",
        "128.0 KiB",
        "1.4 MiB",
        "3.0 TiB",
    ]


def test_recover_plan_lines_with_recovers_own_steps() -> None:
    report = crashed()
    steps = [
        {"action": "replace", "file": "consumequeue/Metrics/0/00000000000000016000", "reason": "cq-zeroed-entries"},
        {"action": "replace", "file": "checkpoint", "reason": "checkpoint for the rebuilt index"},
        {
            "action": "truncate",
            "file": "commitlog/00000000000003407872",
            "reason": "commitlog-torn-tail",
            "offset": 37123,
        },
    ]
    lines = plan_lines(typed(report), [Step(**s) for s in steps], backup="/backups/b1")
    assert lines[0] == "recover plan (3 steps; the broker must be stopped):"
    assert lines[1] == (
        "  1. replace consumequeue/Metrics/0/00000000000000016000: "
        "fixes cq-zeroed-entries (Metrics/0 at queue offset 1,000)"
    )
    assert lines[2].startswith("  2. replace checkpoint: fixes recovery-would-truncate (commitlog offset 1,965,519)")
    assert lines[3] == (
        "  3. zero commitlog/00000000000003407872 from file offset 37,123 to the end: fixes commitlog-torn-tail"
    )
    assert lines[4] == "  backup: every file above is copied first to /backups/b1"
    stays = [line.split(" — ")[0] for line in lines[5:]]
    assert "  stays: cq-wrong-entries" in stays and "  stays: crc-mismatch ×2" in stays


def test_closing_line_and_exit_code_agree() -> None:
    after = copy.deepcopy(crashed())
    after["findings"] = [f for f in after["findings"] if f["kind"] in ("abort-marker", "crc-mismatch")]
    line, code = closing_line(typed(after))
    assert (line, code) == (
        "recover: re-audit: 0 repairable findings left; left as is (recover does not change them): "
        "abort-marker, crc-mismatch ×2; exit code 0",
        0,
    )
    after["findings"].append(finding("cq-missing-tail", "consumequeue/t/0/0", "x", topic="t", queue_id=0).to_dict())
    assert closing_line(typed(after)) == (
        "recover: re-audit: 1 repairable finding left; left as is (recover does not change them): "
        "abort-marker, crc-mismatch ×2; exit code 1",
        1,
    )


def test_settings_from_an_unnamed_file_leave_a_placeholder_not_the_defaults() -> None:
    report = report_of(finding("checkpoint-unreadable", "checkpoint", "missing").to_dict())
    report["run"]["broker_config"] = {
        "path": None,
        "defaults": False,
        "checkCRCOnRecover": True,
        "mappedFileSizeCommitLog": 1 << 30,
    }
    assert (
        verdict(typed(report))["recover"]["commands"][0]
        == "rmqstore recover --store '/data/store a' --broker-config BROKER_CONF"
    )
    report["run"]["broker_config"]["defaults"] = True
    assert verdict(typed(report))["recover"]["commands"][0] == "rmqstore recover --store '/data/store a'"
    assert [s["file"] for s in verdict(typed(report))["recover"]["steps"]] == ["checkpoint"]


def test_a_restart_that_depends_on_an_unknown_release_is_said_so() -> None:
    report = report_of()
    start = {"crash": True, "rules": "5.0", "start": 0, "lost": 0, "stop": None, "dispatch_from": 0, "truncate_at": 0}
    report["run"]["restart"] = dict(start, start_offset=0)
    report["run"]["restart_by_release"] = {
        "5.2.0": dict(start, start_offset=65_536),
        "5.3.2": dict(start, start_offset=262_144),
    }
    headline = verdict(typed(report))["headline"]
    assert "depends on the release (5.2.0: offset 65,536; 5.3.2: offset 262,144): give --broker-version" in headline


def test_the_checkpoint_step_appears_only_where_it_averts_the_truncation() -> None:
    """recovery-would-truncate (recover's checkpoint starts recovery past the damage): the checkpoint step, which
    fixes it. recovery-would-truncate-after-recover (the damage lies where that recovery still walks): no step claims
    it, the broker's truncation is still the headline, and it stays."""
    where = {"file": "commitlog/00000000000000000000", "commitlog_offset": 700, "count": 300}
    fixed = verdict(typed(report_of(finding("recovery-would-truncate", message="cut", **where).to_dict())))
    assert [(s["file"], [r["kind"] for r in s["resolves"]]) for s in fixed["recover"]["steps"]] == [
        ("checkpoint", ["recovery-would-truncate"])
    ]
    unfixed = finding("recovery-would-truncate-after-recover", message="cut", **where)
    v = verdict(typed(report_of(unfixed.to_dict())))
    assert v["broker"] == "truncate" and v["truncate"]["commitlog_offset"] == 700
    assert v["recover"]["possible"] is False and v["recover"]["why_not"] == "nothing for recover to change"
    assert [r["kind"] for r in v["recover"]["remains"]] == ["recovery-would-truncate-after-recover"]
    assert recover_plan([unfixed], [], {}, truncate=False).steps == ()


def test_damaged_records_get_the_salvage_command_beside_recover_s() -> None:
    hole = finding("damaged-records", "commitlog/00000000000000000000", "zeros", commitlog_offset=700)
    advice = verdict(typed(report_of(hole.to_dict())))["recover"]
    assert advice["salvage"] == [
        "rmqstore recover --store '/data/store a' --salvage",
        "rmqstore recover --store '/data/store a' --salvage --apply",
    ]
    torn = finding("commitlog-torn-tail", "commitlog/00000000000000000000", "torn", file_offset=700)
    assert verdict(typed(report_of(torn.to_dict())))["recover"]["salvage"] == []  # nothing it rewrites


def test_the_rescue_that_loses_the_fewest_sound_messages_leads_with_what_each_costs() -> None:
    """A hole the broker's recovery truncates at, 81 sound messages after it, 6 damaged units: salvage loses none
    and leads (6 tombstones); recover, whose checkpoint does not avert the truncation, and the broker alone lose
    the 81. Without a hole to salvage, recover leads."""
    from jobs.report.console import verdict_lines

    hole = finding("damaged-records", "commitlog/00000000000000000000", "zeros", commitlog_offset=700, count=300)
    units = finding("cq-damaged-entries", "consumequeue/T/0", "units", topic="T", queue_id=0, count=6)
    cut = finding(
        "recovery-would-truncate-after-recover",
        "commitlog/00000000000000000000",
        "cut",
        commitlog_offset=700,
        count=300,
    )
    report = typed(report_of(hole.to_dict(), units.to_dict(), cut.to_dict()))
    v = verdict(report, 81)
    assert v["rescues"] == [
        {"rescue": "salvage", "sound_messages_lost": 0, "tombstones": 6},
        {"rescue": "recover", "sound_messages_lost": 81},
        {"rescue": "alone", "sound_messages_lost": 81},
    ]
    lines = verdict_lines(dataclasses.replace(report, verdict=v))
    first = next(i for i, line in enumerate(lines) if line.startswith(("SALVAGE", "NEXT")))
    assert lines[first].startswith("SALVAGE") and "loses no sound message; 6 damaged messages" in lines[first]
    assert any("loses 81 sound messages" in line for line in lines[first + 3 :])
    plain = typed(report_of(cut.to_dict()))
    assert [r["rescue"] for r in verdict(plain, 81)["rescues"]] == ["recover", "alone"]


def test_a_record_failing_its_crc32_property_is_salvaged_once_as_a_bodycrc_mismatch_is() -> None:
    """A __CRC32# mismatch (the broker's recovery checks it only with forceVerifyPropCRC and serves the record as
    sound) is offered to salvage as a BODYCRC mismatch is; a record failing both is one tombstone, not two."""
    cl = "commitlog/00000000000000000000"
    both = [finding(k, cl, "crc", commitlog_offset=700) for k in ("crc-mismatch", "crc-property-mismatch")]
    alone = finding("crc-property-mismatch", cl, "crc", commitlog_offset=900)
    v = verdict(typed(report_of(alone.to_dict())))
    assert v["recover"]["salvage"][1].endswith(" --salvage --apply")
    assert v["rescues"][0] == {"rescue": "salvage", "sound_messages_lost": 0, "tombstones": 1}
    v = verdict(typed(report_of(*(f.to_dict() for f in [*both, alone]))))
    assert v["rescues"][0] == {"rescue": "salvage", "sound_messages_lost": 0, "tombstones": 2}


def test_salvage_is_not_offered_where_it_would_refuse_and_the_verdict_says_why() -> None:
    """Units of RMQ_SYS_TRANS_HALF_TOPIC point into the damaged records: salvage refuses (no tombstone of the
    broker's own state), so the verdict names that queue instead of offering a rescue that loses nothing."""
    from jobs.report.console import verdict_lines

    hole = finding("damaged-records", "commitlog/00000000000000000000", "zeros", commitlog_offset=700, count=300)
    half = finding(
        "cq-damaged-entries",
        "consumequeue/RMQ_SYS_TRANS_HALF_TOPIC/0",
        "units",
        topic="RMQ_SYS_TRANS_HALF_TOPIC",
        queue_id=0,
        queue_offset=41,
        count=1,
    )
    report = typed(report_of(hole.to_dict(), half.to_dict()))
    v = verdict(report)
    assert v["recover"]["salvage"] == [] and [r["rescue"] for r in v["rescues"]] == ["recover", "alone"]
    said = "RMQ_SYS_TRANS_HALF_TOPIC/0 queue offset 41: a damaged record of a topic whose records hold the broker's"
    assert v["recover"]["salvage_refused"].startswith(said)
    assert f"SALVAGE refused: {said}" in "\n".join(verdict_lines(dataclasses.replace(report, verdict=v)))


def test_salvage_is_not_offered_where_a_batchconsumequeue_unit_points_into_damage() -> None:
    """A BatchConsumeQueue unit stands for a batch's messages; salvage builds no batch tombstone and refuses, so the
    verdict names that unit instead of offering salvage."""
    hole = finding("damaged-records", "commitlog/00000000000000000000", "zeros", commitlog_offset=700, count=300)
    where = {"topic": "TopicBatchCQ", "queue_id": 1, "queue_offset": 125, "count": 1}
    batch = finding("cq-damaged-entries", "batchconsumequeue/TopicBatchCQ/1/00000000000000000000", "units", **where)
    v = verdict(typed(report_of(hole.to_dict(), batch.to_dict())))
    assert v["recover"]["salvage"] == []
    assert v["recover"]["salvage_refused"] == (
        "TopicBatchCQ/1 queue offset 125: a BatchConsumeQueue unit points into damaged records; salvage builds no "
        "batch tombstone"
    )
