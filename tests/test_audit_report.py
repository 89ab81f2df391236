"""jobs.report.audit_report: report.html never lets a name from the store become markup; the console summary's lines."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any

from jobs.report.audit_report import render_html
from jobs.report.console import console_summary
from storelib.findings import Finding, finding
from storelib.reports.report import AuditReport, AuditSummary, IndexCounts, LogCounts, QueueCounts, audit_summary

HOSTILE = '<script>alert("x")</script>&amp;'
IMG = "<img src=x onerror=alert(1)>"
#: every element report.html is made of: anything else in the parsed page came from the data
PAGE_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "h1",
    "h2",
    "p",
    "code",
    "span",
    "table",
    "tr",
    "th",
    "td",
}
PAGE_TAGS |= {"svg", "rect", "line", "text"}


def report(findings: list[Finding], exit_code: int, **run: Any) -> AuditReport:
    """An audit report.json with one divergent queue of a hostile topic and one repair."""
    counts = {"commitlog": LogCounts(7, 0, 4000, 1), "queues": QueueCounts(3, 2), "index": IndexCounts(2, 2, 9, 9, 9)}
    queue = {"topic": HOSTILE, "queue_id": 0, "status": "error", "kinds": [IMG], "live_entries": 5, "live_end": 5}
    queue |= {"rebuilt_entries": 6, "rebuilt_min": 0, "rebuilt_end": 6, "first_bad_queue_offset": 2, "bad_entries": 1}
    text = {
        "run": {
            "store": f"/stores/{HOSTILE}",
            "rebuilt": f"/rebuilt/{IMG}",
            "started_at": "2026-11-23T01:00:00+00:00",
            "seconds": 12.04,
            "segments": [
                {
                    "file": "00000000000000000000",
                    "start": 0,
                    "messages": 7,
                    "end_offset": 4000,
                    "first_store_timestamp": 1,
                }
            ],
            **run,
        },
        "summary": audit_summary(findings, exit_code, **counts).to_json(),
        "findings": [f.to_dict() for f in findings],
        "queues": [queue],
        "index_files": [],
        "repairs": [{"action": "replace", "file": f"consumequeue/{HOSTILE}/0/{0:020d}", "source": "x", "reason": IMG}],
    }
    return AuditReport.from_json(json.dumps(text))


def wrong_entry() -> Finding:
    return finding(
        "cq-wrong-entries",
        f"consumequeue/{HOSTILE}/0",
        f"1 entry of {HOSTILE} differs {IMG}",
        topic=HOSTILE,
        queue_id=0,
        queue_offset=2,
        commitlog_offset=1200,
        count=1,
        expected=HOSTILE,
        actual=IMG,
    )


def crc(offset: int) -> Finding:
    return finding("crc-mismatch", f"commitlog/{IMG}", f"BODYCRC {IMG}", commitlog_offset=offset)


class Page(HTMLParser):
    """What a browser builds from the page: its elements and its text."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.text: list[str] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        assert not any(name.startswith("on") for name, _ in attrs), (tag, attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_the_summary_counts_are_typed_in_report_json_objects() -> None:
    """report.json's summary.commitlog, queues and index: objects by field name, read back as the typed counts."""
    summary = report([crc(100)], 1).summary
    assert (summary.commitlog, summary.queues, summary.index) == (
        LogCounts(messages=7, min_offset=0, max_offset=4000, segments=1),
        QueueCounts(audited=3, ok=2),
        IndexCounts(live_files=2, rebuilt_files=2, keys_total=9, keys_checked=9, entries_checked=9),
    )
    written = summary.to_json()
    assert written["queues"] == {"audited": 3, "ok": 2}
    assert AuditSummary.from_json(written) == summary
    assert AuditSummary.from_json({"exit_code": 2}).commitlog is None  # the audit stopped before the stages


def test_render_html_shows_hostile_names_as_text_never_as_markup() -> None:
    page = render_html(report([wrong_entry(), crc(100)], 1))
    parsed = Page(page)
    assert not parsed.tags & {"script", "img", "iframe", "object"}
    text = "".join(parsed.text)
    # each name is shown as it is, as text: the store, the queue, the finding, expected/actual, the repair
    assert text.count(HOSTILE) >= 4 and text.count(IMG) >= 3
    assert "<script" not in page and "<img" not in page


def test_console_summary_lists_the_worst_fifteen_then_one_line() -> None:
    findings = [wrong_entry()] + [crc(100 + i) for i in range(16)]
    findings.append(finding("cq-expired-head", "consumequeue/T/0", "head expired", topic="T", queue_id=0))
    lines = console_summary(report(findings, 1), "/reports/run1").splitlines()
    first = lines.index(f"  ERROR   cq-wrong-entries: consumequeue/{HOSTILE}/0: 1 entry of {HOSTILE} differs {IMG}")
    assert lines[first + 1] == f"  WARNING crc-mismatch: commitlog/{IMG}: BODYCRC {IMG}"
    assert lines[first + 15] == "  ... 2 more in the report"  # 17 divergences; the info is not listed
    assert lines[0].startswith("VERDICT: ")  # the verdict comes first (storelib.reports.verdict)
    assert lines[-1] == (
        "audit: DIVERGENT: 1 error, 16 warnings, 1 info; 3 queues (2 ok), 2 index files, 12.0 s "
        "-> /reports/run1/report.html"
    )


def test_console_summary_of_a_clean_incremental_run_says_what_it_skipped() -> None:
    scope = {"note": "incremental since run r1", "skipped": ["3 commitlog segments below offset 3014656"]}
    history = {"table": "/tables/history", "run_id": "r2", "version": 7}
    lines = console_summary(report([], 0, scope=scope, history=history), None).splitlines()
    assert lines[0].startswith("VERDICT: ")
    assert lines[-4:] == [
        "  note: incremental since run r1",
        "  skipped 3 commitlog segments below offset 3014656",
        "  history: run r2 in /tables/history, version 7",
        "audit: clean: 0 errors, 0 warnings, 0 infos; 3 queues (2 ok), 2 index files, 12.0 s",
    ]
    failed = {"table": "/tables/history", "run_id": "r2", "error": "commit conflict"}
    assert console_summary(report([], 2, history=failed), None).splitlines()[-2:] == [
        "  history: run r2 in /tables/history, not written: commit conflict",
        "audit: COULD NOT AUDIT: 0 errors, 0 warnings, 0 infos; 3 queues (2 ok), 2 index files, 12.0 s",
    ]
