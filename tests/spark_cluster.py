"""A real Spark standalone cluster for the suite: one master and one worker on loopback, the worker with its own /tmp.

The worker (and every executor JVM and Python worker it starts) runs in a private mount namespace with a tmpfs
on /tmp, as on YARN or Kubernetes where an executor's local disk is not the driver's: a job that hands files from
driver to executors through the driver's /tmp fails here as it would there. Stores and outputs go under
``Cluster.shared`` (under /var/tmp), which both sides see. What a cluster node has installed, the checkout (its
.venv: Spark and Python) and the shared fixtures, stays visible to the worker even when it lies under /tmp (a
clone in /tmp): those directories are bound back into the private /tmp, nothing else of the driver's /tmp is.
``Cluster.submit`` runs ``spark-submit jobs/<verb>.py`` the way conf/nightly-audit.sh does (the project zipped
with --py-files). Everything is killed at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from shlex import quote

import pytest

from jobs.runtime.jars import submit_args
from tests.lifeline import die_with_parent

ROOT = Path(__file__).resolve().parents[1]
SHARED_PARENT = Path("/var/tmp")
START_TIMEOUT = 90.0
SUBMIT_TIMEOUT = 600.0
JOB_TIMEOUT = 600
PRIVATE_TMP = "mount -t tmpfs -o size=4g tmpfs /tmp"
HOST_TMP = "/var/tmp/.rmqstore-host-tmp"  # in the worker's namespace only: the driver's /tmp, while binding back


def spark_home() -> Path:
    """The pip pyspark package directory: it holds bin/spark-class, bin/spark-submit and jars/."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def failed(done: subprocess.CompletedProcess) -> str:
    """What a finished process said, for an assertion message: its exit code and the tails of its output."""
    return f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-6000:]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> object:
    """Poll ``predicate`` until it returns something true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}")


def mount_namespace_problem() -> str | None:
    """Why a worker cannot get a private /tmp here (None when it can): needs root and unshare(1)."""
    if os.geteuid() != 0:
        return "a private mount namespace needs root"
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", PRIVATE_TMP],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return None if probe.returncode == 0 else f"cannot make a mount namespace: {probe.stderr.strip()}"


def installed_dirs() -> list[Path]:
    """What every node of a cluster has: the checkout (with its .venv) and the shared fixtures, when they exist."""
    from tests.conftest import FIXTURE_DIR

    return [p for p in (ROOT, Path(sys.prefix), FIXTURE_DIR.parent) if p.is_dir()]


def bound_from(path: Path) -> str:
    """Where ``path`` (under /tmp) is seen once the driver's /tmp is bound to HOST_TMP."""
    return f"{HOST_TMP}/{path.relative_to('/tmp')}"


def private_tmp_script(keep: list[Path]) -> str:
    """Shell lines that put a tmpfs on /tmp and bind the directories of ``keep`` that lie under /tmp back into it."""
    under_tmp = sorted({q for p in keep for q in (p.absolute(), p.resolve()) if q.is_relative_to("/tmp")})
    binds = [f"mkdir -p {quote(str(p))} && mount --bind {quote(bound_from(p))} {quote(str(p))}" for p in under_tmp]
    if not binds:
        return PRIVATE_TMP
    hide = [f"mkdir -p {HOST_TMP}", f"mount --bind /tmp {HOST_TMP}", PRIVATE_TMP, *binds, f"umount {HOST_TMP}"]
    return " && ".join(hide)


def processes_in_namespace(ns: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process whose mount namespace is ``ns`` (a /proc/PID/ns/mnt link)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.readlink(entry / "ns" / "mnt") == ns:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append((int(entry.name), cmdline))
    return found


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (None when it is gone): /proc/PID/stat's 4th field, after the ``(comm)``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def zip_project(dest: Path) -> Path:
    """jobs/, storelib/ and udfs/ (*.py, and report.html's template) in one zip for --py-files, as
    conf/nightly-audit.sh builds it."""
    with zipfile.ZipFile(dest, "w") as z:
        for package in ("jobs", "storelib", "udfs"):
            for path in sorted(p for pattern in ("*.py", "*.html") for p in (ROOT / package).rglob(pattern)):
                z.write(path, path.relative_to(ROOT).as_posix())
    return dest


@dataclasses.dataclass
class Cluster:
    master_url: str
    shared: Path  # seen by driver and executors
    env: dict[str, str]  # SPARK_HOME, loopback, the venv's python and spark-submit first on PATH
    py_files: Path
    worker_ns: str  # the worker's mount namespace

    def new_dir(self, name: str) -> Path:
        """A fresh directory under the shared dir."""
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.shared))

    def submit_command(self, verb: str, args: list[str], submit_conf: list[str] = ()) -> list[str]:
        """``spark-submit --master spark://... --jars <the pinned Delta/S3A jars> [--conf K=V ...] --py-files
        project.zip jobs/<verb>.py ARGS``, as conf/nightly-audit.sh submits (``python -m jobs.runtime.jars
        --submit-args``)."""
        confs = [item for kv in submit_conf for item in ("--conf", kv)]
        return [
            "spark-submit",
            "--master",
            self.master_url,
            "--deploy-mode",
            "client",
            *submit_args(),
            *confs,
            "--py-files",
            str(self.py_files),
            str(ROOT / "jobs" / f"{verb}.py"),
            *args,
        ]

    def submit(
        self, verb: str, args: list[str], submit_conf: list[str] = (), timeout: float = SUBMIT_TIMEOUT
    ) -> subprocess.CompletedProcess:
        """Run one job on the cluster to its end (text stdout/stderr)."""
        cmd = self.submit_command(verb, args, submit_conf)
        return subprocess.run(cmd, env=self.env, cwd=self.shared, capture_output=True, text=True, timeout=timeout)

    def start_submit(self, verb: str, args: list[str], log: Path) -> subprocess.Popen:
        """Start one job in its own process group, stdout and stderr to ``log`` (for tests that act mid-run)."""
        with log.open("w") as out:
            return subprocess.Popen(
                self.submit_command(verb, args),
                env=self.env,
                cwd=self.shared,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def worker_processes(self, marker: str) -> list[int]:
        """Pids of the worker side's processes whose command line contains ``marker``."""
        return [pid for pid, cmdline in processes_in_namespace(self.worker_ns) if marker in cmdline]

    def python_workers(self) -> list[int]:
        """Python workers running tasks: the processes an executor's ``pyspark.daemon`` forked."""
        daemons = set(self.worker_processes("pyspark.daemon"))
        return [pid for pid in daemons if parent_pid(pid) in daemons]

    def sql_python_workers(self) -> list[int]:
        """The Python workers of Spark SQL's runners (``mapInArrow``: the parse, the writers): Spark starts their
        daemon with SPARK_SIMPLIFIED_TRACEBACK set, an RDD job's daemon without it (its worker, reused, may sit idle
        while the parse runs: killing it loses no task)."""
        return [pid for pid in self.python_workers() if b"SPARK_SIMPLIFIED_TRACEBACK=" in _environ(pid)]


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent
        )


