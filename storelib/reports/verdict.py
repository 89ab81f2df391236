"""What an operator needs first: what the broker does with this store if started now, and what to run next.

Pure logic over report.json (storelib.reports.report.AuditReport: its run, summary, findings and plan) and the findings
registry; no Spark. ``verdict(report)`` is report.json's ``verdict``; ``plan_lines`` and ``closing_line`` are recover's
console output, so the audit's report and recover's dry run name the same steps and what each one fixes.
"""

from __future__ import annotations

import collections
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

from storelib.broker.salvage import holds_broker_state
from storelib.errors import EXIT_CANNOT, EXIT_FINDINGS, EXIT_OK
from storelib.findings import AREA_CQ, AREAS, KINDS, Finding
from storelib.layout import BATCH_CONSUMEQUEUE, CHECKPOINT, COMMITLOG, is_local
from storelib.reports.plan import Step
from storelib.reports.report import AuditReport, LogCounts

#: report.json's ``verdict`` and its parts: JSON objects, read back by key
Json = dict[str, Any]

BACKUP_DEFAULT = "{store}-rmqstore-backup-<UTC time>"


# --- words and numbers ----------------------------------------------------------------------------


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 entry``, ``2 entries``, ``1,234 messages``: the count with the right form of the noun."""
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def human_bytes(n: int) -> str:
    """Sizes in binary units: ``53 bytes``, ``128.0 KiB``, ``1.4 MiB``."""
    if n < 1024:
        return plural(n, "byte")
    value, units = n / 1024, ["KiB", "MiB", "GiB", "TiB"]
    while value >= 1024 and len(units) > 1:
        value, units = value / 1024, units[1:]
    return f"{value:,.1f} {units[0]}"


def queue_name(f: Finding) -> str:
    return f"{f.topic}/{f.queue_id}"


def where(f: Finding) -> str:
    """Where a finding is, in the broker's words: queue and queue offset, else commitlog offset, else its file."""
    if f.topic is not None and f.queue_offset is not None:
        return f"{queue_name(f)} at queue offset {f.queue_offset:,}"
    if f.topic is not None:
        return queue_name(f)
    if f.commitlog_offset is not None and f.file.startswith(COMMITLOG + "/"):
        return f"commitlog offset {f.commitlog_offset:,}"
    return {"": "the store", "index": "the IndexFiles"}.get(f.file, f.file)


# --- what the broker does -------------------------------------------------------------------------


def divergences(report: AuditReport) -> list[Finding]:
    return [f for f in report.findings if f.severity != "info"]


def repairable(f: Finding) -> bool:
    return f.severity != "info" and KINDS[f.kind].repairable


def truncation(report: AuditReport, messages_lost: int | None) -> Json | None:
    """Where the broker's recovery would cut the log, and what it loses (None when it would not)."""
    cut = next((f for f in report.findings if KINDS[f.kind].truncation), None)
    if cut is None:
        return None
    log = report.summary.commitlog or LogCounts()
    total = max(1, log.max_offset - log.min_offset)
    return {
        "commitlog_offset": cut.commitlog_offset,
        "file": cut.file,
        "bytes": cut.count,
        "share": round((cut.count or 0) / total, 4),
        "messages": messages_lost,
    }


def broker_outcome(report: AuditReport, cut: Json | None) -> tuple[str, str]:
    """(``start``/``refuse``/``truncate``/``unknown``, one sentence): the broker started on this store now."""
    kinds = {f.kind for f in report.findings}
    if report.summary.exit_code == EXIT_CANNOT or "rebuilt-stale" in kinds:
        return "unknown", "Could not audit this store, so what the broker would do with it is not known."
    fails = [k.start_fails for name, k in KINDS.items() if k.start_fails and name in kinds]
    if fails:
        return "refuse", f"The broker refuses to start on this store: {'; '.join(fails)}, so load() fails."
    crash = "abort-marker" in kinds
    if cut is not None:
        lost = f"{human_bytes(cut['bytes'])} ({cut['share']:.0%} of the log)"
        if cut["messages"] is not None:
            lost += f" and {plural(cut['messages'], 'message')}"
        return "truncate", (
            f"Starting the broker now truncates the commitlog at offset {cut['commitlog_offset']:,}: "
            f"{lost} after it are lost to consumers."
        )
    how = "after crash recovery (abort exists); no sound record is lost" if crash else "normally"
    return "start", f"The broker would start {how}" + _recovery_words(report) + (
        ", with the damage below." if divergences(report) else "."
    )


