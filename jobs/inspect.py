"""``rmqstore inspect STORE``: describe a store's segments, queues, index files and checkpoint (read-only).

A table for people by default, ``--json`` for scripts. Exit code 0 when the store looks cleanly
stopped and undamaged, 1 when anything is reported (damage, odd names, an ``abort`` file).
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401  (also takes jobs/ off sys.path: this file would shadow inspect)

import argparse
import dataclasses
import datetime
import json
import sys
import time

import pyarrow as pa

from jobs.cli import add_broker_config, broker_config
from jobs.pipeline.rebuild_flow import list_segments, resolve_rules
from storelib.audit.timers import Settings, TimerAudit, audit_timers
from storelib.broker.config import BrokerConfig
from storelib.broker.rule_choice import BrokerRules
from storelib.broker.timers import SCHEMA as TIMER_SCHEMA
from storelib.errors import EXIT_FINDINGS, EXIT_OK, BadInput
from storelib.reports.inspection import IndexInfo, QueueInfo, StoreReport, inspect_store, printable
from udfs.timers import pending_by_topic, read_store, summary, write_pending


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", metavar="STORE", help="store root (holds commitlog/, consumequeue/, index/)")
    add_broker_config(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--pending-out",
        metavar="FILE",
        help="write the pending timers and delayed messages (5.x) as JSON lines: real topic and queue, due time, "
        "UNIQ_KEY, KEYS, TAGS, commitlog offset; enough to send them again",
    )


def _time(ms: int | None) -> str:
    """Milliseconds since the epoch as UTC, to the millisecond; '-' for none, the number when out of range."""
    if not ms:
        return "-"
    try:
        t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):  # a damaged header's timestamp
        return f"({ms})"
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


def _table(headers: list[str], rows: list[list[object]]) -> list[str]:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], int) for row in rows) and bool(rows) for i in range(len(headers))]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric)).rstrip()

    return [line(headers), *(line(r) for r in cells)]


def _queue_row(q: QueueInfo) -> list[object]:
    lo = q.min_offset if q.min_offset is not None else "-"
    hi = q.max_offset if q.max_offset is not None else "-"
    return [q.topic, q.queue_id, q.files, q.first_file, q.last_file, q.entries, q.pre_blank, lo, hi, q.stale_units]


def _index_row(f: IndexInfo) -> list[object]:
    begin, end = _time(f.begin_timestamp), _time(f.end_timestamp)
    full = "yes" if f.full else "no"
    return [printable(f.name), begin, end, f.begin_phy_offset, f.end_phy_offset, f.hash_slot_count, f.index_count, full]


def format_report(r: StoreReport, rules: BrokerRules) -> str:
    cfg = r.config
    out = [
        f"store {r.root}: {len(r.segments)} segments, {r.messages:,} messages, {r.blanks} BLANK ends; "
        f"{len(r.queues)} queues / {r.cq_files} CQ files; {len(r.index_files)} index files; "
        f"{'clean' if r.clean else 'NEEDS ATTENTION'}",
        f"settings: mappedFileSizeCommitLog={cfg['mappedFileSizeCommitLog']} "
        f"mappedFileSizeConsumeQueue={cfg['mappedFileSizeConsumeQueue']} maxHashSlotNum={cfg['maxHashSlotNum']} "
        f"maxIndexNum={cfg['maxIndexNum']}",
        rules.line + ("" if rules.settled else UNSETTLED),
        "",
        "COMMITLOG (" + ", ".join(sorted({f"{s.dir}/" for s in r.segments})) + ")",
    ]
    out += _table(
        ["segment", "start", "valid end", "records", "end", "first store time", "last store time", "damage"],
        [
            [
                s.name,
                s.start_offset,
                s.end_offset,
                s.records,
                s.end + (f" ({s.end_detail})" if s.end_detail else ""),
                _time(s.first_store_timestamp),
                _time(s.last_store_timestamp),
                ", ".join(f"{d['kind']}@{d['offset']}" for d in s.damage[:3]) + (" ..." if len(s.damage) > 3 else ""),
            ]
            for s in r.segments
        ],
    )
    out += ["", "TOPICS (records in the commitlog)"]
    out += _table(["topic", "records"], [[printable(t), n] for t, n in r.topics.items()])
    out += ["", "CONSUMEQUEUE"]
    out += _table(
        ["topic", "queue", "files", "first file", "last file", "entries", "pre-blank", "min", "max", "stale"],
        [_queue_row(q) for q in r.queues],
    )
    out += ["", "INDEX FILES"]
    out += _table(
        ["file", "begin time", "end time", "begin offset", "end offset", "slots used", "indexCount", "full"],
        [_index_row(f) for f in r.index_files],
    )
    out += ["", "CHECKPOINT"]
    if r.checkpoint is None:
        out.append("no checkpoint file")
    else:
        out += _table(["field", "value", "time"], [[k, str(v), _time(v)] for k, v in r.checkpoint.items()])
    out.append(f"abort: {'yes (crashed, or running)' if r.abort else 'no'}; lock: {'yes' if r.lock else 'no'}")
    problems = r.all_problems()
    if problems:
        out += ["", "PROBLEMS", *(f"- {p}" for p in problems)]
    return "\n".join(out)


#: said of detected rules that more than one rule set fits: inspect does not count the records that tell them apart
UNSETTLED = "; rebuild, audit and recover count the records these releases treat differently and stop if any"


def store_rules(store: str, cfg: BrokerConfig) -> BrokerRules:
    """The broker rules the store's clues (or ``--broker-version``) give, as rebuild resolves them."""
    try:
        segments, _ = list_segments(store, cfg)
    except BadInput:  # no commitlog/ or no segment: reported as the store's problems
        segments = []
    return resolve_rules(store, cfg, segments)[1]


