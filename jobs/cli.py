"""``rmqstore <verb>``: one command line for every job.

Each verb is a module in ``jobs/`` with ``add_arguments(parser)`` and ``run(args) -> int``, and is also a
spark-submit entry point (``spark-submit jobs/<verb>.py ...``). Errors end a verb with the exit code
storelib.errors gives them (0 success/clean, 1 findings or refused, 2 could not run), never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import os
import re
import shlex
import sys
from typing import TYPE_CHECKING, NoReturn

from jobs.pipeline.context import tool_version
from storelib.broker.config import BrokerConfig, load_broker_config, validate
from storelib.errors import AmbiguousRelease, RmqStoreError, exit_code
from storelib.findings import Finding

if TYPE_CHECKING:
    from jobs.pipeline.context import Run
    from jobs.runtime.jars import JarNeeds

VERBS = {
    "generate": "write a realistic demo/test store the way a broker would",
    "inspect": "describe a store: segments, queues, index files, checkpoint",
    "rebuild": "rebuild ConsumeQueue and IndexFile files from the commitlog with Spark",
    "audit": "compare a live store with the rebuilt index and report divergences",
    "recover": "put a verified index back into a stopped store, with backup and undo",
    "convert": "turn a DLedger (or mixed) store into a plain CommitLog store with Spark",
    "diff": "compare two stores of one broker by message: what one holds and the other lacks (after a failover)",
    "replay": "send stored messages (a diff's --out, a store) again to a live cluster, once each (dry run by default)",
    "demo": "generate the demo store once, rebuild, audit, print where the outputs are",
}


def add_broker_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--broker-config",
        metavar="FILE",
        help="the broker's properties file (broker.conf); unset settings take RocketMQ's defaults",
    )
    p.add_argument(
        "--broker-version",
        metavar="X.Y[.Z]",
        help="the broker release whose rules apply (storelib.broker.versions); default: detected from the store",
    )


def add_spark_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", help="Spark master URL (default: local[*], or what spark-submit sets)")
    p.add_argument("--profile", default="local", help="settings from conf/<profile>.conf (local, cluster)")
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark setting; wins over spark-submit's settings and the profile",
    )
    p.add_argument(
        "--verbose",
        dest="conf",
        action="append_const",
        const="spark.rmqstore.verbose=true",
        help="Spark's own logging on the console (default: our progress and summary, Spark's errors only)",
    )
    p.add_argument(
        "--work-dir",
        metavar="URI",
        help="where executors leave intermediate files (default: next to the output); removed afterwards",
    )


def broker_config(args: argparse.Namespace) -> BrokerConfig:
    """``--broker-config`` and ``--broker-version``; for a verb with ``--store``, the segment size is read off its
    files when the config does not set it."""
    if getattr(args, "store", None) and not getattr(args, "undo", None):
        from jobs.pipeline.listing import store_broker_config

        cfg = store_broker_config(args.store, getattr(args, "broker_config", None))
    else:
        cfg = load_broker_config(getattr(args, "broker_config", None))
    version = getattr(args, "broker_version", None)
    if version:
        cfg = dataclasses.replace(cfg, brokerVersion=version)
        validate(cfg)
    return cfg


def spark_run(app: str, args: argparse.Namespace, cfg: BrokerConfig) -> Run:
    """The run's context, its Spark session (new or reused) starting in the background: the verb reads the store
    meanwhile, and waits at its first use of ``run.spark``."""
    from jobs.pipeline.context import Run
    from jobs.runtime.session import session_start, start_in_background

    start = session_start(app, args.master, args.profile, args.conf, jar_needs(args))
    return Run(start_in_background(start), cfg, progress=True, work_root=args.work_dir)


def jar_needs(args: argparse.Namespace) -> JarNeeds:
    """The jars a verb's session loads: delta-spark for ``--catalog`` (the one Delta table Spark writes), S3A when
    an argument is an ``s3a://`` location."""
    from jobs.runtime.jars import JarNeeds

    return JarNeeds.of(vars(args).values(), delta=bool(getattr(args, "catalog", None)))


