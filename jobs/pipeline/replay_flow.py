"""``rmqstore replay`` on the driver, once the records are planned (storelib.replay.messages): ``apply`` sends each
message its journal does not name through the client (jobs.runtime.replay_client), journaling each answer before the
next send; ``dry_run`` prints what would be sent; ``summary`` is the result line."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import sys
import time
from pathlib import Path

from jobs.runtime.replay_client import FAILED, PRESENT, Answer, Connection, ReplayClient, wait_interval
from storelib.replay import journal as jr
from storelib.replay.messages import Send

#: messages the console lists one by one (a dry run; the skipped ones' reasons are always counted)
CONSOLE_MESSAGES = 50


@dataclasses.dataclass
class Tally:
    """What a replay did: sent, skipped as already present (journal or cluster), failed, not sent (by reason)."""

    sent: int = 0
    present: int = 0
    failed: int = 0
    not_sent: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


def apply(
    sends: list[Send], connection: Connection, journal_path: Path, client_version: str, rate: float | None, tally: Tally
) -> None:
    """Each send the journal does not name, through the client; each answer journaled before the next send."""
    journal = jr.Journal(journal_path)
    todo = [s for s in sends if s.journal_key not in journal.done]
    tally.present += len(sends) - len(todo)
    if not todo:
        return  # the journal names every message: no client started
    last = 0.0
    try:
        with ReplayClient(connection, client_version) as client:
            for send in todo:
                time.sleep(wait_interval(rate, last))
                last = time.monotonic()
                _answered(send, client.send(send), journal, tally)
    finally:
        journal.close()


def _answered(send: Send, answer: Answer, journal: jr.Journal, tally: Tally) -> None:
    if answer.result == FAILED:
        tally.failed += 1
        print(f"  failed: {send.topic} UNIQ_KEY={send.uniq_key}: {' '.join(answer.fields)}", file=sys.stderr)
        return
    result = jr.PRESENT if answer.result == PRESENT else jr.SENT
    journal.record(jr.Entry(send.journal_key, result, answer.fields[1]))
    tally.present += result == jr.PRESENT
    tally.sent += result == jr.SENT


def dry_run(sends: list[Send], journal: str | None) -> None:
    """What would be sent, the first CONSOLE_MESSAGES one by one, and how many the journal already names."""
    done = jr.Journal(Path(journal)).done if journal and Path(journal).exists() else set()
    if done:
        print(f"  {sum(1 for s in sends if s.journal_key in done):,} of them already in the journal {journal}")
    for s in sends[:CONSOLE_MESSAGES]:
        r = s.record
        due = f", due {_time(s.deliver_ms)} (TIMER_DELIVER_MS)" if s.deliver_ms is not None else ""
        where = f"{r.store} @ {r.commitlog_offset}"
        print(f"  would send {s.topic} UNIQ_KEY={s.uniq_key} ({len(r.body)} bytes; {where}{due})")
    if len(sends) > CONSOLE_MESSAGES:
        print(f"  ... and {len(sends) - CONSOLE_MESSAGES:,} more")


def summary(applied: bool, tally: Tally, sends: int, seconds: float) -> str:
    """The result: sent, skipped as already present, failed (or, in a dry run, what would be sent), and the records
    not sent, by reason."""
    if applied:
        head = f"replay: {tally.sent:,} sent, {tally.present:,} skipped as already present, {tally.failed:,} failed"
        head += f" ({seconds:.1f} s)"
    else:
        head = f"replay (dry run, nothing sent; --apply sends): {sends:,} message(s) would be sent"
    lines = [head, *(f"  not sent: {n:,} {reason}" for reason, n in sorted(tally.not_sent.items()))]
    return "\n".join(lines)


def _time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