def timers(report: StoreReport, batches: list, cfg: BrokerConfig, rules: BrokerRules) -> TimerAudit | None:
    """The timer store and delay levels of a 5.x store (None before 5.0 rules): storelib.audit.timers over the
    records the scan met."""
    release = tuple(int(p) for p in (cfg.brokerVersion or rules.rules.name).split(".") if p.isdigit())
    if release < (5,):
        return None
    table = pa.Table.from_batches(batches, TIMER_SCHEMA).sort_by("commitlog_offset")
    log_end = max((s.end_offset for s in report.segments), default=0)
    now = int(time.time() * 1000)
    settings = Settings(cfg.timerPrecisionMs, cfg.mappedFileSizeTimerLog, release, cfg.delay_levels_ms, now, log_end)
    return audit_timers(read_store(report.root), table, settings)


def format_timers(t: TimerAudit) -> list[str]:
    """The TIMERS section: what the timer store holds, the pending messages by real topic, the findings."""
    c = t.counts
    out = [
        "",
        "TIMERS AND DELAY LEVELS",
        f"timerlog: {c['timerlog_files']} files, {c['timerlog_units']:,} units; wheel slots used: "
        f"{c['wheel_slots_used']:,}; timers: {c['timers']:,} ({c['timers_pending']:,} pending); delayed: "
        f"{c['delayed']:,} ({c['delayed_pending']:,} pending); delay offsets the commitlog shows: "
        + (", ".join(f"level {k}: {v}" for k, v in sorted(t.delay_table.items())) or "-"),
    ]
    rows = [
        [p["kind"], printable(p["topic"]), p["pending"], _time(p["first_due_ms"]), _time(p["last_due_ms"])]
        for p in pending_by_topic(t.pending())
    ]
    if rows:
        out += _table(["pending", "real topic", "messages", "first due", "last due"], rows)
    return out


def run(args: argparse.Namespace) -> int:
    cfg = broker_config(args)
    batches: list = []
    report = inspect_store(args.store, cfg, batches)
    rules = store_rules(args.store, cfg)
    timer_audit = timers(report, batches, cfg, rules)
    if timer_audit is not None:
        report = dataclasses.replace(
            report, problems=report.problems + [f"{f.file}: {f.kind}: {f.message}" for f in timer_audit.findings]
        )
        if args.pending_out:
            write_pending(args.pending_out, timer_audit)
    if args.json:
        extra = {"timers": summary(timer_audit, [])} if timer_audit is not None else {}
        print(json.dumps({**report.to_dict(), "broker_rules": rules.to_dict(), **extra}, indent=2))
    else:
        print(format_report(report, rules) + ("\n".join(["", *format_timers(timer_audit)]) if timer_audit else ""))
    return EXIT_OK if report.clean else EXIT_FINDINGS


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("inspect", None))
