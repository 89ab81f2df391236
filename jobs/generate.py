"""``rmqstore generate``: write a realistic RocketMQ store (demo data, test data, benchmark input).

Pure Python + numpy, no Spark. Settings: a ``--preset`` gives the defaults, ``--broker-config``
replaces the preset's broker settings, and every other option overrides one preset value.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

import argparse
import dataclasses
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobs.cli import add_broker_config, broker_config
from storelib.broker.config import BrokerConfig, broker_config_from_properties
from storelib.broker.versions import DEFAULT_RELEASE, rules_for
from storelib.errors import EXIT_OK, BadInput, ConfigError, Refused
from storelib.synthetic.generator import STORE_ENTRIES, generate_store
from storelib.synthetic.spec import PRESETS, GenerateSummary, GeneratorSpec

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 1000, "m": 1 << 20, "mib": 1 << 20, "mb": 10**6}
_UNITS |= {"g": 1 << 30, "gib": 1 << 30, "gb": 10**9, "t": 1 << 40, "tib": 1 << 40, "tb": 10**12}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*\Z")
MB = 10**6


def parse_size(text: str) -> int:
    """``2GiB``, ``512MiB``, ``1.5GB``, ``100000``: KiB/MiB/GiB (and K/M/G) are powers of 1024, KB/MB/GB of 1000."""
    m = _SIZE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"cannot read size {text!r} (try 512MiB or 2GiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_body_size(text: str) -> tuple[int, int]:
    """``128`` (fixed) or ``64-512`` (inclusive range), in bytes."""
    lo, sep, hi = text.partition("-")
    try:
        size = (int(lo), int(hi) if sep else int(lo))
    except ValueError:
        raise argparse.ArgumentTypeError(f"cannot read body size {text!r} (try 128 or 64-512)") from None
    if not 0 <= size[0] <= size[1]:
        raise argparse.ArgumentTypeError(f"body size {text!r}: need 0 <= low <= high")
    return size


def fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="store root to write (must be empty)")
    p.add_argument("--force", action="store_true", help="replace a store already in --out")
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="demo",
        help="defaults: demo (~20k messages, 1 MiB segments, small CQ and index files, every feature, "
        "one deleted head segment), bench-1k / bench-128 (1 GiB of 1 KiB / 128-byte bodies, broker defaults)",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument("--messages", type=int, metavar="N", help="number of message records")
    size.add_argument("--size", type=parse_size, metavar="SIZE", help="commitlog size to write, e.g. 2GiB")
    p.add_argument("--topics", type=int, metavar="N", help="business topics")
    p.add_argument("--queues", type=int, metavar="N", help="queues per topic")
    p.add_argument("--body-size", type=parse_body_size, metavar="N|LO-HI", help="body bytes, e.g. 128 or 64-512")
    p.add_argument("--seed", type=int, help="random seed (same seed and settings: same bytes)")
    p.add_argument("--ipv6-fraction", type=fraction, metavar="F", help="share of IPv6 born and store hosts")
    p.add_argument("--delay-fraction", type=fraction, metavar="F", help="share of delay messages")
    p.add_argument(
        "--transactions",
        type=fraction,
        metavar="F",
        help="share of transactional sends: 3/4 half messages (committed or rolled back), 1/4 legacy PREPARED",
    )
    p.add_argument("--long-topic", action="store_true", help="add a 150-byte topic (v2 records, invalid per 4.9.x)")
    p.add_argument("--deleted-head-segments", type=int, metavar="K", help="delete the first K segments (retention)")
    add_broker_config(p)
    p.add_argument("--write-broker-config", metavar="FILE", help="write the broker settings used as a properties file")


def spec_from_args(args: argparse.Namespace) -> GeneratorSpec:
    """The preset's spec with every option given on the command line applied."""
    spec = PRESETS[args.preset].spec
    changes: dict[str, Any] = {}  # GeneratorSpec fields, from the command line's values
    if args.messages is not None:
        changes |= {"messages": args.messages, "target_bytes": None}
    if args.size is not None:
        changes |= {"messages": None, "target_bytes": args.size}
    if args.transactions is not None:
        tx = args.transactions
        changes |= {"transaction_fraction": tx * 0.75, "legacy_transaction_fraction": tx * 0.25}
    if args.long_topic:
        changes["long_topic"] = True
    options = {
        "topics": "topics",
        "queues": "queues_per_topic",
        "body_size": "body_size",
        "seed": "seed",
        "ipv6_fraction": "ipv6_fraction",
        "delay_fraction": "delay_fraction",
        "deleted_head_segments": "deleted_head_segments",
    }
    changes |= {field: getattr(args, opt) for opt, field in options.items() if getattr(args, opt) is not None}
    return dataclasses.replace(spec, **changes)


