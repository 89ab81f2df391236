"""Stores written by the REAL RocketMQ broker (the oracle for byte-for-byte tests), and what a broker serves.

`build_store(version, variant)` fetches the release jars with Maven, starts NamesrvStartup and BrokerStartup on
free loopback ports, sends the seeded Java workload (Workload.java) with the real client, lets delays, timers and
transaction checks run, and stops the broker (SIGTERM: its shutdown hook; variant kill9: kill -9 in the middle
of the send burst). The result is cached under `<cache>/stores/<version>-<variant>-seed<seed>-<hash>/` (`store/`,
`broker.conf`, `sent.jsonl`, `COMPLETE`, `logs/`; kill9 also `served.jsonl`); `<cache>` is $RMQSTORE_CACHE or
~/.cache/rmq-store-rebuild, `<hash>` covers the workload, the pom and the harness settings.
`served(version, store_dir)` starts a broker on a copy of a store and dumps every queue's min/max offset, the
messages it returns (also tag-filtered) and its answers to index queries by key, UNIQ_KEY and (5.5) tag, cached.

Every process runs in its own process group and is killed at the end (finally + atexit); every wait is bounded.
Command line: `python -m tests.broker.harness VERSION [VARIANT [SEED]]` builds one store and prints its path.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storelib.broker.config import OLD_NAMES, read_properties  # read_properties: a broker.conf as the broker reads it
from tests.broker import recorded
from tests.lifeline import die_with_parent

HERE = Path(__file__).resolve().parent
CACHE = recorded.CACHE

# broker/namesrv version -> client version (Maven Central lacks parts of broker 4.9.8 and of 5.5.1, and client
# 4.9.7: the 4.9.8 client talks to every 4.x broker). One release of each line and the release on each side of every
# row of storelib.broker.versions' release table (tests/broker/FACTS.md, "Release by release").
VERSIONS = {
    **{v: "4.9.8" for v in ("4.3.2", "4.5.2", "4.7.0", "4.7.1", "4.8.0", "4.9.0", "4.9.1", "4.9.2", "4.9.3", "4.9.7")},
    **{v: v for v in ("5.0.0", "5.1.0", "5.1.1", "5.1.3", "5.1.4", "5.2.0", "5.3.0", "5.3.1", "5.3.2", "5.3.3")},
    **{v: v for v in ("5.4.0", "5.5.0")},
}
# releases whose rocketmq-namesrv jar Maven Central lacks -> the release whose namesrv runs beside their broker (the
# name server keeps routes only: it writes nothing into the store)
NAMESRV_FROM = {"5.1.3": "5.1.4", "5.3.0": "5.3.3", "5.3.1": "5.3.3", "5.3.2": "5.3.3"}
# the releases the suite always reads (the others: the release matrix, pytest -m matrix)
CORE_VERSIONS = ("5.5.0", "5.3.3", "4.9.7")
# what the workload may use, by the first release whose jars have it (javap, tests/broker/FACTS.md): LMQ
# (INNER_MULTI_DISPATCH: store MultiDispatch / ConsumeQueue.multiDispatchLmqQueue, 4.9.3), timer messages
# (TimerMessageStore, 5.0.0), BatchCQ topics (BatchConsumeQueue, 5.0.0)
FEATURES = {"lmq": (4, 9, 3), "timer": (5, 0, 0), "batchcq": (5, 0, 0), "pop": (5, 0, 0)}
# A one-node DLedger group (DLedgerCommitLog): n0 elects itself leader. dLegerPeers (n0-127.0.0.1:<port>) is
# added at each start, like listenPort; the saved broker.conf has no port.
DLEDGER_SETTINGS = {"enableDLegerCommitLog": "true", "dLegerGroup": "oracle-a", "dLegerSelfId": "n0"}
# variant -> broker settings on top of STORE_SETTINGS, and the versions it is made for
VARIANTS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "default": ({}, tuple(VERSIONS)),
    "crc": ({"enabledAppendPropCRC": "true"}, ("5.5.0", "5.3.3")),
    "rocksdb": ({"storeType": "defaultRocksDB"}, ("5.5.0",)),
    "rocksdb-stale-topics": ({"storeType": "defaultRocksDB"}, ("5.5.0",)),
    "doublewrite-lmq": ({"rocksdbCQDoubleWriteEnable": "true", "combineCQUseRocksdbForLmq": "true"}, ("5.5.0",)),
    "kill9": ({}, CORE_VERSIONS),
    "upgraded": ({}, ("5.5.0", "5.3.3")),
    # the workload, then its consumers (Consumers.java): retries, a dead-letter queue, orderly and (5.x) POP
    "consumers": ({}, CORE_VERSIONS),
    # 4.8.0 first (no topic#T#<TAGS> IndexFile keys), small IndexFiles: the upgrade falls inside one, and both
    # releases' broker-written property strings end with 0x02 (no property boundary)
    "upgraded-4.8.0": ({"maxIndexNum": "1500", "maxHashSlotNum": "997"}, ("5.5.0",)),
    # 5.1.4 first (its broker-written property strings end without 0x02, 5.5.0's with; TopicBatchCQ a BatchCQ topic
    # from 5.1.4's run on); and 4.9.7, then 5.1.4, then 5.5.0 (two upgrades: the second falls mid-segment too)
    "upgraded-5.1.4": ({}, ("5.5.0",)),
    "upgraded-twice": ({}, ("5.5.0",)),
    # 4.5.2 first: its IndexFiles' hashSlotCount counts every put, 5.5.0's occupied slots (the upgrade inside one)
    "upgraded-4.5.2": ({}, ("5.5.0",)),
    # one release of each 5.x line, and 4.9.7
    "dledger": (DLEDGER_SETTINGS, ("5.5.0", "4.9.7", "5.0.0", "5.1.4", "5.2.0", "5.3.3", "5.4.0")),
    "dledger-kill9": (DLEDGER_SETTINGS, ("5.5.0", "4.9.7")),
    "dledger-mixed": (DLEDGER_SETTINGS, ("5.5.0",)),
    # Timers.java instead of the workload: timers and delay levels still pending at the stop, behind 2,080-byte
    # timerlog files (39 units each) so their units lie before the broker's timerlog recovery window
    "timers": ({"mappedFileSizeTimerLog": "2080"}, tuple(v for v in VERSIONS if v >= "5")),
    # LmqRace.java instead of the workload: threads sending to their own queues of one topic, naming the same LMQ
    # queues at once. The releases whose appends then gave LMQ offsets out of step (repeats, skips, a lower offset
    # after a higher one); 4.9.7, 5.2.0, 5.3.0 … 5.5.0 gave them in step (tests/broker/FACTS.md)
    "lmq-race": ({}, ("5.0.0", "5.1.0", "5.1.1", "5.1.3", "5.1.4")),
    # a master (ASYNC_MASTER, brokerId 0) and its slave (SLAVE, brokerId 1) of one brokerName: Failover.java's sends,
    # the slave paused (SIGSTOP) part way, then the master killed -9; store/ is the old master's, slave/store/ the
    # slave's (FAILOVER_*)
    "failover": ({"brokerRole": "ASYNC_MASTER", "brokerIP2": "127.0.0.1"}, ("5.5.0",)),
}
#: variants sent by Timers.java (mode send), not Workload.java
TIMER_VARIANTS = ("timers",)
#: variants sent by LmqRace.java, not Workload.java
LMQ_RACE_VARIANTS = ("lmq-race",)
#: variants whose workload is then consumed by Consumers.java (consumed.jsonl: every delivery)
CONSUMER_VARIANTS = ("consumers",)
# variants first written in file mode (the workload once, sent-filemode.jsonl), then by the same broker switched
# to DLedger (the workload again): the old commitlog/ stays below dividedCommitlogOffset. TopicBatchCQ is a plain
# topic there: the second run's createTopic may not set queue.type again ("unchangeable attribute")
MIXED_VARIANTS = ("dledger-mixed",)
# variants written first by older releases (in this order, each stopped cleanly), then by the variant's own release on
# the same files: the in-place upgrade RocketMQ documents. Each run sends the workload (TopicBatchCQ a BatchCQ topic
# only when the first run's release has them: a later createTopic may not set queue.type again, and one without it
# keeps the topic's queue.type); the older runs' sends go to sent-<release>.jsonl
UPGRADED_FROM = {
    "upgraded": ("4.9.7",),
    "upgraded-4.8.0": ("4.8.0",),
    "upgraded-5.1.4": ("5.1.4",),
    "upgraded-twice": ("4.9.7", "5.1.4"),
    "upgraded-4.5.2": ("4.5.2",),
}
# variants whose store/config/topics.json is written before the first start: a file the broker does not maintain
# (storeType=defaultRocksDB keeps topic configs in config/topics/), as an operator pre-declared it for 4.9
STALE_TOPICS_JSON = ("rocksdb-stale-topics",)
STALE_TOPICS = {
    "dataVersion": {"counter": 1, "timestamp": 1700000000000},
    "topicConfigTable": {
        t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicFilterType": "SINGLE_TAG"}
        for t in ("TopicOrders", "TopicLogs", "TopicPayments", "TopicTx")
    },
}
#: variants sent by Failover.java to a master/slave pair (``_write_failover``)
FAILOVER_VARIANTS = ("failover",)
#: the failover's sends; acknowledged sends after which the slave is paused (SIGSTOP: a replica that lags), and after
#: which the master is killed -9; the slave is then let go on (SIGCONT) for FAILOVER_SETTLE_S and stopped cleanly
FAILOVER_SENDS, FAILOVER_PAUSE_AFTER, FAILOVER_KILL_AFTER, FAILOVER_SETTLE_S = 400, 150, 300, 3.0
SLAVE_SETTINGS = {"brokerId": "1", "brokerRole": "SLAVE"}
# variants whose broker is killed with kill -9 in the middle of the send burst
KILL9_VARIANTS = ("kill9", "dledger-kill9")
# The store settings (those of /work/shared/fixtures/rocketmq-5.5.0-sample) written to the cached broker.conf.
STORE_SETTINGS = {
    "brokerClusterName": "OracleCluster",
    "brokerName": "oracle-a",
    "brokerId": "0",
    "mappedFileSizeCommitLog": "65536",
    "mappedFileSizeConsumeQueue": "6000",
    "maxHashSlotNum": "500",
    "maxIndexNum": "2000",
    "flushDiskType": "SYNC_FLUSH",
    "autoCreateTopicEnable": "true",
    "defaultTopicQueueNums": "4",
    "enableMultiDispatch": "true",
    "enableLmq": "true",
    "messageDelayLevel": "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
    "transactionCheckInterval": "2000",
    "transactionTimeOut": "3000",
    "transactionOpBatchInterval": "200",
    "enabledAppendPropCRC": "false",
    "storeType": "default",
}
# variants whose store gets served.jsonl (kill9: the oracle for recovery; rocksdb: no ConsumeQueue files to read)
SERVED_VARIANTS = (*KILL9_VARIANTS, "rocksdb")
# the broker's own queues a store may hold besides those the workload sends to
SYSTEM_QUEUES = [
    "RMQ_SYS_TRANS_HALF_TOPIC/0",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC/0",
    "rmq_sys_wheel_timer/0",
    *(f"SCHEDULE_TOPIC_XXXX/{queue_id}" for queue_id in range(18)),  # one queue per delay level
]
# Settings a served run adds: no timer wheel (5.x timerWheelEnable; a store without timerwheel/timerlog would deliver
# every timer message again), no transaction check (it puts unresolved half messages again), index queries up to
# LOOKUP_MAX results (maxMsgsNumBatch caps queryMessage, default 64; a tag has more messages than that).
LOOKUP_MAX = 1000
SERVE_SETTINGS = {
    "timerWheelEnable": "false",
    "transactionCheckInterval": "86400000",
    "maxMsgsNumBatch": str(LOOKUP_MAX),
}
BIND_ATTEMPTS = 3  # starts of a namesrv and broker pair when another process took a port they were given
REPLAY_SECONDS = 10  # a replay's broker runs this long after it listens (its dispatch of ~1 MB takes < 1 s)
DELIVERED = 1 << 40  # a delay queue offset past any store's end
SENDS = 1200
SEED = 7
# every version's default store is also written with these seeds: a test fitted to one seed's store fails on another
SEEDS = (7, 8)
KILL9_AFTER_SENDS = 700
JVM_OPTS = [
    "-Xms256m",
    "-Xmx512m",
    "-XX:MaxDirectMemorySize=512m",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
]
# 4.9.x reads its logback configuration from $ROCKETMQ_HOME/conf and exits without one.
LOGBACK_XML = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${user.home}/logs/%s.log</file>
    <encoder><pattern>%%d %%-5level [%%thread] %%logger{20} - %%msg%%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""

_RUNNING: set[subprocess.Popen] = set()


class HarnessError(RuntimeError):
    """The real broker could not be fetched, started, fed or stopped as planned."""


@dataclass(frozen=True)
class BrokerStore:
    """A store the real broker wrote: `root` is the store root (commitlog/, consumequeue/, index/, checkpoint...)."""

    version: str
    variant: str
    dir: Path
    seconds: float

    @property
    def root(self) -> Path:
        return self.dir / "store"

    @property
    def broker_conf(self) -> Path:
        return self.dir / "broker.conf"

    @property
    def slave_root(self) -> Path:
        """Failover variants: the slave's store root (`root` is the old master's)."""
        return self.dir / "slave" / "store"

    @property
    def sent(self) -> list[dict]:
        """What the client got back, one line per send (Workload.java: kind, n, status, msgId, topic, ...)."""
        return read_jsonl(self.dir / "sent.jsonl")

    @property
    def served(self) -> list[dict]:
        """kill9 and rocksdb stores: what a broker served from a copy of this store after its recovery (`served`)."""
        return read_jsonl(self.dir / "served.jsonl")


def read_jsonl(path: Path) -> list[dict]:
    """One JSON object per line."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def sources_hash(version: str, variant: str) -> str:
    """What defines one store: Workload.java, the pom and the settings of that version and variant (a new variant
    or version, or edits elsewhere, keep the other stores' cache)."""
    h = hashlib.sha256()
    own = {
        **dict.fromkeys(TIMER_VARIANTS, "Timers.java"),
        **dict.fromkeys(LMQ_RACE_VARIANTS, "LmqRace.java"),
        **dict.fromkeys(FAILOVER_VARIANTS, "Failover.java"),
        **dict.fromkeys(CONSUMER_VARIANTS, "Consumers.java"),
    }
    for name in ("Workload.java", "pom.xml", *((own[variant],) if variant in own else ())):
        h.update((HERE / name).read_bytes())
    settings = [VERSIONS[version], store_settings(version, variant), SENDS, KILL9_AFTER_SENDS, JVM_OPTS]
    if variant in FAILOVER_VARIANTS:
        settings += [FAILOVER_SENDS, FAILOVER_PAUSE_AFTER, FAILOVER_KILL_AFTER, FAILOVER_SETTLE_S, SLAVE_SETTINGS]
    if variant in UPGRADED_FROM or variant in STALE_TOPICS_JSON:
        settings += [UPGRADED_FROM.get(variant), variant in STALE_TOPICS_JSON and STALE_TOPICS]
    h.update(json.dumps(settings, sort_keys=True).encode())
    return h.hexdigest()[:12]


