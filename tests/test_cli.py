"""jobs.cli: the verbs, and how errors end them (exit code, one line on stderr, never a traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jobs.cli import VERBS, jar_needs, main, parser, release_commands
from jobs.runtime.jars import JarNeeds
from storelib.errors import (
    BadInput,
    CannotAudit,
    CannotCompare,
    CannotSend,
    ConfigError,
    DamageStop,
    HostileNameError,
    Refused,
    StoreFormatError,
    exit_code,
)
from tests.conftest import BROKER_CONF, CLEAN, needs_sample

ROOT = Path(__file__).resolve().parents[1]
#: the verbs the README documents, each ``rmqstore <verb>`` and ``spark-submit jobs/<verb>.py``
README_VERBS = {"generate", "inspect", "rebuild", "audit", "recover", "convert", "diff", "replay", "demo"}


def test_parser_has_every_verb_and_each_is_a_spark_submit_script() -> None:
    sub = next(a for a in parser()._actions if a.dest == "verb")
    assert set(sub.choices) == set(VERBS) == README_VERBS
    for verb in README_VERBS:
        assert f'run_verb("{verb}", None)' in (ROOT / "jobs" / f"{verb}.py").read_text(), verb
        with pytest.raises(SystemExit) as done:
            parser().parse_args([verb, "--help"])
        assert done.value.code == 0


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (BadInput("bad"), 2),
        (StoreFormatError("bad bytes", "commitlog/00000000000000000000", 12), 2),
        (HostileNameError("illegal topic"), 2),
        (ConfigError("not an integer"), 2),
        (CannotAudit("stale rebuild"), 2),
        (CannotCompare("a hole in a log"), 2),
        (CannotSend("the replay client did not start"), 2),
        (FileNotFoundError("no such file"), 2),
        (PermissionError("denied"), 2),
        (Refused("a broker holds the lock"), 1),
        (DamageStop("stopped on damage", []), 1),
    ],
)
def test_exit_code_of_each_error(error: BaseException, code: int) -> None:
    assert exit_code(error) == code


def rmqstore(*argv: str, script: str | None = None) -> subprocess.CompletedProcess:
    """``python -m jobs.cli ARGV`` (or ``python jobs/<script>.py ARGV``, as spark-submit runs it) in a child."""
    command = [sys.executable, str(ROOT / "jobs" / f"{script}.py")] if script else [sys.executable, "-m", "jobs.cli"]
    return subprocess.run([*command, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("verb", ["inspect", "rebuild"])
def test_a_bad_broker_conf_exits_2_with_one_line_and_no_traceback(tmp_path: Path, verb: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("# a broker.conf\nmappedFileSizeCommitLog=1g\n")
    store = tmp_path / "store"
    argv = [str(store)] if verb == "inspect" else ["--store", str(store), "--out", str(tmp_path / "out")]
    done = rmqstore(verb, *argv, "--broker-config", str(conf))
    assert done.returncode == 2
    assert done.stderr == f"rmqstore {verb}: error: {conf}: mappedFileSizeCommitLog='1g' is not an integer\n"
    assert done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broker.conf"]  # nothing created


@needs_sample
def test_the_command_leaves_at_once_with_every_line_it_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """jobs.cli.entry ends the process without the interpreter's teardown: what main printed is flushed first."""
    argv = ["inspect", str(CLEAN), "--broker-config", str(BROKER_CONF)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    done = rmqstore(*argv)
    assert (done.returncode, done.stdout) == (0, printed)
    assert printed.count("\n") > 50


def test_the_spark_submit_script_ends_the_same_way(tmp_path: Path) -> None:
    done = rmqstore(str(tmp_path / "none"), script="inspect")
    assert (done.returncode, done.stderr) == (2, f"rmqstore inspect: error: no store directory at {tmp_path}/none\n")


def test_an_unknown_verb_is_argparse_usage_error() -> None:
    """(In a child: ``main`` stops the Spark session of the process it runs in.)"""
    done = rmqstore("unknown-verb")
    assert done.returncode == 2 and "invalid choice: 'unknown-verb'" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "delta", "s3a"),
    [
        (["rebuild", "--store", "/data/store", "--out", "/data/out"], False, False),
        (["rebuild", "--store", "s3a://bucket/store", "--out", "/data/out"], False, True),
        (["rebuild", "--store", "/data/store", "--out", "/data/out", "--work-dir", "s3a://bucket/work"], False, True),
        (["rebuild", "--store", "/data/store", "--out", "/data/out", "--catalog", "/data/catalog"], True, False),
        (["audit", "--store", "/data/store", "--report", "/r", "--history", "s3a://bucket/history"], False, True),
        (["audit", "--stores", "a=/data/a,b=s3a://bucket/b", "--report", "/r"], False, True),
    ],
)
def test_a_verb_asks_for_delta_spark_with_a_catalog_and_s3a_with_an_s3a_location(argv, delta, s3a) -> None:
    assert jar_needs(parser().parse_args(argv)) == JarNeeds(delta=delta, s3a=s3a)


def test_the_commands_a_refusal_offers_replace_a_release_given() -> None:
    """A line given (``--broker-version 5``) that the store cannot settle: each offered command names one release."""
    for given in (["--broker-version", "5"], ["--broker-version=5"], []):
        text = release_commands(["recover", "--store", "s", *given, "--apply"], ["5.2.0", "5.4.0"])
        lines = text.splitlines()[1:]
        assert lines == [f"  rmqstore recover --store s --apply --broker-version {v}" for v in ("5.2.0", "5.4.0")]
