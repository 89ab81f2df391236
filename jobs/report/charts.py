"""report.html's two charts as the template draws them (SVG coordinates, colours, labels): the commitlog by offset,
and one bar per divergent queue."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from storelib.broker.restart import SegmentFacts
from storelib.findings import SEVERITIES, Finding
from storelib.layout import COMMITLOG
from storelib.reports.report import AuditReport
from storelib.reports.verdict import human_bytes, plural, report_verdict

COLORS = {"error": "#c62828", "warning": "#e65100", "info": "#1565c0", "ok": "#2e7d32"}
LOST = "#ef9a9a"  # the commitlog range a start would truncate, the queue range ConsumeQueue.recover drops
CHART_WIDTH = 960
#: what the template draws of a chart (report.html's SVG coordinates, colours, labels)
View = dict[str, object]


def _ticks(lo: int, hi: int) -> list[int]:
    """Four to eight round commitlog offsets between ``lo`` and ``hi`` (multiples of a power-of-two size)."""
    step = 1024
    while (hi - lo) / step > 8:
        step *= 2
    return list(range(lo - lo % step + step if lo % step else lo, hi + 1, step))


def commitlog_chart(report: AuditReport) -> View | None:
    """The commitlog by offset: segments, the range a start would truncate, each commitlog finding (worst on top);
    None when no finding is in the commitlog (a bare row of segments says nothing the summary does not)."""
    segments, marked = report.run.segments, _commitlog_findings(report)
    if not segments or not marked:
        return None
    config = report.run.broker_config
    seg_size = (config.mappedFileSizeCommitLog if config else 0) or (
        segments[1].start - segments[0].start if len(segments) > 1 else max(1, segments[0].end_offset)
    )
    lo, hi = segments[0].start, segments[-1].start + seg_size

    def x(offset: int) -> float:
        return 10 + (CHART_WIDTH - 20) * (min(max(offset, lo), hi) - lo) / max(1, hi - lo)

    boxes = [
        {
            "x": x(s.start),
            "width": max(1.0, x(s.start + seg_size) - x(s.start)),
            "fill": "#c8e6c9" if s.messages else "#eeeeee",
            "title": _segment_title(s),
        }
        for s in segments
    ]
    cut = _cut(report, x)
    ticks = [(x(t), human_bytes(t).replace(".0 ", " ") if t else "0") for t in _ticks(lo, hi)]
    legend = [
        ("background:#c8e6c9", "segment with records"),
        ("background:#eeeeee", "zero-filled segment"),
        *([(f"background:{LOST}", "truncated if the broker starts now")] if cut else []),
        *[
            (f"background:{COLORS[s]}", f"{s} finding")
            for s in SEVERITIES[::-1]
            if any(f.severity == s for f in marked)
        ],
    ]
    marks, labels = _commitlog_marks(report, x)
    return {
        "segments": boxes,
        "cut": cut,
        "marks": marks,
        "labels": labels,
        "ticks": [
            {"x": at, "label": label, "anchor": "end" if at > CHART_WIDTH - 30 else "middle"} for at, label in ticks
        ],
        "segment_size": human_bytes(seg_size),
        "legend": legend,
    }


def _segment_title(s: SegmentFacts) -> str:
    when = dt.datetime.fromtimestamp(s.first_store_timestamp / 1000, dt.UTC) if s.messages else None
    return f"segment {s.file}: {plural(s.messages, 'message')}" + (
        f", first stored {when:%Y-%m-%d %H:%M:%S} UTC" if when else ", zero-filled"
    )


def _cut(report: AuditReport, x: Callable[[int], float]) -> View | None:
    """The range the broker's recovery would truncate, and what it loses."""
    cut = report_verdict(report)["truncate"]
    if not cut:
        return None
    log = report.summary.commitlog
    assert log is not None  # a truncation is found by the log's stage, and the audit then counts the commitlog
    end = log.max_offset
    lost = f"lost if the broker starts now: {human_bytes(cut['bytes'])}" + (
        f", {plural(cut['messages'], 'message')}" if cut["messages"] is not None else ""
    )
    at = x(cut["commitlog_offset"])
    return {"x": at, "width": x(end) - at, "middle": (at + x(end)) / 2, "label": lost}