def java_available() -> str | None:
    """None when java, javac and mvn are on PATH, else what is missing (a reason to skip)."""
    missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
    return f"not on PATH: {', '.join(missing)}" if missing else None


def broker_lib(version: str) -> Path:
    """The broker, namesrv and client jars with their dependencies (mvn dependency:copy-dependencies, once); for a
    release in NAMESRV_FROM the broker and its own client only (artifact-pom.xml)."""
    lib = CACHE / "broker" / version / "lib"
    if not list(lib.glob(f"rocketmq-broker-{version}.jar")):
        if version in NAMESRV_FROM:
            cmd = ["mvn", "-q", "-B", "-f", str(HERE / "artifact-pom.xml"), "dependency:copy-dependencies"]
            cmd += ["-Drmq.artifact=rocketmq-broker", f"-Drmq.version={version}", f"-Drmq.lib={lib}"]
        else:
            cmd = ["mvn", "-q", "-B", "-f", str(HERE / "pom.xml"), "dependency:copy-dependencies"]
            cmd += [f"-Drmq.broker.version={version}", f"-Drmq.client.version={VERSIONS[version]}", f"-Drmq.lib={lib}"]
        _run_checked(cmd, timeout=900)
    return lib


def client_lib(version: str) -> Path:
    """The client jars the workload of a broker release runs on: the broker's lib when the client is of the same
    release, else the client release's own jars (artifact-pom.xml, once): on the broker's classpath an older
    rocketmq-common wins and the 4.9.8 client misses classes (4.8.0: CompressionType)."""
    client = VERSIONS[version]
    if client == version:
        return broker_lib(version)
    lib = CACHE / "broker" / f"client-{client}" / "lib"
    if not list(lib.glob(f"rocketmq-client-{client}.jar")):
        cmd = ["mvn", "-q", "-B", "-f", str(HERE / "artifact-pom.xml"), "dependency:copy-dependencies"]
        _run_checked([*cmd, "-Drmq.artifact=rocketmq-client", f"-Drmq.version={client}", f"-Drmq.lib={lib}"], 900)
    return lib