def _recovery_words(report: AuditReport) -> str:
    """``; its recovery starts at commitlog offset N and dispatches A to B again`` (report.json's run.restart)."""
    r = report.run.restart
    if not r:
        return ""
    if report.run.restart_by_release:
        each = "; ".join(f"{v}: offset {x.start_offset:,}" for v, x in report.run.restart_by_release.items())
        return f"; where its recovery starts depends on the release ({each}): give --broker-version to know"
    again = f" and dispatches {r.dispatch_from:,} to {r.truncate_at:,} again" if r.dispatch_from < r.truncate_at else ""
    return f"; its recovery ({r.rules} rules) starts at commitlog offset {r.start_offset:,}{again}"


def problem_lines(report: AuditReport) -> list[Json]:
    """One line per area with divergences: how many of each kind, where the first one is, whether recover fixes it."""
    by_area: dict[str, list[Finding]] = collections.defaultdict(list)
    for f in divergences(report):
        by_area[KINDS[f.kind].area].append(f)
    out = []
    for name in AREAS:
        found = by_area.get(name)
        if not found:
            continue
        by_kind: dict[str, list[Finding]] = collections.defaultdict(list)
        for f in found:
            by_kind[f.kind].append(f)
        parts = [_kind_phrase(kind, fs) for kind, fs in by_kind.items()]
        fixed = sum(1 for f in found if repairable(f))
        tail = "recover fixes it" if fixed == len(found) == 1 else "recover fixes them" if fixed == len(found) else ""
        if 0 < fixed < len(found):
            tail = f"recover fixes {fixed} of {len(found)}"
        elif not fixed:
            tail = "recover leaves " + ("it" if len(found) == 1 else "them") + " as is"
        worst = "error" if any(f.severity == "error" for f in found) else "warning"
        out.append({"area": name, "severity": worst, "kinds": list(by_kind), "text": f"{'; '.join(parts)} ({tail})"})
    return out


def _kind_phrase(kind: str, found: list[Finding]) -> str:
    first = found[0]
    entries = (
        f", {plural(first.count, 'entry', 'entries')}"
        if KINDS[kind].area == AREA_CQ and first.count and len(found) == 1
        else ""
    )
    more = f" and {len(found) - 1} more" if len(found) > 1 else ""
    return f"{kind}{' ×' + str(len(found)) if len(found) > 1 else ''}: {where(first)}{entries}{more}"


# --- what recover does ----------------------------------------------------------------------------


def _scope(f: Finding) -> str:
    """The store-relative path a finding covers: its queue's directory for ConsumeQueue findings, else its file."""
    parts = f.file.split("/")
    return "/".join(parts[:3]) if parts[0] == "consumequeue" and len(parts) >= 3 else f.file


def resolves(step: Step, findings: Iterable[Finding]) -> list[Json]:
    """The repairable findings a step of recover's plan fixes: the checkpoint step those it answers, a file
    step those in its file, its queue's directory, or a directory holding it (``index`` for store-wide lookups)."""
    out = []
    for f in findings:
        if not repairable(f):
            continue
        if KINDS[f.kind].by_checkpoint:
            hit = step.file == CHECKPOINT
        else:
            scope = _scope(f)
            hit = step.file == scope or step.file.startswith(scope + "/")
        if hit:
            out.append({"kind": f.kind, "where": where(f)})
    return out


def recover_steps(report: AuditReport, steps: Sequence[Step] | None = None) -> list[Json]:
    """recover's plan (``steps``, default report.json's ``plan``, storelib.reports.plan.recover_plan), each step with
    the findings it fixes."""
    steps = report.plan.steps if steps is None else steps
    return [dict(s.to_dict(), resolves=resolves(s, report.findings)) for s in steps]