def broker_properties(cfg: BrokerConfig) -> str:
    """``cfg`` as a broker properties file (``name=value``, booleans as true/false)."""
    lines = ["# broker settings of a store written by rmqstore generate"]
    for name, value in cfg.to_dict().items():
        if value != "":  # not set (storeType: read off the store)
            lines.append(f"{name}={str(value).lower() if isinstance(value, bool) else value}")
    return "\n".join(lines) + "\n"


def _progress(t0: float) -> Callable[[int, int], None]:
    """Print written MB and messages to stderr, at most once a second."""
    last = [0.0]

    def report(written: int, messages: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0:
            last[0] = now
            print(f"  {written / MB:,.0f} MB, {messages:,} messages, {now - t0:.0f} s", file=sys.stderr, flush=True)

    return report


def summary_line(out: str, s: GenerateSummary) -> str:
    rate = s.bytes / MB / s.seconds if s.seconds > 0 else 0.0
    return (
        f"generated {out}: {s.messages:,} messages, {s.segments} segments ({s.deleted_segments} deleted), "
        f"{s.queues} queues / {s.cq_files} CQ files, {s.index_files} index files, "
        f"{s.bytes / MB:,.1f} MB in {s.seconds:.1f} s ({rate:,.1f} MB/s)"
    )


#: the rule set of the stores the generator writes (storelib.synthetic.generator: 4.9.8 record and dispatch rules)
GENERATED_RULES = rules_for(DEFAULT_RELEASE).name


def run(args: argparse.Namespace) -> int:
    """Write the store; BadInput for settings that cannot be used, Refused for a non-empty ``--out``."""
    out = Path(args.out)
    preset = PRESETS[args.preset]
    cfg = broker_config(args) if args.broker_config else broker_config_from_properties(preset.broker)
    if args.broker_version and rules_for(args.broker_version).name != GENERATED_RULES:
        raise ConfigError(
            f"the generator writes 4.9.x stores (4.9.3 on): --broker-version {args.broker_version} is not one"
        )
    try:
        spec = spec_from_args(args)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if out.exists() and not out.is_dir():
        raise BadInput(f"{out} is not a directory")
    if out.exists() and any(out.iterdir()):
        if not args.force:
            raise Refused(f"{out} is not empty (use --force to replace a store there)")
        _remove_store(out)
    try:
        summary = generate_store(out, spec, cfg, progress=_progress(time.monotonic()))
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if summary.deleted_segments < spec.deleted_head_segments:
        print(
            f"rmqstore generate: note: only {summary.deleted_segments} of {spec.deleted_head_segments} head segments "
            "deleted (the last segment is always kept)",
            file=sys.stderr,
        )
    if args.write_broker_config:
        Path(args.write_broker_config).write_text(broker_properties(cfg), encoding="latin-1")
    print(summary_line(args.out, summary))
    return EXIT_OK


def _remove_store(root: Path) -> None:
    """Delete the store files under ``root`` (only those: other files stay)."""
    for name in STORE_ENTRIES:
        path = root / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("generate", None))