def workload_classes(version: str) -> Path:
    """Workload.java, Served.java, Bench.java (make bench's sends), Timers.java, Consumers.java, Failover.java and
    LmqRace.java compiled against this version's client jars (once per source hash)."""
    sources = [
        HERE / f"{name}.java" for name in ("Workload", "Served", "Bench", "Timers", "Consumers", "Failover", "LmqRace")
    ]
    digest = hashlib.sha256(b"".join(src.read_bytes() for src in sources)).hexdigest()[:12]
    out = CACHE / "broker" / version / f"workload-{digest}"
    if not (out / "Served.class").is_file():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        cp = f"{client_lib(version)}/*"
        cmd = ["javac", "-nowarn", "-encoding", "UTF-8", "-cp", cp, "-d", str(tmp), *map(str, sources)]
        _run_checked(cmd, timeout=300)
        try:
            tmp.replace(out)
        except OSError:  # another process compiled it first
            shutil.rmtree(tmp)
    return out


def _run_checked(cmd: list[str], timeout: float) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if res.returncode:
        raise HarnessError(f"{cmd[0]} failed ({res.returncode}): {(res.stdout + res.stderr)[-2000:]}")


def free_broker_port() -> int:
    """A listenPort whose fastListenPort (port-2) and HA port (port+1) are free on 127.0.0.1 too."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port > 1026 and all(_port_free(p) for p in (port - 2, port - 1, port, port + 1)):
            return port
    raise HarnessError("no free block of loopback ports")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start(cmd: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A process in its own process group, output to `log`, remembered for the atexit cleanup."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        env = {**os.environ, **(env or {})}
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    _RUNNING.add(proc)
    return proc


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Signal the process group, wait at most `timeout` s, then kill -9 it."""
    try:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=timeout)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    _RUNNING.discard(proc)


