"""``rmqstore demo``: what the toolkit is for, on the built-in demo store, in about a minute.

1. Generates the demo store once (``--dir``/store, with its broker.conf); later runs reuse it.
2. A rescue: copies it to ``--dir``/rescue/store and breaks the copy the ways real incidents do
   (storelib.synthetic.incidents: one topic's ``consumequeue/`` lost, a ConsumeQueue file zeroed, a torn commitlog
   tail),
   audits it (the verdict and the exact recover command), runs that command with ``--apply`` (it zeroes the torn
   tail: ``--truncate-torn-tail``, as the report's plan says), audits again (clean), and prints the command that
   undoes the rescue.
3. The healthy store: rebuilds its index and audits it against the rebuild.

Every verb runs in this process (one Spark session); its console output goes to ``--dir``/logs/<step>.log and
the demo prints the lines that tell the story, then where every output is. Every verb is given the generated
store's release (``--broker-version``): the demo never leaves the tool to guess it.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

import argparse
import contextlib
import dataclasses
import shlex
import shutil
import sys
from pathlib import Path

from storelib.errors import EXIT_FINDINGS, EXIT_OK
from storelib.reports.report import AuditReport
from storelib.reports.verdict import report_verdict
from storelib.synthetic.generator import BROKER_VERSION

BROKEN_BY = ("Audit-Log", ("Billing_v1", 0))  # the topic whose consumequeue/ is lost; the queue zeroed


def add_arguments(p: argparse.ArgumentParser) -> None:
    from jobs.cli import add_spark_options

    p.add_argument("--dir", default="demo", help="where the demo store and every output go (default: demo)")
    add_spark_options(p)


@dataclasses.dataclass(frozen=True)
class Demo:
    """The demo's paths, the Spark options every verb gets, and where each verb's console output goes."""

    root: Path
    spark: list[str]

    store = property(lambda self: self.root / "store")
    conf = property(lambda self: self.root / "broker.conf")
    rescue = property(lambda self: self.root / "rescue")
    broken = property(lambda self: self.root / "rescue" / "store")
    rebuilt = property(lambda self: self.root / "rebuilt")
    report = property(lambda self: self.root / "audit-report")
    logs = property(lambda self: self.root / "logs")

    def options(self) -> list[str]:
        """The broker config, release and Spark options of every Spark verb."""
        return ["--broker-config", str(self.conf), "--broker-version", BROKER_VERSION, *self.spark]

    def verb(self, step: str, argv: list[str]) -> tuple[int, list[str]]:
        """``rmqstore ARGV`` in this process, its console output in logs/<step>.log; (exit code, output lines)."""
        from jobs.cli import main

        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{step}.log"
        with log.open("w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            print("$ rmqstore " + shlex.join(argv), flush=True)
            code = main(argv)
        return code, log.read_text().splitlines()

    def failed(self, step: str, code: int, lines: list[str]) -> int:
        """Say that a step failed, with the end of its output and its log; the demo's exit code."""
        print(f"rmqstore demo: {step} failed (exit {code}); the end of {self.logs / step}.log:")
        print("\n".join(f"  {line}" for line in lines[-15:]))
        return code or EXIT_FINDINGS


def run(args: argparse.Namespace) -> int:
    spark = ["--profile", args.profile, *[f"--conf={c}" for c in args.conf]]
    spark += ["--master", args.master] if args.master else []
    spark += ["--work-dir", args.work_dir] if args.work_dir else []
    d = Demo(Path(args.dir).resolve(), spark)
    for part in (demo_store, rescue, healthy):
        code = part(d)
        if code:
            return code
    print_outputs(d)
    return EXIT_OK


def demo_store(d: Demo) -> int:
    if (d.store / "commitlog").is_dir():
        print(f"== the demo store (RocketMQ {BROKER_VERSION} format): reusing {d.store}")
        return EXIT_OK
    print(f"== the demo store (RocketMQ {BROKER_VERSION} format): generating it once in {d.store}")
    argv = ["generate", "--preset", "demo", "--out", str(d.store), "--write-broker-config", str(d.conf)]
    code, lines = d.verb("generate", [*argv, "--broker-version", BROKER_VERSION])
    if code:
        return d.failed("generate", code, lines)
    print(f"  {lines[-1]}")
    return EXIT_OK


