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
import os
import sys
import time
from pathlib import Path

from jobs.cli import add_broker_config, broker_config
from jobs.pipeline.replay_flow import Tally, apply, dry_run, summary
from jobs.pipeline.replay_source import read_records
from jobs.runtime.replay_client import DEFAULT_CLIENT, Connection
from storelib.errors import EXIT_FINDINGS, EXIT_OK, BadInput
from storelib.replay.messages import Selection, Send, Skip, parse_time, plan


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
        apply(sends, _connection(args), Path(args.journal), args.client_version, args.rate, tally)
    else:
        dry_run(sends, args.journal)
    print(summary(args.apply, tally, len(sends), time.monotonic() - t0))
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


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("replay", None))