def _log_says(log: Path, text: str) -> bool:
    return log.is_file() and text in log.read_text(errors="replace")


def _cluster_env(shared: Path) -> dict[str, str]:
    conf_dir = shared / "spark-conf"  # empty: no spark-defaults.conf or log4j config of the machine leaks in
    conf_dir.mkdir()
    venv_bin = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_NO_DAEMONIZE": "1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PATH": f"{venv_bin}:{spark_home() / 'bin'}:{os.environ.get('PATH', '')}",
    }


def _stop(master: subprocess.Popen | None, worker: subprocess.Popen | None, worker_ns: str | None) -> None:
    """Kill the worker side by its mount namespace (executors and Python daemons included), then the master."""
    if worker_ns:
        for pid, _ in processes_in_namespace(worker_ns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for proc in (worker, master):
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _start_daemon(
    role: str, args: list[str], env: dict[str, str], log: Path, ready: str, prefix: list[str] = ()
) -> subprocess.Popen:
    """Start ``spark-class org.apache.spark.deploy.<role>``; wait until its log says ``ready``."""
    cmd = [*prefix, str(spark_home() / "bin" / "spark-class"), f"org.apache.spark.deploy.{role}", *args]
    proc = _start(cmd, env, log)
    wait_for(lambda: _log_says(log, ready) or proc.poll() is not None, START_TIMEOUT, f"the Spark {role}")
    assert proc.poll() is None, f"the Spark {role} exited: {log.read_text()[-3000:]}"
    return proc


def bare_node_env(env: dict[str, str], python: str) -> dict[str, str]:
    """``env`` for a node that has Spark but not the project's packages: ``python`` as PYSPARK_PYTHON, the venv
    neither on PATH nor active."""
    venv_bin = str(Path(sys.executable).parent)
    path = ":".join(p for p in env["PATH"].split(":") if p != venv_bin)
    kept = {k: v for k, v in env.items() if k not in ("VIRTUAL_ENV", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    return {**kept, "PYSPARK_PYTHON": python, "PATH": path}


@contextlib.contextmanager
def standalone_cluster(worker_python: str | None = None) -> Iterator[Cluster]:
    """Start a master and a worker (2 cores, 2 GiB, private /tmp) on loopback; kill both and their children at exit.

    ``worker_python``: the worker runs as a node without the project's packages (``bare_node_env``), its executors
    with that Python unless a job brings its own (``--archives``); default: the venv's Python, as everywhere."""
    problem = mount_namespace_problem()
    if problem:
        pytest.skip(f"no standalone cluster with a private /tmp: {problem}")
    shared = Path(tempfile.mkdtemp(prefix="rmqstore-cluster-", dir=SHARED_PARENT))
    env = _cluster_env(shared)
    master_url = f"spark://127.0.0.1:{free_port()}"
    loopback = ["--host", "127.0.0.1", "--port"]
    master = worker = worker_ns = None
    try:
        master_args = [*loopback, master_url.rsplit(":", 1)[1], "--webui-port", str(free_port())]
        master = _start_daemon("master.Master", master_args, env, shared / "master.log", "I have been elected leader")
        worker_args = [master_url, *loopback, str(free_port()), "--webui-port", str(free_port())]
        worker_args += ["--cores", "2", "--memory", "2g", "--work-dir", str(shared / "worker")]
        private_tmp = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f'{private_tmp_script(installed_dirs())} && exec "$@"',
            "sh",
        ]
        registered = "Successfully registered with master"
        worker_env = bare_node_env(env, worker_python) if worker_python else env
        worker = _start_daemon("worker.Worker", worker_args, worker_env, shared / "worker.log", registered, private_tmp)
        worker_ns = os.readlink(f"/proc/{worker.pid}/ns/mnt")  # unshare, sh and spark-class exec: pid is the JVM
        assert worker_ns != os.readlink("/proc/self/ns/mnt"), "the worker shares the driver's mount namespace"
        submit_env = {**env, "PYSPARK_PYTHON": worker_python} if worker_python else env  # executors' default
        yield Cluster(master_url, shared, submit_env, zip_project(shared / "rmqstore.zip"), worker_ns)
    finally:
        _stop(master, worker, worker_ns)
        shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The suite's standalone cluster (session scope: started once, killed at the end even when tests fail)."""
    with standalone_cluster() as c:
        yield c