def remains(report: AuditReport, steps: list[Json]) -> list[Json]:
    """Divergences no step (of recover_steps) fixes, grouped by kind, with why they stay (the registry's meaning)."""
    fixed = {(r["kind"], r["where"]) for s in steps for r in s["resolves"]}
    left: dict[str, list[str]] = collections.defaultdict(list)
    for f in divergences(report):
        if (f.kind, where(f)) not in fixed:
            left[f.kind].append(where(f))
    return [{"kind": k, "count": len(w), "where": w, "why": KINDS[k].meaning} for k, w in left.items()]


def recover_commands(report: AuditReport) -> list[str]:
    """The dry run, then the same with ``--apply``: the exact command lines for this store, broker config, given
    release and plan (``--truncate-torn-tail`` when it zeroes a torn tail; ``BROKER_CONF`` stands for a settings
    file the audit used without knowing its path)."""
    run = report.run
    argv = ["rmqstore", "recover", "--store", run.store]
    if not run.rebuilt_temporary and run.rebuilt:
        argv += ["--rebuilt", run.rebuilt]
    config = run.broker_config
    if config and config.path:
        argv += ["--broker-config", config.path]
    elif config and not config.defaults:
        argv += ["--broker-config", "BROKER_CONF"]
    rules = run.broker_rules
    if rules and rules.source == "--broker-version":
        argv += ["--broker-version", rules.version or ""]
    if any(s.action == "truncate" for s in report.plan.steps):
        argv.append("--truncate-torn-tail")
    dry = " ".join(shlex.quote(a) for a in argv)
    return [dry, dry + " --apply"]


def salvage_commands(report: AuditReport) -> list[str]:
    """``recover --salvage``'s dry run and apply (docs/salvage.md) where a finding is one it rewrites (damaged
    records, a record failing its CRC) and the store is local; else none."""
    if not is_local(report.run.store):
        return []
    if not any(KINDS[f.kind].salvaged for f in report.findings) or salvage_refusal(report):
        return []
    dry = recover_commands(report)[0] + " --salvage"
    return [dry, dry + " --apply"]


def damaged_messages(report: AuditReport) -> int:
    """Queue units that point at damaged records (cq-damaged-entries) and records that frame but fail their BODYCRC
    or ``__CRC32#`` (each once): what every rescue loses; salvage serves a tombstone at each."""
    units = sum(f.count or 1 for f in report.findings if f.kind == "cq-damaged-entries")
    framed = {f.commitlog_offset for f in report.findings if KINDS[f.kind].salvaged and KINDS[f.kind].kept}
    return units + len(framed)


def rescues(report: AuditReport, cut: Json | None) -> list[Json]:
    """Each way out and the sound messages it loses (None: not known), fewest first: ``salvage`` (where offered)
    loses none, its damaged records become tombstones; ``recover`` and the broker ``alone`` lose what the broker's
    truncation takes (recover's checkpoint averts it where ``recovery-would-truncate`` says so) and leave the
    damaged records served as they are."""
    lost = cut["messages"] if cut is not None else 0
    after_recover = lost if any(f.kind == "recovery-would-truncate-after-recover" for f in report.findings) else 0
    out = [
        {"rescue": "recover", "sound_messages_lost": after_recover},
        {"rescue": "alone", "sound_messages_lost": lost},
    ]
    if salvage_commands(report):
        out.insert(0, {"rescue": "salvage", "sound_messages_lost": 0, "tombstones": damaged_messages(report)})
    return sorted(out, key=lambda r: float("inf") if r["sound_messages_lost"] is None else r["sound_messages_lost"])


def salvage_refusal(report: AuditReport) -> str | None:
    """Why salvage would refuse this store: the first queue with units pointing into damaged records
    (cq-damaged-entries) of a topic holding the broker's own state, or of a BatchConsumeQueue (one unit stands for a
    batch: no batch tombstone is built); None when none does."""
    for f in report.findings:
        if f.kind != "cq-damaged-entries" or f.topic is None:
            continue
        where = f"{f.topic}/{f.queue_id} queue offset {f.queue_offset}"
        if holds_broker_state(f.topic):
            return (
                f"{where}: a damaged record of a topic whose records hold the broker's own state; salvage writes no "
                "tombstone there"
            )
        if f.file.startswith(f"{BATCH_CONSUMEQUEUE}/"):
            return f"{where}: a BatchConsumeQueue unit points into damaged records; salvage builds no batch tombstone"
    return None


