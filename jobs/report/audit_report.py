"""The audit's files: report.json and a self-contained report.html (inline CSS and SVG; its charts are
jobs.report.charts, the console summary jobs.report.console).

Both start with the verdict (storelib.reports.verdict): what the broker does with the store if started now, one line per
damaged area, and the exact recover command. The page is jobs/report/templates/report.html, rendered with autoescaping:
every value taken from the store is escaped.
"""

from __future__ import annotations

import datetime as dt
import re

import jinja2
from jinja2 import StrictUndefined
from markupsafe import Markup, escape

from jobs.report.charts import CHART_WIDTH, COLORS, LOST, commitlog_chart, queue_chart
from jobs.report.console import scope_lines
from storelib.findings import KINDS
from storelib.reports.report import AuditReport, SettingsRecord
from storelib.reports.verdict import human_bytes, plural, report_verdict
from udfs.fs import join, resolve, write_file

BROKER_CLASS = {"start": "ok", "truncate": "error", "refuse": "error", "unknown": "warning"}
_TIMESTAMP = re.compile(r"\b1\d{12}\b")  # epoch milliseconds (2001-2286)


def write_reports(report_dir: str, report: AuditReport) -> None:
    """DIR/report.json and DIR/report.html (local, HDFS or S3)."""
    fs, root = resolve(report_dir)
    write_file(fs, join(root, "report.json"), report.to_json().encode())
    write_file(fs, join(root, "report.html"), render_html(report).encode())


def _time(ms: int) -> str:
    """An epoch-milliseconds time as a UTC date, the number kept in the title and the datetime attribute."""
    when = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return (
        f'<time datetime="{when.isoformat()}" title="{ms} ms since the epoch">'
        f"{when.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} UTC</time>"
    )


def _iso(text: str) -> Markup:
    when = dt.datetime.fromisoformat(text)
    return Markup('<time datetime="{0}" title="{0}">{1} UTC</time>').format(text, f"{when:%Y-%m-%d %H:%M:%S}")


def _with_times(text: str | None, times: bool) -> Markup:
    """Escaped text; with ``times``, every epoch-millisecond number in it shown as a date."""
    escaped = escape("" if text is None else text)
    return Markup(_TIMESTAMP.sub(lambda m: _time(int(m.group())), escaped)) if times else escaped


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("jobs.report", "templates"), autoescape=True, undefined=StrictUndefined
    )
    env.filters.update(
        num=lambda value: "" if value is None else f"{value:,}",
        px=lambda value: f"{value:.1f}",
        iso=_iso,
        with_times=_with_times,
    )
    return env


_TEMPLATE = _environment().get_template("report.html")


def render_html(report: AuditReport) -> str:
    """The whole report as one HTML page: verdict and next command first, then the plan, charts, tables, legend."""
    v, run = report_verdict(report), report.run
    config = run.broker_config
    return (
        _TEMPLATE.render(
            colors=COLORS,
            lost=LOST,
            width=CHART_WIDTH,
            run=run,
            summary=report.summary,
            v=v,
            broker_class=BROKER_CLASS[v["broker"]],
            advice=v["recover"],
            log=commitlog_chart(report),
            queue_bars=queue_chart(report),
            findings=report.findings,
            queues=_queue_tables(report),
            legend=[(k, KINDS[k]) for k in _kinds_shown(report) if k in KINDS],
            config_path=config.path if config else None,
            settings=_settings(config),
            scope=scope_lines(report),
        )
        + "\n"
    )


def _queue_tables(report: AuditReport) -> dict[str, object]:
    """Queues with findings first; the ``ok`` ones folded away."""
    ok = [q for q in report.queues if q.status == "ok"]
    bad = [q for q in report.queues if q.status != "ok"]
    return {"all": report.queues, "bad": bad, "ok": ok, "ok_count": plural(len(ok), "queue")}


def _kinds_shown(report: AuditReport) -> list[str]:
    return sorted({f.kind for f in report.findings} | {k for q in report.queues for k in q.kinds})


def _settings(cfg: SettingsRecord | None) -> str:
    """The broker settings that drive the verdict most."""
    if not cfg:
        return "not recorded"
    size, crc = cfg.mappedFileSizeCommitLog, str(cfg.checkCRCOnRecover).lower()
    return f"checkCRCOnRecover={crc}, mappedFileSizeCommitLog={size} ({human_bytes(size)})"
