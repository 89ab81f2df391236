"""``rmqstore demo``: the main job end to end on the built-in demo store.

Generates the demo store once (``--dir``/store, with its broker.conf), rebuilds its
index with Spark, audits the store against the rebuilt index, and prints where every
output is. Later runs reuse the generated store.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    from jobs.cli import add_spark_options

    p.add_argument("--dir", default="demo", help="where the demo store and every output go (default: demo)")
    add_spark_options(p)


def run(args: argparse.Namespace) -> int:
    from jobs.cli import main

    root = Path(args.dir).resolve()
    store, conf = root / "store", root / "broker.conf"
    rebuilt, report = root / "rebuilt", root / "audit-report"
    spark = ["--profile", args.profile, *[f"--conf={c}" for c in args.conf]]
    if args.master:
        spark += ["--master", args.master]
    if not (store / "commitlog").is_dir():
        print(f"== generating the demo store in {store}")
        code = main(["generate", "--preset", "demo", "--out", str(store), "--write-broker-config", str(conf)])
        if code:
            return code
    else:
        print(f"== reusing the demo store in {store}")
    print("== rmqstore rebuild")
    code = main(["rebuild", "--store", str(store), "--out", str(rebuilt), "--broker-config", str(conf), *spark])
    if code:
        return code
    print("== rmqstore audit")
    code = main(
        [
            "audit",
            "--store",
            str(store),
            "--rebuilt",
            str(rebuilt),
            "--report",
            str(report),
            "--broker-config",
            str(conf),
            *spark,
        ]
    )
    print(
        "\n".join(
            [
                "== outputs",
                f"  demo store (generated once):   {store}",
                f"  its broker config:             {conf}",
                f"  rebuilt index:                 {rebuilt}/consumequeue, {rebuilt}/index, {rebuilt}/checkpoint",
                f"  rebuild report:                {rebuilt}/rebuild.json",
                f"  audit report:                  {report}/report.html and {report}/report.json",
                f"  inspect the store:             rmqstore inspect {store} --broker-config {conf}",
            ]
        )
    )
    return code


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("demo", None))
