"""The audit's console output: the verdict (storelib.reports.verdict) for a terminal, the worst findings, what the
run did not audit, and one summary line."""

from __future__ import annotations

from storelib.errors import EXIT_CANNOT, EXIT_FINDINGS, EXIT_OK
from storelib.reports.report import AuditReport, IndexCounts, QueueCounts
from storelib.reports.verdict import Json, plural, report_verdict


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
    """The verdict for a terminal: the broker's outcome, one line per damaged area, then the rescues, the one that
    loses the fewest sound messages first, each with what it costs."""
    v = report_verdict(report)
    lines = [f"VERDICT: {v['headline']}"]
    lines += [f"  {p['area']}: {p['text']}" for p in v["problems"]]
    costs = {r["rescue"]: r for r in v.get("rescues", ())}
    blocks = {"salvage": _salvage_lines(v["recover"], costs), "recover": _recover_lines(v["recover"], costs)}
    order = [r for r in costs if r in blocks] or ["recover", "salvage"]
    for rescue in [*order, *(b for b in blocks if b not in order)]:
        lines += blocks[rescue]
    if "alone" in costs and costs["alone"]["sound_messages_lost"] != 0:
        lines.append(f"  (starting the broker as it is {_cost(costs['alone'])})")
    return lines


def _cost(rescue: Json) -> str:
    """``loses no sound message`` / ``loses 81 sound messages`` / unknown."""
    n = rescue["sound_messages_lost"]
    if n is None:
        return "loses sound messages, how many is not known"
    return "loses no sound message" if n == 0 else f"loses {plural(n, 'sound message')}"


def _recover_lines(advice: Json, costs: dict[str, Json]) -> list[str]:
    """recover's commands (or why it cannot run), with what it costs where salvage is offered beside it."""
    if not advice["possible"]:
        return [f"NEXT: {advice['why_not']}"]
    dry, apply_ = advice["commands"]
    cost = f" ({_cost(costs['recover'])}, the damaged records stay)" if "salvage" in costs else ""
    return [
        f"NEXT (stop the broker first){cost}:",
        f"  {dry}",
        f"      dry run: prints the plan ({plural(len(advice['steps']), 'step')}), changes nothing",
        f"  {apply_}",
        f"      backs up every file it changes to {advice['backup']}, repairs, audits again",
    ]


def _salvage_lines(advice: Json, costs: dict[str, Json]) -> list[str]:
    """recover --salvage's commands, with what it costs (none where it is not offered)."""
    if advice.get("salvage_refused"):
        return [f"SALVAGE refused: {advice['salvage_refused']}"]
    if not advice["salvage"]:
        return []
    dry, apply_ = advice["salvage"]
    cost = ""
    if "salvage" in costs:
        n = costs["salvage"]["tombstones"]
        cost = f" ({_cost(costs['salvage'])}; {plural(n, 'damaged message')} served as tombstones)"
    return [
        f"SALVAGE the damaged records instead of losing what follows them{cost} (docs/salvage.md):",
        f"  {dry}",
        f"  {apply_}",
    ]


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
