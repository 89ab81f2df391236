"""``rmqstore replay``: stored messages sent again to a live cluster through the real RocketMQ client.

The messages of a diff's ``--out`` table (the acknowledged messages a promoted slave lacks) or of a store, filtered
by topic, store time, commitlog range or key; each as the broker would take it (storelib/replay/messages.py). A dry
run by default: it prints what it would send and contacts nothing. ``--apply`` sends, through the client in a JVM
of its own (jobs/runtime/replay_client.py), each message once: the journal (storelib/replay/journal.py) names what
the cluster holds, and before each send the cluster is asked for the message's UNIQ_KEY. Exit code: 0 every
message sent or already there, 1 some failed (run it again: it sends only what is left), 2 could not run.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

import argparse
import collections
import dataclasses
import datetime as dt
import os
import sys
import time
from pathlib import Path

from jobs.cli import add_broker_config, broker_config
from jobs.pipeline.replay_source import read_records
from jobs.runtime.replay_client import (
    DEFAULT_CLIENT,
    FAILED,
    PRESENT,
    Answer,
    Connection,
    ReplayClient,
    wait_interval,
)
from storelib.errors import EXIT_FINDINGS, EXIT_OK, BadInput
from storelib.replay import journal as jr
from storelib.replay.messages import Selection, Send, Skip, parse_time, plan

#: messages the console lists one by one (a dry run; the skipped ones' reasons are always counted)
CONSOLE_MESSAGES = 50


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="SOURCE", help="a diff's --out table, or a store root; read only")
    p.add_argument("--apply", action="store_true", help="send (default: a dry run that prints what it would send)")
    p.add_argument("--journal", metavar="FILE", help="the replay's journal (required with --apply; resumes from it)")
    p.add_argument("-n", "--namesrv", metavar="H:P[;H:P]", help="the name server address, as mqadmin -n takes it")
    p.add_argument("--access-key", metavar="AK", help="ACL access key (with --secret-key)")
    p.add_argument("--secret-key", metavar="SK", help="ACL secret key (or $RMQSTORE_SECRET_KEY)")
    p.add_argument("--tls", action="store_true", help="connect with TLS (the client's tls.enable)")
    p.add_argument("--tls-config", metavar="FILE", help="the client's tls.config.file (tls.client.* settings)")
    p.add_argument("--rate", type=float, metavar="N", help="send at most N messages a second")
    p.add_argument(
        "--route-wait",
        type=float,
        default=20.0,
        metavar="S",
        help="how long a topic the name server has no route for is asked again before it counts as holding nothing "
        "(default 20 s: a broker just started registers within seconds)",
    )
    p.add_argument("--client-version", default=DEFAULT_CLIENT, metavar="X.Y.Z", help="rocketmq-client release")
    p.add_argument("--topic", action="append", default=[], help="only messages sent to this topic (repeatable)")
    p.add_argument("--since", metavar="TIME", help="only messages stored at or after TIME (ISO 8601 UTC, or ms)")
    p.add_argument("--until", metavar="TIME", help="only messages stored before TIME")
    p.add_argument("--from-offset", type=int, metavar="OFFSET", help="only records at this commitlog offset or later")
    p.add_argument("--to-offset", type=int, metavar="OFFSET", help="only records before this commitlog offset")
    p.add_argument("--key", action="append", default=[], help="only messages with this KEYS word or UNIQ_KEY")
    add_broker_config(p)  # broker.conf's messageDelayLevel: when a pending delay is due


@dataclasses.dataclass
class Tally:
    """What a replay did: sent, skipped as already present (journal or cluster), failed, not sent (by reason)."""

    sent: int = 0
    present: int = 0
    failed: int = 0
    not_sent: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


def run(args: argparse.Namespace) -> int:
    selection = _selection(args)
    if args.apply and not (args.namesrv and args.journal):
        raise BadInput("--apply needs --namesrv (the cluster) and --journal FILE (what was sent: a rerun resumes)")
    cfg = broker_config(args)
    now = int(time.time() * 1000)
    outcomes = list(plan(read_records(args.source, selection, cfg), selection, cfg.delay_levels_ms, now))
    tally = Tally(not_sent=collections.Counter(o.reason for o in outcomes if isinstance(o, Skip)))
    sends = [o for o in outcomes if isinstance(o, Send)]
    t0 = time.monotonic()
    if args.apply:
        _apply(args, sends, tally)
    else:
        _dry_run(sends, args.journal)
    print(summary(args, tally, len(sends), time.monotonic() - t0))
    return EXIT_FINDINGS if tally.failed else EXIT_OK


def _selection(args: argparse.Namespace) -> Selection:
    return Selection(
        frozenset(args.topic),
        parse_time(args.since) if args.since else None,
        parse_time(args.until) if args.until else None,
        args.from_offset,
        args.to_offset,
        frozenset(args.key),
    )


def _connection(args: argparse.Namespace) -> Connection:
    secret = args.secret_key or os.environ.get("RMQSTORE_SECRET_KEY")
    if bool(args.access_key) != bool(secret):
        raise BadInput("ACL needs both --access-key and --secret-key")
    tls = args.tls or bool(args.tls_config)
    return Connection(
        args.namesrv, args.access_key, secret, tls, args.tls_config, route_wait_ms=int(args.route_wait * 1000)
    )


def _apply(args: argparse.Namespace, sends: list[Send], tally: Tally) -> None:
    """Each send the journal does not name, through the client; each answer journaled before the next send."""
    connection = _connection(args)
    journal = jr.Journal(Path(args.journal))
    todo = [s for s in sends if s.journal_key not in journal.done]
    tally.present += len(sends) - len(todo)
    if not todo:
        return  # the journal names every message: no client started
    last = 0.0
    try:
        with ReplayClient(connection, args.client_version) as client:
            for send in todo:
                time.sleep(wait_interval(args.rate, last))
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


def _dry_run(sends: list[Send], journal: str | None) -> None:
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


def summary(args: argparse.Namespace, tally: Tally, sends: int, seconds: float) -> str:
    """The result: sent, skipped as already present, failed (or, in a dry run, what would be sent), and the records
    not sent, by reason."""
    if args.apply:
        head = f"replay: {tally.sent:,} sent, {tally.present:,} skipped as already present, {tally.failed:,} failed"
        head += f" ({seconds:.1f} s)"
    else:
        head = f"replay (dry run, nothing sent; --apply sends): {sends:,} message(s) would be sent"
    lines = [head, *(f"  not sent: {n:,} {reason}" for reason, n in sorted(tally.not_sent.items()))]
    return "\n".join(lines)


def _time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("replay", None))
