"""The audit's outputs: report.json, a self-contained report.html (inline CSS and SVG), a console summary.

Both start with the verdict (storelib.verdict): what the broker does with the store if started now, one line per
damaged area, and the exact recover command. Every value taken from the store is escaped.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from typing import Any

from storelib.errors import EXIT_CANNOT, EXIT_FINDINGS, EXIT_OK
from storelib.findings import KINDS, SEVERITIES
from storelib.layout import COMMITLOG
from storelib.verdict import human_bytes, plural, report_verdict
from udfs.fs import join, resolve, write_file

COLORS = {"error": "#c62828", "warning": "#e65100", "info": "#1565c0", "ok": "#2e7d32"}
LOST = "#ef9a9a"  # the commitlog range a start would truncate, the queue range ConsumeQueue.recover drops
CHART_WIDTH = 960
BROKER_CLASS = {"start": "ok", "truncate": "error", "refuse": "error", "unknown": "warning"}
FONTS = 'system-ui, "Noto Sans", "Noto Sans CJK SC", "Noto Color Emoji", sans-serif'
_CSS = """
body{font:14px/1.45 %s;margin:16px 20px;color:#222;max-width:1360px}
h1{font-size:15px;font-weight:normal;margin:0 0 6px;color:#555}h2{font-size:16px;margin:26px 0 6px}
.verdict{border-left:8px solid;padding:8px 14px;background:#fafafa}
.verdict.error{border-color:%s}.verdict.ok{border-color:%s}.verdict.warning{border-color:%s}
.headline{font-size:19px;font-weight:600;margin:4px 0 8px}
.problems{margin:4px 0 8px;padding-left:20px}.problems li{margin:2px 0}
pre{background:#263238;color:#eceff1;padding:6px 10px;margin:4px 0;white-space:pre-wrap;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:6px 0;width:100%%}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;overflow-wrap:anywhere}
th{background:#f0f0f0;font-weight:600}td.num,th.num{text-align:right}td.num{white-space:nowrap}
tr.what td{border-top:0;color:#444;padding-bottom:8px}
.sev{color:#fff;padding:0 6px;border-radius:3px;font-size:12px;white-space:nowrap}
code{font-size:12px}.muted{color:#666}summary{cursor:pointer;margin:6px 0}
.legend span{display:inline-block;margin-right:16px;white-space:nowrap}
.sw{display:inline-block;width:12px;height:12px;vertical-align:-1px;margin-right:4px;border:1px solid #999}
svg{width:100%%;height:auto;display:block}svg text{font-family:%s}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:6px 0}dt{color:#555}dd{margin:0}
""" % (FONTS, COLORS["error"], COLORS["ok"], COLORS["warning"], FONTS)  # noqa: UP031 (CSS braces)
_TIMESTAMP = re.compile(r"\b1\d{12}\b")  # epoch milliseconds (2001-2286)


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


# --- console ----------------------------------------------------------------------------------


def verdict_lines(report: dict[str, Any]) -> list[str]:
    """The verdict for a terminal: the broker's outcome, one line per damaged area, the next command."""
    v = report_verdict(report)
    lines = [f"VERDICT: {v['headline']}"]
    lines += [f"  {p['area']}: {p['text']}" for p in v["problems"]]
    advice = v["recover"]
    if advice["possible"]:
        dry, apply_ = advice["commands"]
        lines.append("NEXT (stop the broker first):")
        lines.append(f"  {dry}")
        lines.append(f"      dry run: prints the plan ({plural(len(advice['steps']), 'step')}), changes nothing")
        lines.append(f"  {apply_}")
        lines.append(f"      backs up every file it changes to {advice['backup']}, repairs, audits again")
    else:
        lines.append(f"NEXT: {advice['why_not']}")
    return lines


def console_summary(report: dict[str, Any], report_dir: str | None) -> str:
    """The verdict first, then the worst findings, what was skipped, and one summary line."""
    s = report["summary"]
    lines = verdict_lines(report) + [f"  {line}" for line in scope_lines(report)]
    shown = [f for f in report["findings"] if f["severity"] != "info"]
    for f in shown[:15]:
        lines.append(f"  {f['severity'].upper():7} {f['kind']}: {f['file']}: {f['message']}")
    if len(shown) > 15:
        lines.append(f"  ... {len(shown) - 15} more in the report")
    outcome = {EXIT_OK: "clean", EXIT_FINDINGS: "DIVERGENT", EXIT_CANNOT: "COULD NOT AUDIT"}[s["exit_code"]]
    queues = s.get("queues", {})
    lines.append(
        f"audit: {outcome}: {plural(s['error'], 'error')}, {plural(s['warning'], 'warning')}, "
        f"{plural(s['info'], 'info')}; {plural(queues.get('audited', 0), 'queue')} ({queues.get('ok', 0)} ok), "
        f"{plural(s.get('index', {}).get('live_files', 0), 'index file')}, "
        f"{report['run']['seconds']:.1f} s" + (f" -> {report_dir}/report.html" if report_dir else "")
    )
    return "\n".join(lines)


# --- small HTML parts -------------------------------------------------------------------------


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _badge(severity: str) -> str:
    return f'<span class="sev" style="background:{COLORS.get(severity, "#555")}">{_e(severity)}</span>'


def _kind(kind: str) -> str:
    return f'<code data-kind="{_e(kind)}">{_e(kind)}</code>'


def _num(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


def _time(ms: int) -> str:
    """An epoch-milliseconds time as a UTC date, the number kept in the title and the datetime attribute."""
    when = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return (
        f'<time datetime="{when.isoformat()}" title="{ms} ms since the epoch">'
        f"{when.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} UTC</time>"
    )


def _iso(text: str) -> str:
    when = dt.datetime.fromisoformat(text)
    return f'<time datetime="{_e(text)}" title="{_e(text)}">{when.strftime("%Y-%m-%d %H:%M:%S")} UTC</time>'


def _with_times(text: str | None, times: bool) -> str:
    """Escaped text; with ``times``, every epoch-millisecond number in it shown as a date."""
    escaped = _e(text)
    return _TIMESTAMP.sub(lambda m: _time(int(m.group())), escaped) if times else escaped


def _table(
    headers: list[str], rows: list[list[str]], numeric: tuple[int, ...] = (), notes: list[str] | None = None
) -> str:
    """A table; the columns at ``numeric`` are right-aligned numbers; ``notes``: a full-width row under each row."""

    def cell(tag: str, i: int, content: str) -> str:
        return f'<{tag} class="num">{content}</{tag}>' if i in numeric else f"<{tag}>{content}</{tag}>"

    def note(i: int) -> str:
        return f'<tr class="what"><td colspan="{len(headers)}">{notes[i]}</td></tr>' if notes else ""

    head = "".join(cell("th", i, _e(h)) for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(cell("td", i, c) for i, c in enumerate(r)) + "</tr>" + note(n) for n, r in enumerate(rows)
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _legend(items: list[tuple[str, str]]) -> str:
    """A chart's legend: (swatch style, label) pairs."""
    spans = "".join(f'<span><i class="sw" style="{style}"></i>{_e(label)}</span>' for style, label in items)
    return f'<div class="legend">{spans}</div>'


# --- the verdict --------------------------------------------------------------------------------


def verdict_html(report: dict[str, Any]) -> str:
    """The first screen: what the broker does if started now, what is wrong per area, the exact next command."""
    v, run = report_verdict(report), report["run"]
    problems = "".join(
        f"<li>{_badge(p['severity'])} <b>{_e(p['area'])}</b>: {_e(p['text'])}</li>" for p in v["problems"]
    )
    advice = v["recover"]
    if advice["possible"]:
        dry, apply_ = advice["commands"]
        nxt = (
            "<p><b>Next: stop the broker first</b>, then see the plan (changes nothing):</p>"
            f'<pre id="recover-command">{_e(dry)}</pre>'
            f"<p>and apply it: every file it changes is first copied to <code>{_e(advice['backup'])}</code>; "
            "it audits again and prints the undo command.</p>"
            f"<pre>{_e(apply_)}</pre>"
        )
    else:
        nxt = f'<p id="recover-command"><b>Next:</b> {_e(advice["why_not"])}.</p>'
    return (
        f'<section class="verdict {BROKER_CLASS[v["broker"]]}" id="verdict" data-broker="{_e(v["broker"])}">'
        f"<h1>rmqstore audit of <code>{_e(run['store'])}</code>, {_iso(run['started_at'])}</h1>"
        f'<p class="headline">{_e(v["headline"])}</p>'
        + (f'<ul class="problems">{problems}</ul>' if problems else "")
        + nxt
        + "</section>"
    )


def plan_html(report: dict[str, Any]) -> str:
    """recover's plan: each step with the findings it fixes, then what stays as it is."""
    advice = report_verdict(report)["recover"]
    rows = [
        [
            str(i),
            _e(s["action"]),
            f"<code>{_e(s['file'])}</code>",
            "<br>".join(f"{_kind(r['kind'])} {_e(r['where'])}" for r in s["resolves"]) or _e(s["reason"]),
        ]
        for i, s in enumerate(advice["steps"], 1)
    ]
    stays = "".join(
        f"<li>{_kind(r['kind'])}{' ×' + str(r['count']) if r['count'] > 1 else ''}: {_e(r['why'])}</li>"
        for r in advice["remains"]
    )
    if not rows and not stays:
        return ""
    table = (
        _table(["step", "action", "file", "fixes"], rows, (0,)) if rows else f"<p>Recover: {_e(advice['why_not'])}.</p>"
    )
    backup = (
        f"<p>Before changing anything, <code>--apply</code> copies every file above to <code>{_e(advice['backup'])}"
        "</code> (with manifest.json: each file's size and sha256); <code>rmqstore recover --store STORE --undo "
        "BACKUP</code> puts them back.</p>"
        if rows
        else ""
    )
    left = f"<p>Recover leaves as they are:</p><ul>{stays}</ul>" if stays else "<p>Nothing is left afterwards.</p>"
    return f"<h2>What <code>rmqstore recover</code> changes</h2>{table}{backup}{left}"


# --- charts -------------------------------------------------------------------------------------


def _ticks(lo: int, hi: int) -> list[int]:
    """Four to eight round commitlog offsets between ``lo`` and ``hi`` (multiples of a power-of-two size)."""
    step = 1024
    while (hi - lo) / step > 8:
        step *= 2
    return list(range(lo - lo % step + step if lo % step else lo, hi + 1, step))


def _tick(at: float, label: str) -> str:
    anchor = "end" if at > CHART_WIDTH - 30 else "middle"
    return (
        f'<line x1="{at:.1f}" y1="60" x2="{at:.1f}" y2="66" stroke="#555"/>'
        f'<text x="{at:.1f}" y="78" font-size="11" text-anchor="{anchor}">{label}</text>'
    )


def commitlog_chart(report: dict[str, Any]) -> str:
    """The commitlog by offset: segments, the range a start would truncate, each commitlog finding (worst on top)."""
    segments, marked = report["run"].get("segments", []), _commitlog_findings(report)
    if not segments or not marked:  # a bare row of segments says nothing the summary does not
        return ""
    seg_size = (report["run"].get("broker_config") or {}).get("mappedFileSizeCommitLog") or (
        segments[1]["start"] - segments[0]["start"] if len(segments) > 1 else max(1, segments[0]["end_offset"])
    )
    lo, hi = segments[0]["start"], segments[-1]["start"] + seg_size
    width = CHART_WIDTH - 20

    def x(offset: int) -> float:
        return 10 + width * (min(max(offset, lo), hi) - lo) / max(1, hi - lo)

    parts = []
    for s in segments:
        fill = "#c8e6c9" if s["messages"] else "#eeeeee"
        when = dt.datetime.fromtimestamp(s["first_store_timestamp"] / 1000, dt.UTC) if s["messages"] else None
        title = f"segment {s['file']}: {plural(s['messages'], 'message')}" + (
            f", first stored {when:%Y-%m-%d %H:%M:%S} UTC" if when else ", zero-filled"
        )
        parts.append(
            f'<rect x="{x(s["start"]):.1f}" y="34" width="{max(1.0, x(s["start"] + seg_size) - x(s["start"])):.1f}" '
            f'height="26" fill="{fill}" stroke="#fff"><title>{_e(title)}</title></rect>'
        )
    cut = report_verdict(report)["truncate"]
    if cut:
        end = report["summary"]["commitlog"]["max_offset"]
        lost = f"lost if the broker starts now: {human_bytes(cut['bytes'])}" + (
            f", {plural(cut['messages'], 'message')}" if cut["messages"] is not None else ""
        )
        parts.append(
            f'<rect x="{x(cut["commitlog_offset"]):.1f}" y="30" width="{x(end) - x(cut["commitlog_offset"]):.1f}" '
            f'height="34" fill="{LOST}" fill-opacity="0.8" stroke="{COLORS["error"]}" stroke-dasharray="4 2"/>'
            f'<text x="{(x(cut["commitlog_offset"]) + x(end)) / 2:.1f}" y="24" font-size="13" text-anchor="middle" '
            f'fill="{COLORS["error"]}">{_e(lost)}</text>'
        )
    parts += _commitlog_marks(report, x)
    parts += [_tick(x(t), human_bytes(t).replace(".0 ", " ") if t else "0") for t in _ticks(lo, hi)]
    svg = (
        f'<svg viewBox="0 0 {CHART_WIDTH} 140" role="img" aria-label="the commitlog by offset">{"".join(parts)}'
        f'<text x="{CHART_WIDTH / 2}" y="136" font-size="12" text-anchor="middle">commitlog offset '
        f"(one box per {human_bytes(seg_size)} segment)</text></svg>"
    )
    legend = [
        ("background:#c8e6c9", "segment with records"),
        ("background:#eeeeee", "zero-filled segment"),
        *([(f"background:{LOST}", "truncated if the broker starts now")] if cut else []),
        *[
            (f"background:{COLORS[s]}", f"{s} finding")
            for s in SEVERITIES[::-1]
            if any(f["severity"] == s for f in marked)
        ],
    ]
    return "<h2>Where in the commitlog</h2>" + svg + _legend(legend)


def _commitlog_findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Findings about a place in the commitlog (queue and index findings name their entries' offsets too)."""
    return [
        f for f in report["findings"] if f["commitlog_offset"] is not None and f["file"].startswith(COMMITLOG + "/")
    ]


def _commitlog_marks(report: dict[str, Any], x: Any) -> list[str]:
    """A mark per commitlog finding, drawn least severe first so the worst is on top; one label per nearby group."""
    found = sorted(_commitlog_findings(report), key=lambda f: SEVERITIES.index(f["severity"]))
    parts, groups = [], {}
    for f in found:
        at = x(f["commitlog_offset"])
        parts.append(
            f'<line x1="{at:.1f}" y1="28" x2="{at:.1f}" y2="66" stroke="{COLORS[f["severity"]]}" stroke-width="3" '
            f'data-kind="{_e(f["kind"])}"><title>{_e(f["kind"])} at commitlog offset {f["commitlog_offset"]:,}: '
            f"{_e(f['message'])}</title></line>"
        )
        groups.setdefault(round(at / 60), []).append(f)
    for row, (_, group) in enumerate(sorted(groups.items())):
        worst = group[-1]
        kinds = dict.fromkeys(f["kind"] for f in reversed(group))
        label = ", ".join(kinds) + f" at {min(f['commitlog_offset'] for f in group):,}"
        at = x(worst["commitlog_offset"])
        anchor = "end" if at > CHART_WIDTH * 0.6 else "start"
        parts.append(
            f'<text x="{at:.1f}" y="{96 + 14 * (row % 2)}" font-size="12" text-anchor="{anchor}" '
            f'fill="{COLORS[worst["severity"]]}">{_e(label)}</text>'
        )
    return parts


def _queue_marks(q: dict[str, Any], found: list[dict[str, Any]], end: int) -> list[tuple[int, int, str, str]]:
    """(from, to, colour, label) per finding of a queue; a zeroed run also marks what ConsumeQueue.recover drops."""
    marks = []
    for f in sorted(found, key=lambda f: SEVERITIES.index(f["severity"])):
        first, n = f["queue_offset"], f["count"] or 1
        if f["kind"] == "cq-zeroed-entries" and first + n < end:
            marks.append((first + n, end, LOST, f"{plural(end - first - n, 'sound entry', 'sound entries')} dropped"))
        what = f"{f['kind']} at queue offset {first:,}" + (f"–{first + n - 1:,}" if n > 1 else "")
        marks.append((first, first + n, COLORS[f["severity"]], what))
    return marks


def queue_chart(report: dict[str, Any]) -> str:
    """One bar per divergent queue (its queue offsets), its damaged ranges marked and labelled."""
    rows = [q for q in report["queues"] if q["status"] not in ("ok", "info")]
    if not rows:
        return ""
    by_queue: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for f in report["findings"]:
        if f["topic"] is not None and f["queue_offset"] is not None:
            by_queue.setdefault((f["topic"], f["queue_id"]), []).append(f)
    label_w, bar_w, pitch = 200, CHART_WIDTH - 280, 46
    parts = []
    for i, q in enumerate(rows):
        y, end = 6 + i * pitch, max(q["rebuilt_end"] or 0, q["live_end"] or 0, 1)
        marks = _queue_marks(q, by_queue.get((q["topic"], q["queue_id"]), []), end)
        parts.append(
            f'<text x="0" y="{y + 13}" font-size="13">{_e(q["topic"])}/{q["queue_id"]}</text>'
            f'<rect x="{label_w}" y="{y}" width="{bar_w}" height="18" fill="#c8e6c9"/>'
            f'<text x="{label_w}" y="{y + 32}" font-size="11">0</text>'
            f'<text x="{label_w + bar_w + 6}" y="{y + 13}" font-size="11">{end:,} entries</text>'
        )
        for lo_, hi_, color, _ in marks:
            x0 = label_w + bar_w * lo_ / end
            parts.append(
                f'<rect x="{x0:.1f}" y="{y}" width="{max(2.0, bar_w * (hi_ - lo_) / end):.1f}" height="18" '
                f'fill="{color}"/>'
            )
        labels = "; ".join(label for *_, label in reversed(marks))
        parts.append(f'<text x="{label_w + 16}" y="{y + 32}" font-size="12">{_e(labels)}</text>')
    svg = (
        f'<svg viewBox="0 0 {CHART_WIDTH} {8 + len(rows) * pitch}" role="img" aria-label="divergent queues">'
        f"{''.join(parts)}</svg>"
    )
    legend = [
        ("background:#c8e6c9", "entries that match the commitlog"),
        (f"background:{COLORS['error']}", "wrong or zeroed entries"),
        (f"background:{LOST}", "sound entries the broker drops after a zeroed one"),
    ]
    return f"<h2>Where in the divergent queues (queue offsets)</h2>{svg}{_legend(legend)}"


# --- tables -------------------------------------------------------------------------------------


def findings_html(report: dict[str, Any]) -> str:
    """One row of numbers per finding (one column per kind of offset), its sentence in a full-width row below."""
    if not report["findings"]:
        return "<h2>Findings</h2><p>No findings.</p>"
    headers = ["finding", "file", "queue offset", "commitlog offset", "file offset", "count", "expected", "found"]
    rows, notes = [], []
    for f in report["findings"]:
        times = "Timestamp" in f["message"]
        queue = f"{_e(f['topic'])}/{f['queue_id']}<br>" if f["topic"] is not None else ""
        rows.append(
            [
                f"{_badge(f['severity'])} {_kind(f['kind'])}",
                f"{queue}<code>{_e(f['file'])}</code>",
                _num(f["queue_offset"]),
                _num(f["commitlog_offset"]),
                _num(f["file_offset"]),
                _num(f["count"]),
                _with_times(f["expected"], times),
                _with_times(f["actual"], times),
            ]
        )
        notes.append(_with_times(f["message"], times))
    return f"<h2>Findings ({len(rows)})</h2>" + _table(headers, rows, (2, 3, 4, 5), notes)


def queues_html(report: dict[str, Any]) -> str:
    """Queues with findings first; the ``ok`` ones folded away."""
    if not report["queues"]:
        return "<h2>Queues</h2><p>No queue was audited.</p>"
    headers = ["queue", "status", "kinds", "live entries", "rebuilt entries", "first bad queue offset", "bad entries"]

    def row(q: dict[str, Any]) -> list[str]:
        return [
            f"{_e(q['topic'])}/{q['queue_id']}",
            _badge(q["status"]),
            " ".join(_kind(k) for k in q["kinds"]),
            _num(q["live_entries"]),
            _num(q["rebuilt_entries"]),
            _num(q["first_bad_queue_offset"]),
            _num(q["bad_entries"]),
        ]

    bad = [row(q) for q in report["queues"] if q["status"] != "ok"]
    ok = [row(q) for q in report["queues"] if q["status"] == "ok"]
    numeric = (3, 4, 5, 6)
    out = f"<h2>Queues ({len(report['queues'])})</h2>" + (_table(headers, bad, numeric) if bad else "")
    if ok:
        out += f"<details><summary>{plural(len(ok), 'queue')} ok</summary>{_table(headers, ok, numeric)}</details>"
    return out


def legend_html(report: dict[str, Any]) -> str:
    """Every finding kind the page shows, with its severity, meaning and whether recover fixes it."""
    used = sorted({f["kind"] for f in report["findings"]} | {k for q in report["queues"] for k in q["kinds"]})
    rows = [
        [
            _kind(k),
            _badge(KINDS[k].severity),
            "yes" if KINDS[k].repairable else "",
            _e(KINDS[k].meaning),
        ]
        for k in used
        if k in KINDS
    ]
    if not rows:
        return ""
    body = _table(["kind", "severity", "recover fixes", "meaning"], rows)
    return f'<section id="legend"><h2>Kinds in this report</h2>{body}</section>'


def provenance_html(report: dict[str, Any]) -> str:
    """How this verdict was reached: the tool, the settings that drive it, Spark, the time it took."""
    run = report["run"]
    cfg = run.get("broker_config") or {}
    settings = (
        f"checkCRCOnRecover={str(cfg['checkCRCOnRecover']).lower()}, "
        f"mappedFileSizeCommitLog={cfg['mappedFileSizeCommitLog']} ({human_bytes(cfg['mappedFileSizeCommitLog'])})"
        if cfg
        else "not recorded"
    )
    rebuilt = (
        "rebuilt in a temporary work directory (removed after the audit)"
        if run.get("rebuilt_temporary", True)
        else f"<code>{_e(run['rebuilt'])}</code>"
    )
    items = [
        ("tool", f"rmqstore {_e(run.get('tool_version', 'unknown'))}"),
        ("store", f"<code>{_e(run['store'])}</code>"),
        ("broker config", f"<code>{_e(cfg.get('path') or 'none: RocketMQ defaults')}</code>; {_e(settings)}"),
        ("rebuilt index", rebuilt),
        ("Spark master", f"<code>{_e(run.get('spark_master', 'unknown'))}</code>"),
        ("started", _iso(run["started_at"])),
        ("took", f"{run['seconds']:.1f} s"),
        ("exit code", str(report["summary"]["exit_code"])),
        *[("scope", _e(line)) for line in scope_lines(report)],
    ]
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f'<section id="provenance"><h2>About this run</h2><dl>{rows}</dl></section>'


def render_html(report: dict[str, Any]) -> str:
    """The whole report as one HTML page: verdict and next command first, then the plan, charts, tables, legend."""
    store = report["run"]["store"]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>rmqstore audit: {_e(store)}</title><style>{_CSS}</style></head><body>
{verdict_html(report)}
{plan_html(report)}
{commitlog_chart(report)}
{queue_chart(report)}
{findings_html(report)}
{queues_html(report)}
{legend_html(report)}
{provenance_html(report)}
</body></html>
"""
