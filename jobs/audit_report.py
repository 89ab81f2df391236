"""The audit's outputs: report.json, a self-contained report.html (inline CSS and SVG), a console summary."""

from __future__ import annotations

import html
import json
from typing import Any

from storelib.findings import KINDS
from udfs.fs import join, resolve, write_file

COLORS = {"error": "#c62828", "warning": "#ef8f00", "info": "#1e88e5", "ok": "#2e7d32"}
CHART_WIDTH = 900
QUEUE_COLUMNS = [
    "topic",
    "queueId",
    "status",
    "kinds",
    "live entries",
    "rebuilt entries",
    "first bad queue offset",
    "bad entries",
]
FINDING_COLUMNS = ["severity", "kind", "file", "queue / commitlog / file offset", "count", "expected", "actual", "what"]
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}.num{text-align:right}.sev{color:#fff;padding:1px 6px;border-radius:3px;font-size:12px}
code{font-size:12px}.muted{color:#777}
"""


def write_reports(report_dir: str, report: dict[str, Any]) -> None:
    """DIR/report.json and DIR/report.html (local, HDFS or S3)."""
    fs, root = resolve(report_dir)
    write_file(fs, join(root, "report.json"), (json.dumps(report, indent=1, sort_keys=True) + "\n").encode())
    write_file(fs, join(root, "report.html"), render_html(report).encode())


def scope_lines(report: dict[str, Any]) -> list[str]:
    """What the run did not audit (``--since-last``), and where its history went (``--history``)."""
    run = report["run"]
    scope = run.get("scope") or {}
    lines = [f"note: {scope['note']}"] if scope.get("note") else []
    lines += [f"skipped {what}" for what in scope.get("skipped", [])]
    history = run.get("history")
    if history:
        lines.append(
            f"history: run {history['run_id']} in {history['table']}, "
            + (f"version {history['version']}" if "version" in history else f"not written: {history['error']}")
        )
    return lines


def console_summary(report: dict[str, Any], report_dir: str | None) -> str:
    """A few lines: the worst findings, what was skipped, then one summary line."""
    s = report["summary"]
    lines = [f"  {line}" for line in scope_lines(report)]
    for f in [f for f in report["findings"] if f["severity"] != "info"][:15]:
        where = f["file"] + (f" @ queue offset {f['queue_offset']}" if f["queue_offset"] is not None else "")
        lines.append(f"  {f['severity'].upper():7} {f['kind']}: {where}: {f['message']}")
    hidden = sum(1 for f in report["findings"] if f["severity"] != "info") - 15
    if hidden > 0:
        lines.append(f"  ... {hidden} more in the report")
    verdict = {0: "clean", 1: "DIVERGENT", 2: "COULD NOT AUDIT"}[s["exit_code"]]
    queues = s.get("queues", {})
    lines.append(
        f"audit: {verdict}: {s['error']} errors, {s['warning']} warnings, {s['info']} infos; "
        f"{queues.get('audited', 0)} queues ({queues.get('ok', 0)} ok), "
        f"{s.get('index', {}).get('live_files', 0)} index files, "
        f"{report['run']['seconds']:.1f} s" + (f" -> {report_dir}/report.html" if report_dir else "")
    )
    return "\n".join(lines)


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _badge(severity: str) -> str:
    return f'<span class="sev" style="background:{COLORS.get(severity, "#555")}">{_e(severity)}</span>'


def commitlog_chart(report: dict[str, Any]) -> str:
    """Segments along the commitlog, with a tick for every finding that names a commitlog offset."""
    summary = report["summary"].get("commitlog", {})
    lo, hi = summary.get("min_offset", 0), summary.get("max_offset", 0)
    segments = report["run"].get("segments", [])
    if segments:
        hi = max(hi, segments[-1]["start"] + 1)
    span = max(1, hi - lo)

    def x(offset: int) -> float:
        return 10 + (CHART_WIDTH - 20) * min(max(offset - lo, 0), span) / span

    parts = [f'<rect x="10" y="20" width="{CHART_WIDTH - 20}" height="24" fill="#e8f5e9" stroke="#9e9e9e"/>']
    for s in segments:
        parts.append(f'<line x1="{x(s["start"]):.1f}" y1="20" x2="{x(s["start"]):.1f}" y2="44" stroke="#bdbdbd"/>')
    for f in report["findings"]:
        if f["commitlog_offset"] is None or f["kind"].startswith("cq-") or f["kind"].startswith("index-"):
            continue
        at = x(f["commitlog_offset"])
        parts.append(
            f'<line x1="{at:.1f}" y1="14" x2="{at:.1f}" y2="50" stroke="{COLORS[f["severity"]]}" stroke-width="3">'
            f"<title>{_e(f['kind'])} @ {f['commitlog_offset']}: {_e(f['message'])}</title></line>"
        )
    parts.append(f'<text x="10" y="66" font-size="11">{lo}</text>')
    parts.append(f'<text x="{CHART_WIDTH - 10}" y="66" font-size="11" text-anchor="end">{hi}</text>')
    return f'<svg width="{CHART_WIDTH}" height="72" role="img" aria-label="commitlog">{"".join(parts)}</svg>'


def queue_chart(report: dict[str, Any]) -> str:
    """One bar per divergent queue (its queue offsets, full width), red where its entries diverge."""
    rows = [q for q in report["queues"] if q["status"] not in ("ok", "info")]
    by_queue: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for f in report["findings"]:
        if f["topic"] is not None and f["queue_offset"] is not None:
            by_queue.setdefault((f["topic"], f["queue_id"]), []).append(f)
    if not rows:
        return '<p class="muted">No queue diverges.</p>'
    label_w, height = 260, 18
    bar_w = CHART_WIDTH - label_w - 10
    parts = []
    for i, q in enumerate(rows):
        y = 4 + i * (height + 6)
        end = max(q["rebuilt_end"] or 0, q["live_end"] or 0, 1)
        parts.append(f'<text x="0" y="{y + 13}" font-size="12">{_e(q["topic"])}/{q["queue_id"]}</text>')
        parts.append(f'<rect x="{label_w}" y="{y}" width="{bar_w}" height="{height}" fill="#e8f5e9" stroke="#9e9e9e"/>')
        for f in by_queue.get((q["topic"], q["queue_id"]), []):
            x0 = label_w + bar_w * min(f["queue_offset"], end) / end
            w = max(2.0, bar_w * (f["count"] or 1) / end)
            parts.append(
                f'<rect x="{x0:.1f}" y="{y}" width="{min(w, label_w + bar_w - x0):.1f}" height="{height}" '
                f'fill="{COLORS[f["severity"]]}"><title>{_e(f["kind"])}: queue offset {f["queue_offset"]}, '
                f"{f['count']} entries</title></rect>"
            )
        parts.append(f'<text x="{label_w + bar_w + 4}" y="{y + 13}" font-size="11">{end}</text>')
    h = 8 + len(rows) * (height + 6)
    return f'<svg width="{CHART_WIDTH + 60}" height="{h}" role="img" aria-label="queues">{"".join(parts)}</svg>'


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(report: dict[str, Any]) -> str:
    """The whole report as one HTML page; every value from the store is escaped."""
    s, run = report["summary"], report["run"]
    verdict = {0: ("clean", "ok"), 1: ("divergences found", "error"), 2: ("could not audit", "error")}[s["exit_code"]]
    queue_rows = [
        [
            _e(q["topic"]),
            str(q["queue_id"]),
            _badge(q["status"]),
            _e(", ".join(q["kinds"])),
            f'<span class="num">{q["live_entries"]}</span>',
            f'<span class="num">{q["rebuilt_entries"]}</span>',
            _e(q["first_bad_queue_offset"]),
            f'<span class="num">{q["bad_entries"]}</span>',
        ]
        for q in report["queues"]
    ]
    finding_rows = [
        [
            _badge(f["severity"]),
            f"<code>{_e(f['kind'])}</code>",
            f"<code>{_e(f['file'])}</code>",
            _e(" / ".join(str(f[k]) for k in ("queue_offset", "commitlog_offset", "file_offset") if f[k] is not None)),
            _e(f["count"]),
            _e(f["expected"]),
            _e(f["actual"]),
            _e(f["message"]),
        ]
        for f in report["findings"]
    ]
    repair_rows = [[_e(r["action"]), f"<code>{_e(r['file'])}</code>", _e(r["reason"])] for r in report["repairs"]]
    used = sorted({f["kind"] for f in report["findings"]})
    legend = [[f"<code>{_e(k)}</code>", _badge(KINDS[k].severity), _e(KINDS[k].meaning)] for k in used if k in KINDS]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>rmqstore audit: {_e(run["store"])}</title>
<style>{_CSS}</style></head><body>
<h1>rmqstore audit {_badge(verdict[1])} {_e(verdict[0])}</h1>
<p>Store <code>{_e(run["store"])}</code>, rebuilt index <code>{_e(run["rebuilt"])}</code>,
{_e(run["started_at"])}, {run["seconds"]:.1f} s. Exit code {s["exit_code"]}:
{s["error"]} errors, {s["warning"]} warnings, {s["info"]} infos.</p>
{"".join(f"<p>{_e(line)}</p>" for line in scope_lines(report))}
<h2>Where along the commitlog</h2>{commitlog_chart(report)}
<h2>Where along the queues</h2>{queue_chart(report)}
<h2>Queues</h2>
{_table(QUEUE_COLUMNS, queue_rows)}
<h2>Findings</h2>
{_table(FINDING_COLUMNS, finding_rows)}
<h2>What <code>rmqstore recover</code> would change</h2>
{_table(["action", "file", "because"], repair_rows) if repair_rows else '<p class="muted">Nothing.</p>'}
<h2>Kinds in this report</h2>{_table(["kind", "severity", "meaning"], legend)}
</body></html>
"""