def break_copy(d: Demo) -> None:
    """A fresh copy of the demo store in rescue/store, broken the ways real incidents break a store."""
    from storelib.broker.config import load_broker_config
    from storelib.synthetic import incidents

    shutil.rmtree(d.rescue, ignore_errors=True)
    shutil.copytree(d.store, d.broken)
    topic, (queue_topic, queue_id) = BROKEN_BY
    print(f"== an incident: {d.broken}, a copy of the demo store, broken the ways real incidents break a store")
    for what in (
        incidents.lose_consume_queue(d.broken, topic),
        incidents.zero_consume_queue_file(d.broken, queue_topic, queue_id),
        incidents.tear_commitlog_tail(d.broken, load_broker_config(str(d.conf))),
    ):
        print(f"  {what}")


def audit(d: Demo, step: str, store: Path, report: Path, rebuilt: Path | None = None) -> tuple[int, AuditReport | None]:
    """``rmqstore audit``, its summary line printed: (exit code, report.json), None when it could not audit."""
    argv = ["audit", "--store", str(store), "--report", str(report), *d.options()]
    code, lines = d.verb(step, [*argv, *(["--rebuilt", str(rebuilt)] if rebuilt else [])])
    if code not in (EXIT_OK, EXIT_FINDINGS) or not (report / "report.json").is_file():
        return d.failed(step, code, lines), None
    print(f"  {next(line for line in reversed(lines) if line.startswith('audit: '))}")
    return code, AuditReport.from_json((report / "report.json").read_text())


def rescue(d: Demo) -> int:
    """Break a copy, audit it, run the verdict's own --apply command as printed, audit again, say how to undo."""
    from jobs.report.console import verdict_lines

    break_copy(d)
    before, after = d.rescue / "audit-before", d.rescue / "audit-after"
    print(f"== rmqstore audit --store {d.broken} --report {before}")
    code, report = audit(d, "audit-broken", d.broken, before)
    if report is None:
        return code
    print("\n".join(verdict_lines(report)))
    apply_ = shlex.split(report_verdict(report)["recover"]["commands"][-1])[1:]
    print(f"== the verdict's command: rmqstore {shlex.join(apply_)}")
    code, lines = d.verb("recover", [*apply_, *d.spark])
    print("\n".join(f"  {line}" for line in lines if line.startswith("recover:")))
    if code:
        return d.failed("recover", code, lines)
    print(f"== rmqstore audit --store {d.broken} --report {after}")
    code, report = audit(d, "audit-recovered", d.broken, after)
    if report is None or code:
        print("\n".join(verdict_lines(report)) if report else "", end="\n" if report else "")
        return code
    (backup,) = d.rescue.glob("store-rmqstore-backup-*")
    print(f"  undo the rescue: rmqstore recover --store {d.broken} --undo {backup}")
    return EXIT_OK


def healthy(d: Demo) -> int:
    """Rebuild the healthy store's index and audit the store against it."""
    print(f"== the healthy store: rmqstore rebuild --store {d.store} --out {d.rebuilt}, then audit")
    argv = ["rebuild", "--store", str(d.store), "--out", str(d.rebuilt), *d.options()]
    code, lines = d.verb("rebuild", argv)
    if code:
        return d.failed("rebuild", code, lines)
    print(f"  {next(line for line in reversed(lines) if line.startswith('rebuild:'))}")
    return audit(d, "audit", d.store, d.report, d.rebuilt)[0]


def print_outputs(d: Demo) -> None:
    rescue_logs = ", ".join(f"{step}.log" for step in ("audit-broken", "recover", "audit-recovered"))
    print(
        "\n".join(
            [
                "== outputs",
                f"  demo store (generated once), its broker config: {d.store}, {d.conf}",
                f"  the broken copy, recovered:  {d.broken} (backup beside it)",
                f"  its audits, before / after:  {d.rescue}/audit-before/report.html, audit-after/report.html",
                f"  rebuilt index of the store:  {d.rebuilt} (consumequeue, index, checkpoint, rebuild.json)",
                f"  audit of the healthy store:  {d.report}/report.html and report.json",
                f"  every verb's console output: {d.logs}/ ({rescue_logs}, rebuild.log, audit.log)",
                f"  inspect a store:             rmqstore inspect {d.store} --broker-config {d.conf}",
            ]
        )
    )


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("demo", None))
