"""The audit's console output: the verdict (storelib.reports.verdict) for a terminal, the worst findings, what the
run did not audit, and one summary line."""

from __future__ import annotations

from storelib.errors import EXIT_CANNOT, EXIT_FINDINGS, EXIT_OK
from storelib.reports.report import AuditReport, IndexCounts, QueueCounts
from storelib.reports.verdict import plural, report_verdict


def scope_lines(report: AuditReport) -> list[str]:
    """What the run did not audit (``--since-last``), and where its history went (``--history``)."""
    scope, history = report.run.scope, report.run.history
    lines = [f"note: {scope.note}"] if scope and scope.note else []
    lines += [f"skipped {what}" for what in (scope.skipped if scope else ())]
    if history:
        lines.append(
            f"history: run {history.run_id} in {history.table}, "
            + (f"version {history.version}" if history.error is None else f"not written: {history.error}")
        )
    return lines


def verdict_lines(report: AuditReport) -> list[str]:
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
    if advice["salvage"]:
        dry, apply_ = advice["salvage"]
        lines.append("SALVAGE the damaged records instead of losing what follows them (docs/salvage.md):")
        lines.append(f"  {dry}")
        lines.append(f"  {apply_}")
    return lines


def console_summary(report: AuditReport, report_dir: str | None) -> str:
    """The verdict first, then the worst findings, what was skipped, and one summary line."""
    s = report.summary
    lines = verdict_lines(report) + [f"  {line}" for line in scope_lines(report)]
    shown = [f for f in report.findings if f.severity != "info"]
    for f in shown[:15]:
        lines.append(f"  {f.severity.upper():7} {f.kind}: {f.file}: {f.message}")
    if len(shown) > 15:
        lines.append(f"  ... {len(shown) - 15} more in the report")
    outcome = {EXIT_OK: "clean", EXIT_FINDINGS: "DIVERGENT", EXIT_CANNOT: "COULD NOT AUDIT"}[s.exit_code]
    queues, index = s.queues or QueueCounts(), s.index or IndexCounts()
    lines.append(
        f"audit: {outcome}: {plural(s.error, 'error')}, {plural(s.warning, 'warning')}, "
        f"{plural(s.info, 'info')}; {plural(queues.audited, 'queue')} ({queues.ok} ok), "
        f"{plural(index.live_files, 'index file')}, "
        f"{report.run.seconds:.1f} s" + (f" -> {report_dir}/report.html" if report_dir else "")
    )
    return "\n".join(lines)
