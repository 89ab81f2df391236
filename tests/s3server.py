"""A real S3 server on loopback for the tests: s3proxy (in-memory backend), its jar fetched once by Maven.

``s3`` is session-scoped: one server on a free 127.0.0.1 port with fixed test credentials and a bucket, the
``AWS_*`` variables pointing at it for the test process and the processes it starts, stopped by its pid at the
end. Tests using it are marked ``s3`` and skipped when neither the jar nor Maven is at hand.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from tests.lifeline import die_with_parent

ARTIFACT = "org.gaul:s3proxy:4.1.0:jar:jar-with-dependencies"
JAR = Path("~/.cache/rmq-store-rebuild/s3proxy/s3proxy-4.1.0-jar-with-dependencies.jar").expanduser()
ACCESS_KEY, SECRET_KEY, REGION, BUCKET = "rmqstore-test", "rmqstore-test-secret", "us-east-1", "rmq-test"
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class S3Server:
    """A running server: its endpoint URL, bucket and the ``AWS_*`` variables that reach it."""

    endpoint: str
    bucket: str
    pid: int

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        }

    def uri(self, key: str) -> str:
        """``s3a://BUCKET/key``."""
        return f"s3a://{self.bucket}/{key}"


def s3proxy_jar() -> Path:
    """The s3proxy jar, fetched into the cache with Maven (published .sha1 checked) the first time."""
    if not JAR.is_file():
        if shutil.which("mvn") is None:
            pytest.skip("s3proxy jar not cached and no mvn to fetch it")
        goal = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy"
        subprocess.run(
            ["mvn", "-B", "-q", "-C", goal, f"-Dartifact={ARTIFACT}", f"-DoutputDirectory={JAR.parent}"], check=True
        )
    return JAR


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(workdir: Path) -> tuple[subprocess.Popen, S3Server]:
    """Start s3proxy on a free loopback port and create the bucket; the process and the server."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    props = workdir / "s3proxy.conf"
    props.write_text(
        f"s3proxy.endpoint={endpoint}\n"
        "s3proxy.authorization=aws-v2-or-v4\n"
        f"s3proxy.identity={ACCESS_KEY}\ns3proxy.credential={SECRET_KEY}\n"
        "jclouds.provider=transient-nio2\n"
        f"jclouds.identity={ACCESS_KEY}\njclouds.credential={SECRET_KEY}\n"
    )
    log = (workdir / "s3proxy.log").open("wb")
    cmd = ["java", "-jar", str(s3proxy_jar()), "--properties", str(props)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, preexec_fn=die_with_parent)
    server = S3Server(endpoint, BUCKET, proc.pid)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"s3proxy did not start: see {workdir / 's3proxy.log'}")
        time.sleep(0.1)
    return proc, server


def stop(proc: subprocess.Popen) -> None:
    """Stop the server by its pid: TERM, then KILL after 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="session", name="s3")
def s3_server(tmp_path_factory) -> Iterator[S3Server]:
    """One s3proxy for the session, the ``AWS_*`` variables set to reach it, its bucket created."""
    proc, server = start(tmp_path_factory.mktemp("s3proxy"))
    saved = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)
    try:
        host = server.endpoint.removeprefix("http://")
        client = pafs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            region=REGION,
            scheme="http",
            endpoint_override=host,
            allow_bucket_creation=True,
        )
        client.create_dir(server.bucket)
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        stop(proc)