def print_findings(findings: list[Finding]) -> None:
    for f in findings:
        print(f"  {f.severity.upper():7} {f.kind}: {f.file}: {f.message}", file=sys.stderr)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rmqstore", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"rmqstore {tool_version()}")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, help_text in VERBS.items():
        module = importlib.import_module(f"jobs.{verb}")
        module.add_arguments(sub.add_parser(verb, help=help_text, description=help_text))
    return p


def run_verb(verb: str, argv: list[str] | None) -> int:
    """Entry point of ``spark-submit jobs/<verb>.py``: the same options as ``rmqstore <verb>``."""
    return main([verb, *(sys.argv[1:] if argv is None else argv)])


_depth = 0  # verbs run verbs (demo): only the outermost call stops Spark
LOCAL_MASTER = re.compile(r"local(\[[^\]]*\])?")  # one JVM: no executor to shut down


def main(argv: list[str] | None = None) -> int:
    global _depth
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    module = importlib.import_module(f"jobs.{args.verb}")
    _depth += 1
    try:
        return module.run(args)
    except (RmqStoreError, OSError) as exc:
        return failed(args.verb, argv, exc)
    except Exception as exc:  # a Spark job failed: one line naming it, never a traceback
        first = next(iter(str(exc).strip().splitlines()), "")
        print(f"rmqstore {args.verb}: error: {type(exc).__name__}: {first}", file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        print(f"rmqstore {args.verb}: interrupted", file=sys.stderr)
        return exit_code(KeyboardInterrupt())
    finally:
        _depth -= 1
        if _depth == 0:
            _stop_spark()


def entry() -> NoReturn:
    """The ``rmqstore`` command: ``main``, then out at once, its streams flushed. Once a verb is done nothing is left
    to clean up but the interpreter's teardown of pyspark, pandas, numba and pyarrow, and the driver JVM of a local
    master begins its own exit only when this process is gone."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe, a closed stream: nothing more to say there
            stream.flush()
    os._exit(code)


def failed(verb: str, argv: list[str], exc: RmqStoreError | OSError) -> int:
    """Say why a verb could not finish (one line, never a traceback); its exit code (storelib.errors)."""
    print(f"rmqstore {verb}: error: {exc}", file=sys.stderr)
    if isinstance(exc, AmbiguousRelease) and exc.choices:
        print(release_commands(argv, exc.choices), file=sys.stderr)
    return exit_code(exc)


def release_commands(argv: list[str], choices: list[str]) -> str:
    """The same command once per release the store's clues allow, ``--broker-version`` added: the operator picks
    the release the broker ran."""
    given = [k for k, a in enumerate(argv) if a == "--broker-version"]
    rest = [a for k, a in enumerate(argv) if k not in {*given, *(g + 1 for g in given)}]
    rest = [a for a in rest if not a.startswith("--broker-version=")]  # the release given is the one replaced
    lines = [shlex.join(["rmqstore", *rest, "--broker-version", v]) for v in choices]
    return "run it again with the release the broker ran, one of:\n" + "\n".join(f"  {line}" for line in lines)


def _stop_spark() -> None:
    """Stop a session a verb started, so executors (local-cluster, YARN) shut down cleanly.

    A local master's session that this process started is left to its JVM: when this process exits, the driver
    JVM reads the end of its stdin (pyspark's gateway), exits, and its shutdown hook stops the SparkContext and
    removes Spark's directories; stopping it from here first costs a second more (make bench)."""
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    from jobs.runtime.session import under_spark_submit

    active = SparkSession.getActiveSession()
    if active is not None and (under_spark_submit() or not LOCAL_MASTER.fullmatch(active.sparkContext.master or "")):
        active.stop()


if __name__ == "__main__":
    entry()
