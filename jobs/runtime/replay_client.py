"""The RocketMQ client a replay sends with: conf/replay/Replay.java on the real client's jars, in a JVM of its own
(its netty is not Spark's), fed one message per line and answering one line per message.

The jars (rocketmq-client of ``version`` and its dependencies, conf/replay/pom.xml) are fetched once with Maven
(``mvn -C``: a jar whose published .sha1 does not match fails) into ``~/.cache/rmq-store-rebuild/replay-client``
($RMQSTORE_REPLAY_CACHE), Replay.java compiled there once per source; offline once cached.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

from storelib.errors import CannotSend
from storelib.replay.messages import Send

CONF = Path(__file__).resolve().parents[2] / "conf" / "replay"
CACHE = Path(os.environ.get("RMQSTORE_REPLAY_CACHE", "~/.cache/rmq-store-rebuild/replay-client")).expanduser()
DEFAULT_CLIENT = "5.5.0"
SENT, PRESENT, FAILED = "SENT", "PRESENT", "FAILED"
START_TIMEOUT_S = 60
JVM_OPTS = ["-Xms64m", "-Xmx256m"]


@dataclasses.dataclass(frozen=True)
class Connection:
    """How to reach the cluster, as operators give it to mqadmin: the name server address(es), ACL credentials,
    TLS (``tls_config``: the client's tls.config.file)."""

    namesrv: str
    access_key: str | None = None
    secret_key: str | None = None
    tls: bool = False
    tls_config: str | None = None
    timeout_ms: int = 3000
    route_wait_ms: int = 20000  # a topic without a route asked again (a broker just started registers in seconds)


@dataclasses.dataclass(frozen=True)
class Answer:
    """What the client said of one message: SENT (fields: status, offsetMsgId, queueId, queueOffset, UNIQ_KEY),
    PRESENT (topic, offsetMsgId) or FAILED (reason)."""

    result: str
    fields: tuple[str, ...]


def classpath(version: str) -> str:
    """Replay's classes and the client's jars, fetched and built when missing."""
    lib = CACHE / version / "lib"
    if not (lib / f"rocketmq-client-{version}.jar").is_file():
        _fetch(version, lib)
    source = CONF / "Replay.java"
    classes = CACHE / version / f"classes-{hashlib.sha256(source.read_bytes()).hexdigest()[:12]}"
    if not (classes / "Replay.class").is_file():
        tmp = Path(tempfile.mkdtemp(dir=CACHE / version, prefix=".classes-"))
        try:
            _run(["javac", "-nowarn", "-encoding", "UTF-8", "-cp", f"{lib}/*", "-d", str(tmp), str(source)], "javac")
            shutil.rmtree(classes, ignore_errors=True)
            tmp.rename(classes)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return f"{classes}:{lib}/*"


def _fetch(version: str, lib: Path) -> None:
    lib.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
        mvn = ["mvn", "-B", "-q", "-C", "-Dstyle.color=never", "-f", str(CONF / "pom.xml")]
        _run([*mvn, "dependency:copy-dependencies", f"-Drmq.client.version={version}", f"-Drmq.lib={tmp}/lib"], "mvn")
        shutil.rmtree(lib, ignore_errors=True)
        Path(tmp, "lib").rename(lib)


def _run(cmd: list[str], what: str) -> None:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CannotSend(f"the replay client: {what}: {exc}") from None
    if res.returncode:
        raise CannotSend(f"the replay client: {what} failed: {(res.stdout + res.stderr).strip()[-1500:]}")


class ReplayClient:
    """A running Replay.java: ``send`` one message, get its Answer. A context manager (the JVM ends with it)."""

    def __init__(self, connection: Connection, version: str = DEFAULT_CLIENT) -> None:
        self.connection = connection
        self.version = version
        self._proc: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | None = None
        self._seq = 0

    def __enter__(self) -> ReplayClient:
        c = self.connection
        logs = CACHE / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        props = [f"-Drocketmq.client.logRoot={logs}", f"-Dtls.enable={str(c.tls).lower()}"]
        props += [f"-Dtls.config.file={c.tls_config}"] if c.tls_config else []
        args = [f"namesrv={c.namesrv}", f"timeoutMs={c.timeout_ms}", f"routeWaitMs={c.route_wait_ms}"]
        args += [f"tls={str(c.tls).lower()}"]
        cmd = ["java", *JVM_OPTS, *props, "-cp", classpath(self.version), "Replay", *args]
        env = {**os.environ, "RMQSTORE_ACCESS_KEY": c.access_key or "", "RMQSTORE_SECRET_KEY": c.secret_key or ""}
        self._log = tempfile.NamedTemporaryFile(dir=logs, prefix="replay-", suffix=".log", delete=False)
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, env=env
        )
        if self._line(START_TIMEOUT_S) != "READY":
            raise CannotSend(f"the replay client did not start: {self._tail()}")
        return self

    def send(self, message: Send) -> Answer:
        assert self._proc is not None and self._proc.stdin is not None
        r = message.record
        self._seq += 1
        fields = [str(self._seq), message.topic, str(r.flag), str(r.sys_flag)]
        fields += [_b64(message.wire_properties().encode()), _b64(r.body), ",".join(message.check_topics)]
        try:
            self._proc.stdin.write("\t".join(fields) + "\n")
            self._proc.stdin.flush()
        except OSError:
            raise CannotSend(f"the replay client stopped: {self._tail()}") from None
        c = self.connection
        timeout = (c.timeout_ms + c.route_wait_ms) / 1000 * (1 + len(message.check_topics)) + 30
        seq, result, *rest = [*(self._line(timeout) or "").split("\t"), ""]
        if seq != str(self._seq) or result not in (SENT, PRESENT, FAILED):
            raise CannotSend(f"the replay client stopped answering: {self._tail()}")
        return Answer(result, tuple(rest[:-1]))

    def _line(self, timeout: float) -> str | None:
        """The client's next line, None when it ended or said nothing for ``timeout`` s."""
        assert self._proc is not None and self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        return self._proc.stdout.readline().rstrip("\n") if ready else None

    def _tail(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        text = Path(self._log.name).read_text(errors="replace").strip()
        return f"{text[-1500:] or '(no output)'} (log: {self._log.name})"

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            if not exc[0] and self._proc is not None and self._proc.returncode == 0:
                Path(self._log.name).unlink()  # kept when something went wrong


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def wait_interval(rate: float | None, last: float) -> float:
    """Seconds to wait before the next send so that at most ``rate`` messages a second go out (none: no limit)."""
    return 0.0 if not rate else max(0.0, last + 1 / rate - time.monotonic())