@atexit.register
def _kill_all() -> None:
    for proc in list(_RUNNING):
        stop(proc, signal.SIGKILL, timeout=5)


def wait_for(what: str, ready, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Poll `ready()` every 0.2 s for at most `timeout` s; fail early when `proc` died."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc is not None and proc.poll() is not None:
            raise HarnessError(f"{what}: the process exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise HarnessError(f"{what}: not ready after {timeout:.0f} s")
        time.sleep(0.2)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Running:
    """A namesrv and broker pair on loopback."""

    version: str
    run_dir: Path
    namesrv_addr: str
    broker_addr: str
    broker_name: str
    broker: subprocess.Popen

    def workload(self, mode: str, *args: str) -> list[str]:
        """The command line of Workload.java's `mode` (or of Served.java: mode "served"; Bench.java: "bench";
        Timers.java: "timers"; Consumers.java: "consumers"; Failover.java: "failover"; LmqRace.java: "lmq-race") against
        this broker."""
        cp = f"{workload_classes(self.version)}:{client_lib(self.version)}/*"
        addrs = [f"namesrv={self.namesrv_addr}", f"broker={self.broker_addr}", f"brokerName={self.broker_name}"]
        own = {
            "served": "Served",
            "bench": "Bench",
            "timers": "Timers",
            "lmq-race": "LmqRace",
            "consumers": "Consumers",
            "failover": "Failover",
        }
        main = [own[mode]] if mode in own else ["Workload", mode]
        return ["java", *JVM_OPTS, f"-Duser.home={self.run_dir}", "-cp", cp, *main, *addrs, *args]

    def run_workload(self, mode: str, *args: str, timeout: float) -> None:
        """Workload.java's `mode` (Served.java for "served", Bench.java for "bench") to its end, at most `timeout` s;
        its output goes to logs/<mode>.out."""
        proc = start(self.workload(mode, *args), self.run_dir / "logs" / f"{mode}.out", self.run_dir)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise HarnessError(f"{mode}: not done after {timeout:.0f} s") from e
        finally:
            stop(proc, signal.SIGKILL, timeout=5)
        if proc.returncode:
            raise HarnessError(f"{mode} exited with {proc.returncode}; see {self.run_dir}/logs/{mode}.out")


@contextmanager
def running_broker(version: str, run_dir: Path, settings: dict[str, str]) -> Iterator[Running]:
    """NamesrvStartup and BrokerStartup -c broker.conf, store root `run_dir/store`; both killed on exit. A start that
    lost its ports to another process between their choice and its bind is tried again on new ports."""
    for attempt in range(1, BIND_ATTEMPTS + 1):
        procs: list[subprocess.Popen] = []
        try:
            running = _start_pair(version, run_dir, settings, procs)
        except HarnessError:
            for proc in reversed(procs):
                stop(proc)
            if attempt < BIND_ATTEMPTS and _lost_its_port(run_dir):
                continue
            raise
        try:
            yield running
        finally:
            for proc in reversed(procs):
                stop(proc)
        return


def _start_pair(version: str, run_dir: Path, settings: dict[str, str], procs: list[subprocess.Popen]) -> Running:
    """The name server and the broker started on free loopback ports (appended to `procs` as they start)."""
    namesrv_lib = broker_lib(NAMESRV_FROM.get(version, version))
    conf = _logback(run_dir)
    ns_port = free_broker_port()
    (conf / "namesrv.conf").write_text(f"listenPort={ns_port}\n")
    procs.append(_start_server(run_dir, namesrv_lib, "namesrv.NamesrvStartup", conf / "namesrv.conf"))
    _wait_server("namesrv", ns_port, procs[0], run_dir / "logs" / "namesrv.out", 60)
    broker, port = _start_broker(version, run_dir, settings, f"127.0.0.1:{ns_port}")
    procs.append(broker)
    return Running(version, run_dir, f"127.0.0.1:{ns_port}", f"127.0.0.1:{port}", settings["brokerName"], broker)


def _logback(run_dir: Path) -> Path:
    """`run_dir`/conf with the servers' logback files (4.9.x exits without one)."""
    conf = run_dir / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    for name in ("broker", "namesrv"):
        (conf / f"logback_{name}.xml").write_text(LOGBACK_XML % name)
    return conf


def _start_broker(version: str, run_dir: Path, settings: dict[str, str], namesrv: str) -> tuple[subprocess.Popen, int]:
    """BrokerStartup on a free loopback port with its store in `run_dir`/store, listening; and its port."""
    conf, port = _logback(run_dir), free_broker_port()
    run = {"brokerIP1": "127.0.0.1", "listenPort": str(port), "namesrvAddr": namesrv}
    run["storePathRootDir"] = str(run_dir / "store")
    run["storePathCommitLog"] = str(run_dir / "store" / "commitlog")
    if settings.get("enableDLegerCommitLog") == "true":
        run["dLegerPeers"] = f"{settings['dLegerSelfId']}-127.0.0.1:{free_broker_port()}"
    (conf / "broker.conf").write_text("".join(f"{k}={v}\n" for k, v in {**settings, **run}.items()))
    proc = _start_server(run_dir, broker_lib(version), "broker.BrokerStartup", conf / "broker.conf")
    try:
        _wait_server("broker", port, proc, run_dir / "logs" / "broker.out", 90)
    except HarnessError:
        stop(proc)
        raise
    return proc, port


def _wait_server(what: str, port: int, proc: subprocess.Popen, out: Path, timeout: float) -> None:
    """Wait until `proc` listens on `port`; a HarnessError carrying the end of its output when it does not."""
    try:
        wait_for(what, lambda: _listening(port), timeout, proc)
    except HarnessError as e:
        tail = out.read_text(errors="replace")[-1500:] if out.is_file() else "(no output)"
        raise HarnessError(f"{e}; the end of {out.name}:\n{tail}") from None


def _lost_its_port(run_dir: Path) -> bool:
    """Whether a server of this run failed to bind its port."""
    logs = [run_dir / "logs" / f"{name}.out" for name in ("namesrv", "broker")]
    return any(p.is_file() and "Address already in use" in p.read_text(errors="replace") for p in logs)


def _start_server(run_dir: Path, lib: Path, main: str, conf: Path) -> subprocess.Popen:
    """`org.apache.rocketmq.<main> -c conf` with ROCKETMQ_HOME and user.home (its logs) in `run_dir`."""
    cmd = [
        "java",
        *JVM_OPTS,
        f"-Duser.home={run_dir}",
        "-cp",
        f"{lib}/*",
        f"org.apache.rocketmq.{main}",
        "-c",
        str(conf),
    ]
    log = run_dir / "logs" / f"{main.split('.')[0]}.out"
    return start(cmd, log, run_dir, {"ROCKETMQ_HOME": str(run_dir)})


def store_settings(version: str, variant: str) -> dict[str, str]:
    """STORE_SETTINGS with the variant's settings; refuses a variant not made for `version`."""
    extra, versions = VARIANTS[variant]
    if version not in versions:
        raise HarnessError(f"variant {variant} is for {', '.join(versions)}, not {version}")
    settings = {**STORE_SETTINGS, **extra}
    if release(version) < (4, 5, 0):  # MessageStoreConfig.setMapedFileSize* (storelib.broker.config.OLD_NAMES)
        old = {new: name for name, new in OLD_NAMES.items()}
        settings = {old.get(k, k): v for k, v in settings.items()}
    return settings


def build_store(version: str, variant: str = "default", seed: int = SEED) -> BrokerStore:
    """The cached store of (version, variant, seed, sources hash), written by the real broker now if absent.
    One build at a time per cache (a file lock): sessions sharing the cache wait for each other's store."""
    settings = store_settings(version, variant)
    final = CACHE / "stores" / f"{version}-{variant}-seed{seed}-{sources_hash(version, variant)}"
    recorded.note_used("store", final.name)
    with _cache_lock(timeout=1800):  # every build before it, when none is checked in
        if not (final / "COMPLETE").is_file() and not _unpacked(final):
            _build(version, variant, settings, final, seed)
    return BrokerStore(version, variant, final, float((final / "COMPLETE").read_text()))


def _unpacked(final: Path) -> bool:
    """The checked-in store of `final`'s name (tests/broker/recorded.py) put in place, if there is one."""
    work = final.with_name(final.name + f".unpack{os.getpid()}")
    if not recorded.unpack_store(final.name, work):
        return False
    shutil.rmtree(final, ignore_errors=True)
    work.replace(final)
    return True


@contextmanager
def _cache_lock(timeout: float) -> Iterator[None]:
    """An exclusive flock on <cache>/stores/.lock, waited for at most `timeout` s."""
    path = CACHE / "stores" / ".lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        wait_for("the store cache lock", lambda: _try_lock(f.fileno()), timeout)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _build(version: str, variant: str, settings: dict[str, str], final: Path, seed: int) -> None:
    """Write the store in a scratch directory next to `final`, then rename it into place."""
    work = final.with_name(final.name + f".tmp{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    began = time.monotonic()
    if variant in MIXED_VARIANTS:
        file_mode = {k: v for k, v in settings.items() if k not in DLEDGER_SETTINGS}
        with running_broker(version, work, file_mode) as broker:
            _send_workload(broker, work, False, seed, work / "sent-filemode.jsonl", batchcq=False)
    for run, older in enumerate(UPGRADED_FROM.get(variant, ())):
        with running_broker(older, work, settings) as broker:
            _send_workload(broker, work, False, seed, work / f"sent-{older}.jsonl", batchcq=run == 0)
    if variant in STALE_TOPICS_JSON:
        (work / "store" / "config").mkdir(parents=True)
        (work / "store" / "config" / "topics.json").write_text(json.dumps(STALE_TOPICS, indent=1))
    first_run = variant not in MIXED_VARIANTS and variant not in UPGRADED_FROM
    with running_broker(version, work, settings) as broker:
        if variant in FAILOVER_VARIANTS:
            _write_failover(broker, work, settings, seed)
        elif variant in TIMER_VARIANTS:
            broker.run_workload("timers", "send", f"out={work / 'sent.jsonl'}", f"seed={seed}", timeout=180)
        elif variant in LMQ_RACE_VARIANTS:
            broker.run_workload("lmq-race", f"out={work / 'sent.jsonl'}", timeout=180)
        else:
            _send_workload(broker, work, variant in KILL9_VARIANTS, seed, batchcq=first_run)
        if variant in CONSUMER_VARIANTS:
            pop = f"pop={has(version, 'pop')}"
            broker.run_workload("consumers", f"out={work / 'consumed.jsonl'}", pop, timeout=240)
    _write_conf(work / "broker.conf", settings, version)
    for conf in (work / "conf", work / "slave" / "conf"):  # the runs' own settings: ports and temporary paths
        shutil.rmtree(conf, ignore_errors=True)
    seconds = round(time.monotonic() - began, 1)
    if variant in SERVED_VARIANTS:
        write_served(version, work, settings)
    (work / "COMPLETE").write_text(f"{seconds}\n")
    shutil.rmtree(final, ignore_errors=True)
    work.replace(final)


def _send_workload(
    broker: Running, work: Path, kill9: bool, seed: int, out: Path | None = None, batchcq: bool = True
) -> None:
    """The seeded workload, acknowledged sends into ``out`` (sent.jsonl); kill9: kill -9 the broker once
    KILL9_AFTER_SENDS sends are in it; timers, LMQ and a BatchCQ TopicBatchCQ where the release has them
    (``has``), TopicBatchCQ plain when ``batchcq`` is False."""
    out = out or work / "sent.jsonl"
    args = [f"out={out}", f"seed={seed}", f"sends={SENDS}", f"batchcq={batchcq and has(broker.version, 'batchcq')}"]
    args += [f"timer={has(broker.version, 'timer')}", f"lmq={has(broker.version, 'lmq')}"]
    if not kill9:
        broker.run_workload("send", *args, timeout=180)
        return
    sender = start(broker.workload("send", *args), work / "logs" / "send.out", work)
    try:
        wait_for("kill9 burst", lambda: _answered(out, KILL9_AFTER_SENDS), 120, sender)
        stop(broker.broker, signal.SIGKILL, timeout=10)
        sender.wait(timeout=60)
    finally:
        stop(sender, signal.SIGKILL, timeout=5)


def _write_failover(master: Running, work: Path, settings: dict[str, str], seed: int) -> None:
    """A slave beside `master` (work/slave/store), Failover.java's sends into sent.jsonl; the slave paused after
    FAILOVER_PAUSE_AFTER answers once it holds a replicated record, the master killed -9 after FAILOVER_KILL_AFTER;
    then the slave let go on for FAILOVER_SETTLE_S (it receives what its socket still holds, the master is gone)
    and stopped with SIGTERM."""
    out = work / "sent.jsonl"
    slave, _ = _start_broker(master.version, work / "slave", {**settings, **SLAVE_SETTINGS}, master.namesrv_addr)
    try:
        args = [f"out={out}", f"seed={seed}", f"sends={FAILOVER_SENDS}"]
        sender = start(master.workload("failover", *args), work / "logs" / "failover.out", work)
        try:
            wait_for("failover sends", lambda: _answered(out, FAILOVER_PAUSE_AFTER), 120, sender)
            wait_for("the slave's first replicated record", lambda: _holds_records(work / "slave" / "store"), 30)
            os.killpg(slave.pid, signal.SIGSTOP)
            wait_for("failover sends", lambda: _answered(out, FAILOVER_KILL_AFTER), 60, sender)
            stop(master.broker, signal.SIGKILL, timeout=10)
            sender.wait(timeout=60)
        finally:
            stop(sender, signal.SIGKILL, timeout=5)
            os.killpg(slave.pid, signal.SIGCONT)
        time.sleep(FAILOVER_SETTLE_S)
    finally:
        stop(slave)


def _answered(out: Path, sends: int) -> bool:
    return out.is_file() and _lines(out) >= sends


def _holds_records(store: Path) -> bool:
    """Whether the store's first commitlog segment starts with a record (its file is preallocated: zeros)."""
    first = store / "commitlog" / f"{0:020d}"
    with open(first, "rb") if first.is_file() else open(os.devnull, "rb") as f:
        return f.read(4) not in (b"", bytes(4))


def release(version: str) -> tuple[int, int, int]:
    """ "5.3.3" -> (5, 3, 3)."""
    major, minor, patch = (int(x) for x in version.split("."))
    return major, minor, patch


def has(version: str, feature: str) -> bool:
    """Whether the broker release has a FEATURES entry (LMQ, timers, BatchCQ)."""
    return release(version) >= FEATURES[feature]


def _lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _write_conf(path: Path, settings: dict[str, str], version: str) -> None:
    header = f"# Settings under which the real RocketMQ {version} broker wrote store/ (store paths left out).\n"
    path.write_text(header + "".join(f"{k}={v}\n" for k, v in settings.items()))


def write_served(version: str, store: Path, settings: dict[str, str] | None = None) -> None:
    """`store`/served.jsonl: what a broker serves from a copy of `store`/store (written by rename)."""
    lines = served(version, store / "store", settings)
    tmp = store / "served.jsonl.tmp"
    tmp.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    tmp.replace(store / "served.jsonl")


def served(
    version: str, store_dir: Path, settings: dict[str, str] | None = None, queues: list[str] | None = None
) -> list[dict]:
    """What a broker serves from a COPY of `store_dir` after its recovery (Served.java), for `queues` (topic/queueId;
    default: every consumequeue/ and batchconsumequeue/ directory of the store, or for a store without them (RocksDB
    ConsumeQueue) the queues of the sent.jsonl beside it, their LMQ queues and SYSTEM_QUEUES): per queue a `queue`
    line (topic, queueId, minOffset, maxOffset, or error) and a `message` line per message pulled from minOffset to
    maxOffset (queueOffset/commitLogOffset/msgTopic/msgQueueId as the client decodes the record, msgId (UNIQ_KEY),
    offsetMsgId, keys, tags, multiDispatch/multiQueueOffset (LMQ properties)), then a `tagged` line per tag of its
    messages (queueOffsets pulled with that tag as the subscription expression); then a `lookup` line per IndexFile
    query (`by` KEYS, UNIQ_KEY, and on 5.5 TAGS; topic, key, found: the commitlog offsets the client accepts).
    Served with SERVE_SETTINGS and every delay level marked delivered (`mark_delays_delivered`). `settings` defaults
    to the broker.conf beside the store. The result is cached in <cache>/served/ under `served_key`: the same bytes
    served the same way start no broker."""
    settings = {**(settings or read_properties(store_dir.parent / "broker.conf")), **SERVE_SETTINGS}
    queues = queues or served_queues(store_dir)
    key = served_key(version, store_dir, settings, queues)
    cached = _answer_file("served", key, ".jsonl")
    if cached.is_file():
        return read_jsonl(cached)
    run_dir = CACHE / "served-runs" / f"{version}-{os.getpid()}-{time.time_ns()}"
    try:
        shutil.copytree(store_dir, run_dir / "store")
        mark_delays_delivered(run_dir / "store", len(settings["messageDelayLevel"].split()))
        args = [f"out={run_dir / 'served.jsonl'}", f"queues={','.join(queues)}", f"tagIndex={_tag_index(version)}"]
        with running_broker(version, run_dir, settings) as broker:
            broker.run_workload("served", *args, f"lookupMax={LOOKUP_MAX}", timeout=300)
        cached.parent.mkdir(parents=True, exist_ok=True)
        (run_dir / "served.jsonl").replace(cached)
        return read_jsonl(cached)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _answer_file(kind: str, key: str, suffix: str) -> Path:
    """<cache>/<kind>/<key><suffix>, taken from the checked-in answers (tests/broker/recorded.py) when it is absent
    and one is there; noted as used."""
    recorded.note_used(kind, key)
    cached = CACHE / kind / f"{key}{suffix}"
    if not cached.is_file() and (data := recorded.answer(kind, key, suffix)) is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        tmp.replace(cached)
    return cached


def served_key(version: str, store_dir: Path, settings: dict[str, str], queues: list[str]) -> str:
    """What defines a served result: the version, the serve settings, the queues, the Java sources and the store's
    bytes (`store_digest`)."""
    h = hashlib.sha256(json.dumps([version, settings, queues, LOOKUP_MAX], sort_keys=True).encode())
    for name in ("Workload.java", "Served.java"):
        h.update((HERE / name).read_bytes())
    return hash_store(h, store_dir).hexdigest()[:24]


def hash_store(h: Any, store_dir: Path) -> Any:
    """`h` updated with every file of a store, in path order: its relative path and the sha256 of its bytes."""
    for path in sorted(p for p in store_dir.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(store_dir)).encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h


def mark_delays_delivered(root: Path, levels: int) -> None:
    """config/delayOffset.json saying every delay level is delivered: the schedule service has no switch of its own
    (5.x BrokerController.changeScheduleServiceStatus and 4.9.7 startProcessorByHa follow only the broker role), and
    without it a restart delivers delayed messages again, at new offsets, whenever the offsets it last persisted
    (every flushDelayOffsetInterval, 10 s) are behind: the 5.5.0 kill9 store (no delayOffset.json) served without it
    holds 13 TopicOrders messages more, delivered again. 5.x correctDelayOffset lowers the value to each queue's max."""
    table = ",".join(f"{level}:{DELIVERED}" for level in range(1, levels + 1))
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "delayOffset.json").write_text(f'{{"offsetTable":{{{table}}}}}')


def _tag_index(version: str) -> bool:
    """5.5.0 and later index `topic#T#<TAGS>` and let a client ask for it (MQAdminImpl.queryMessage indexType "T")."""
    return release(version) >= (5, 4)  # 5.4.0 writes topic#T#<TAGS> too (tests/broker/FACTS.md, "Release by release")


def served_queues(root: Path) -> list[str]:
    """The queues `served` asks for by default: the store's queue directories, or (none: a RocksDB ConsumeQueue) the
    queues of the sent.jsonl beside it."""
    return _store_queues(root) or _sent_queues(root.parent / "sent.jsonl")


def restarted(version: str, store_dir: Path, settings: dict[str, str] | None = None) -> list[str]:
    """The store log of a broker started on a COPY of `store_dir` and stopped once it listens and has logged the end
    of its load() ("load over": commitlog, ConsumeQueue and IndexFile recovery). 5.x logs the store to
    rocketmqlogs/store.log, 4.9.7 (the harness's one-appender logback) to broker.log. `settings` defaults to the
    broker.conf beside the store. The log is cached in <cache>/restarted/ under the version, the settings and the
    store's bytes: the same bytes started the same way start no broker."""
    settings = settings or read_properties(store_dir.parent / "broker.conf")
    key = hash_store(hashlib.sha256(json.dumps([version, settings, JVM_OPTS], sort_keys=True).encode()), store_dir)
    cached = _answer_file("restarted", key.hexdigest()[:24], ".log")
    if cached.is_file():
        return cached.read_text(encoding="utf-8").splitlines()
    run_dir = CACHE / "served-runs" / f"{version}-restart-{os.getpid()}-{time.time_ns()}"
    logs = run_dir / "logs"
    log = logs / "rocketmqlogs" / "store.log" if version >= "5" else logs / "broker.log"
    try:
        shutil.copytree(store_dir, run_dir / "store")
        with running_broker(version, run_dir, settings):  # its log appender may write the line after it listens
            wait_for("the store log's 'load over'", lambda: log.is_file() and b"load over" in log.read_bytes(), 60)
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, run_dir / "store.log")
        (run_dir / "store.log").replace(cached)
        return cached.read_text(encoding="utf-8", errors="replace").splitlines()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def export_rocksdb_topics(version: str, root: Path) -> None:
    """config/topics.json of a RocksDB-config store (5.x defaultRocksDB keeps topics in the RocksDB config/topics/),
    written by the release's own `mqadmin rocksDBConfigToJson` in local mode: what a broker with storeType=default
    reads instead (without it, it knows no topic and serves none)."""
    out = root / "config" / "topics.json"
    cmd = ["java", *JVM_OPTS, f"-Duser.home={root.parent}", "-cp", f"{broker_lib(version)}/*"]
    cmd += ["org.apache.rocketmq.tools.command.MQAdminStartup", "rocksDBConfigToJson"]
    _run_checked([*cmd, "-p", str(root / "config"), "-t", "topics", "-e", str(out)], 120)
    if not out.is_file():
        raise HarnessError(f"rocksDBConfigToJson wrote no {out}")


def replayed(version: str, store_dir: Path, settings: dict[str, str]) -> Path:
    """A copy of `store_dir` without consumequeue/ and batchconsumequeue/ that a broker started with `settings`
    (SERVE_SETTINGS and commitLogRecoverMaxNum 1000 on top: its recovery starts at the first segment, so it dispatches
    every record again) rebuilt and flushed at its shutdown; the copy's root (under served-runs/, the caller removes
    it). Records the broker puts itself while it runs lie past the original commitlog's end."""
    run_dir = CACHE / "served-runs" / f"{version}-replay-{os.getpid()}-{time.time_ns()}"
    shutil.copytree(store_dir, run_dir / "store")
    for name in ("consumequeue", "batchconsumequeue"):
        shutil.rmtree(run_dir / "store" / name, ignore_errors=True)
    mark_delays_delivered(run_dir / "store", len(settings["messageDelayLevel"].split()))
    with running_broker(version, run_dir, {**settings, **SERVE_SETTINGS, "commitLogRecoverMaxNum": "1000"}):
        time.sleep(REPLAY_SECONDS)
    return run_dir / "store"


def _store_queues(root: Path) -> list[str]:
    """topic/queueId of every ConsumeQueue and BatchConsumeQueue directory of a store."""
    queues = [*root.glob("consumequeue/*/*"), *root.glob("batchconsumequeue/*/*")]
    return sorted({f"{q.parent.name}/{q.name}" for q in queues})


def _sent_queues(sent: Path) -> list[str]:
    """topic/queueId of every acknowledged send, its LMQ queues (queueId 0) and SYSTEM_QUEUES."""
    lines = read_jsonl(sent)
    queues = {f"{s['topic']}/{s['queueId']}" for s in lines if s["status"] == "SEND_OK"}
    queues |= {f"{name}/0" for s in lines if "lmq" in s for name in s["lmq"].split(",")}
    return sorted(queues | set(SYSTEM_QUEUES))


if __name__ == "__main__":
    store = build_store(sys.argv[1], *sys.argv[2:3], *map(int, sys.argv[3:4]))
    print(f"{store.dir} ({store.seconds} s)")