def _commitlog_findings(report: AuditReport) -> list[Finding]:
    """Findings about a place in the commitlog (queue and index findings name their entries' offsets too)."""
    return [f for f in report.findings if f.commitlog_offset is not None and f.file.startswith(COMMITLOG + "/")]


def _offset(f: Finding) -> int:
    return f.commitlog_offset or 0


def _commitlog_marks(report: AuditReport, x: Callable[[int], float]) -> tuple[list[View], list[View]]:
    """A mark per commitlog finding, least severe first so the worst is drawn on top; one label per nearby group."""
    found = sorted(_commitlog_findings(report), key=lambda f: SEVERITIES.index(f.severity))
    marks: list[View] = []
    groups: dict[int, list[Finding]] = {}
    for f in found:
        marks.append({"x": x(_offset(f)), "f": f})
        groups.setdefault(round(x(_offset(f)) / 60), []).append(f)
    labels: list[View] = []
    for row, (_, group) in enumerate(sorted(groups.items())):
        worst = group[-1]
        kinds = dict.fromkeys(f.kind for f in reversed(group))
        at = x(_offset(worst))
        labels.append(
            {
                "x": at,
                "y": 96 + 14 * (row % 2),
                "anchor": "end" if at > CHART_WIDTH * 0.6 else "start",
                "severity": worst.severity,
                "text": ", ".join(kinds) + f" at {min(_offset(f) for f in group):,}",
            }
        )
    return marks, labels


def _queue_marks(found: list[Finding], end: int) -> list[tuple[int, int, str, str]]:
    """(from, to, colour, label) per finding of a queue; a zeroed run also marks what ConsumeQueue.recover drops."""
    marks = []
    for f in sorted(found, key=lambda f: SEVERITIES.index(f.severity)):
        first, n = f.queue_offset or 0, f.count or 1
        if f.kind == "cq-zeroed-entries" and first + n < end:
            marks.append((first + n, end, LOST, f"{plural(end - first - n, 'sound entry', 'sound entries')} dropped"))
        what = f"{f.kind} at queue offset {first:,}" + (f"–{first + n - 1:,}" if n > 1 else "")
        marks.append((first, first + n, COLORS[f.severity], what))
    return marks


def queue_chart(report: AuditReport) -> View | None:
    """One bar per divergent queue (its queue offsets), its damaged ranges marked and labelled; None without one."""
    rows = [q for q in report.queues if q.status not in ("ok", "info")]
    if not rows:
        return None
    by_queue: dict[tuple[str | None, int | None], list[Finding]] = {}
    for f in report.findings:
        if f.topic is not None and f.queue_offset is not None:
            by_queue.setdefault((f.topic, f.queue_id), []).append(f)
    label_w, bar_w, pitch = 200, CHART_WIDTH - 280, 46
    bars = []
    for i, q in enumerate(rows):
        end = max(q.rebuilt_end or 0, q.live_end or 0, 1)
        marks = _queue_marks(by_queue.get((q.topic, q.queue_id), []), end)
        shown = [
            {"x": label_w + bar_w * lo / end, "width": max(2.0, bar_w * (hi - lo) / end), "color": color}
            for lo, hi, color, _ in marks
        ]
        labels = "; ".join(label for *_, label in reversed(marks))
        bars.append({"y": 6 + i * pitch, "q": q, "end": end, "marks": shown, "labels": labels})
    legend = [
        ("background:#c8e6c9", "entries that match the commitlog"),
        (f"background:{COLORS['error']}", "wrong or zeroed entries"),
        (f"background:{LOST}", "sound entries the broker drops after a zeroed one"),
    ]
    return {"rows": bars, "height": 8 + len(rows) * pitch, "label_width": label_w, "bar_width": bar_w, "legend": legend}