def recover_advice(report: AuditReport, steps: list[Json]) -> Json:
    """Whether recover can run, why not, or the commands, the plan, where the backup goes and what stays."""
    store = report.run.store
    blocking = [f.kind for f in report.findings if KINDS[f.kind].blocks_recover]
    why_not = None
    if blocking:
        why_not = "; ".join(dict.fromkeys(KINDS[k].refusal for k in blocking))
    elif not is_local(store):
        why_not = "recover changes local stores only: run it on the broker's host, on the store's own disk"
    elif not any(s["resolves"] for s in steps):
        why_not = "nothing for recover to change"
    return {
        "possible": why_not is None,
        "why_not": why_not,
        "stop_broker_first": True,
        "commands": recover_commands(report) if why_not is None else [],
        "salvage": salvage_commands(report),
        "salvage_refused": salvage_refusal(report),
        "backup": BACKUP_DEFAULT.format(store=store.rstrip("/")),
        "steps": steps if why_not is None else [],
        "remains": remains(report, steps if why_not is None else []),
    }


def verdict(report: AuditReport, messages_lost: int | None = None) -> Json:
    """report.json's ``verdict``: the broker's outcome, one line per damaged area, and recover's next step.

    ``messages_lost``: messages at or past the truncation point (the audit counts them; None when unknown).
    """
    cut = truncation(report, messages_lost)
    broker, headline = broker_outcome(report, cut)
    return {
        "broker": broker,
        "headline": headline,
        "truncate": cut,
        "problems": problem_lines(report),
        "recover": recover_advice(report, recover_steps(report)),
        "rescues": rescues(report, cut),
    }


def report_verdict(report: AuditReport) -> Json:
    """The report's own verdict, or one computed now for a report written before verdicts existed."""
    return dict(report.verdict) if report.verdict else verdict(report)


# --- recover's console ----------------------------------------------------------------------------


def step_line(i: int, step: Json) -> str:
    """``  2. replace consumequeue/Metrics/0/…  fixes cq-zeroed-entries (Metrics/0 at queue offset 1,000)``: a step
    of recover_steps."""
    fixed: list[Json] = step["resolves"]
    what = ", ".join(f"{r['kind']} ({r['where']})" for r in fixed) or step["reason"]
    if step["action"] == "truncate":
        return f"  {i}. zero {step['file']} from file offset {step['offset']:,} to the end: fixes {what}"
    return f"  {i}. {step['action']} {step['file']}: fixes {what}"


def plan_lines(report: AuditReport, steps: Sequence[Step] | None = None, backup: str | None = None) -> list[str]:
    """recover's plan for a person: each step and what it fixes, where the backup goes, what stays as it is.

    ``steps``: recover's own steps; default the report's.
    """
    shown = recover_steps(report, steps)
    store = report.run.store.rstrip("/")
    lines = [f"recover plan ({plural(len(shown), 'step')}; the broker must be stopped):"]
    lines += [step_line(i, s) for i, s in enumerate(shown, 1)]
    lines.append(f"  backup: every file above is copied first to {backup or BACKUP_DEFAULT.format(store=store)}")
    for r in remains(report, shown):
        lines.append(f"  stays: {r['kind']}{' ×' + str(r['count']) if r['count'] > 1 else ''} — {r['why']}")
    return lines


def closing_line(after: AuditReport) -> tuple[str, int]:
    """recover's last line and exit code, from the re-audit's report: 0 exactly when no repairable finding is left."""
    left = [f for f in after.findings if repairable(f)]
    stays = collections.Counter(f.kind for f in divergences(after) if not repairable(f))
    code = EXIT_FINDINGS if left else EXIT_OK
    kept = ", ".join(f"{k}{' ×' + str(n) if n > 1 else ''}" for k, n in stays.items())
    line = f"recover: re-audit: {plural(len(left), 'repairable finding')} left"
    if kept:
        line += f"; left as is (recover does not change them): {kept}"
    return f"{line}; exit code {code}", code
