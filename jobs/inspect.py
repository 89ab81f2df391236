"""``rmqstore inspect STORE``: describe a store's segments, queues, index files and checkpoint (read-only).

A table for people by default, ``--json`` for scripts. Exit code 0 when the store looks cleanly
stopped and undamaged, 1 when anything is reported (damage, odd names, an ``abort`` file).
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401  (also takes jobs/ off sys.path: this file would shadow inspect)

import argparse
import datetime
import json
import sys

from jobs.cli import add_broker_config, broker_config
from jobs.pipeline.rebuild_flow import list_segments, resolve_rules
from storelib.broker.config import BrokerConfig
from storelib.broker.versions import BrokerRules
from storelib.errors import EXIT_FINDINGS, EXIT_OK, BadInput
from storelib.reports.inspection import IndexInfo, QueueInfo, StoreReport, inspect_store, printable


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", metavar="STORE", help="store root (holds commitlog/, consumequeue/, index/)")
    add_broker_config(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")


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


def run(args: argparse.Namespace) -> int:
    cfg = broker_config(args)
    report = inspect_store(args.store, cfg)
    rules = store_rules(args.store, cfg)
    if args.json:
        print(json.dumps({**report.to_dict(), "broker_rules": rules.to_dict()}, indent=2))
    else:
        print(format_report(report, rules))
    return EXIT_OK if report.clean else EXIT_FINDINGS


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("inspect", None))
