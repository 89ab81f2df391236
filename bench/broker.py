"""The real 5.5.0 broker in ``make bench``: the stores it writes (tests/broker/Bench.java through the suite's
harness, cached) and its own rebuild of one, timed from its store.log.

The broker's rebuild: consumequeue/ and index/ deleted, the broker started on the rest of a copy of the store. Its
load() finds no ConsumeQueue, so recoverNormally dispatches every record of the commitlog (ConsumeQueue and
IndexFile) before it logs ``message store recover end``; the time is taken between the MessageStoreState
transitions around that (``to LOAD_BEGIN``, which ``last shutdown`` follows, and ``to RECOVER_TOPIC_QUEUE_TABLE_OK``,
which ``recover end`` follows): their ``Total time=<ms>`` has the milliseconds the log's timestamps lack.
"""

from __future__ import annotations

import dataclasses
import filecmp
import hashlib
import json
import re
import shutil
import struct
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from bench.generated import settle
from tests.broker import harness

VERSION = "5.5.0"
#: broker defaults otherwise (1 GiB commitlog segments, 300,000-unit ConsumeQueue files, 5M slots / 20M entries);
#: a send may wait in the broker's queue 5 s, not 200 ms, before it is refused as "broker busy" (a shared machine)
SETTINGS = {
    "brokerClusterName": "BenchCluster",
    "brokerName": "bench-a",
    "brokerId": "0",
    "flushDiskType": "ASYNC_FLUSH",
    "storeType": "default",
    "waitTimeMillsInSendQueue": "5000",
}
#: the properties the 5.5.0 broker adds to every record it stores (seen in the harness's stores)
BROKER_PROPERTIES = {"MSG_REGION": "DefaultRegion", "CLUSTER": SETTINGS["brokerClusterName"], "TRACE_ON": "true"}
RECORD_SIZE = 723
QUEUES = 8
SEND_TIMEOUT = 7200  # TEN_GB: 524 s on 2 cores, on a loaded machine several times that
_STATE = re.compile(r"MessageStoreState transition from \w+ to (\w+);.*Total time=(\d+)ms")


@dataclasses.dataclass(frozen=True)
class BrokerBench:
    name: str
    messages: int


BIG = BrokerBench("broker-1.5M", 1_500_000)
EMPTY = BrokerBench("broker-empty", 1_600)
#: ten full 1 GiB segments and the start of an eleventh: the most a 5.5.0 broker re-dispatches at start
TEN_GB = BrokerBench("broker-15M", 15_000_000)


def properties_bytes(props: dict[str, str]) -> int:
    """Bytes of ``name 0x01 value 0x02`` per property, the record's properties string."""
    return sum(len(f"{k}\1{v}\2".encode()) for k, v in props.items())


def recovery_seconds(lines: Iterable[str]) -> float:
    """Seconds from 'last shutdown' to 'message store recover end' in a 5.x store.log, from the ms totals of the
    MessageStoreState transitions to LOAD_BEGIN and to RECOVER_TOPIC_QUEUE_TABLE_OK."""
    totals = {m.group(1): int(m.group(2)) for m in map(_STATE.search, lines) if m}
    missing = {"LOAD_BEGIN", "RECOVER_TOPIC_QUEUE_TABLE_OK"} - totals.keys()
    if missing:
        raise ValueError(f"store.log has no MessageStoreState transition to {', '.join(sorted(missing))}")
    return (totals["RECOVER_TOPIC_QUEUE_TABLE_OK"] - totals["LOAD_BEGIN"]) / 1000


def store_dir(cache: Path, bench: BrokerBench) -> Path:
    """Where the store of ``bench`` is cached: named by what made it (Bench.java, the pom, the settings)."""
    h = hashlib.sha256()
    for name in ("Bench.java", "pom.xml"):
        h.update((harness.HERE / name).read_bytes())
    h.update(json.dumps([VERSION, SETTINGS, bench.messages, RECORD_SIZE, QUEUES, harness.JVM_OPTS]).encode())
    return cache / f"{bench.name}-{VERSION}-{h.hexdigest()[:12]}"


def ensure_store(cache: Path, bench: BrokerBench) -> Path:
    """The cached store the real broker wrote for ``bench`` (``store/``, ``broker.conf``), written now if absent."""
    final = store_dir(cache, bench)
    if (final / "COMPLETE").is_file():
        return final
    print(f"the real {VERSION} broker writes {bench.messages:,} x {RECORD_SIZE}-byte records into {final}", flush=True)
    work = final.with_name(final.name + ".tmp")
    shutil.rmtree(work, ignore_errors=True)
    began = time.monotonic()
    with harness.running_broker(VERSION, work, SETTINGS) as broker:
        sent = work / "sent.txt"
        args = [f"out={sent}", f"messages={bench.messages}", f"recordSize={RECORD_SIZE}", f"queues={QUEUES}"]
        broker.run_workload("bench", *args, f"brokerProps={properties_bytes(BROKER_PROPERTIES)}", timeout=SEND_TIMEOUT)
    shutil.rmtree(work / "conf")  # the run's ports and paths
    (work / "broker.conf").write_text("".join(f"{k}={v}\n" for k, v in SETTINGS.items()))
    check_store(work / "store", bench, sent.read_text().strip())
    (work / "COMPLETE").write_text(f"{time.monotonic() - began:.1f}\n")
    work.replace(final)
    print(f"  written in {float((final / 'COMPLETE').read_text()):.0f} s", flush=True)
    return final


def check_store(root: Path, bench: BrokerBench, sent: str) -> None:
    """Every send acknowledged, and the first record of the commitlog RECORD_SIZE bytes."""
    first = sorted((root / "commitlog").iterdir())[0]
    with open(first, "rb") as f:
        (size,) = struct.unpack(">i", f.read(4))
    if sent != f"sent={bench.messages}" or size != RECORD_SIZE:
        raise harness.HarnessError(f"{root}: {sent}, first record {size} bytes ({bench.messages}, {RECORD_SIZE} asked)")


def broker_rebuild(store: Path, run_dir: Path) -> float:
    """The broker's own rebuild of a copy of ``store`` without consumequeue/ and index/ into ``run_dir``/store:
    the seconds of its recovery (store.log). The rebuilt files stay in ``run_dir``."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    # cp keeps the holes of the segments (the last one is mostly unwritten), copytree would write them out
    subprocess.run(["cp", "-r", "--sparse=always", str(store / "store"), str(run_dir)], check=True)
    for name in ("consumequeue", "index"):
        shutil.rmtree(run_dir / "store" / name)
    settle()  # the copy written out: the broker does not pay for its writeback (bench.generated.timed)
    with harness.running_broker(VERSION, run_dir, SETTINGS):
        pass
    log = run_dir / "logs" / "rocketmqlogs" / "store.log"
    return recovery_seconds(log.read_text(encoding="utf-8", errors="replace").splitlines())


def differing_files(broker: Path, ours: Path) -> list[str]:
    """What differs between two rebuilds: ConsumeQueue files by path, IndexFiles by order (their names are
    creation times); a file only one side has counts as differing."""
    queues = [
        sorted(p.relative_to(root) for p in (root / "consumequeue").rglob("*") if p.is_file())
        for root in (broker, ours)
    ]
    index = [sorted((root / "index").iterdir()) for root in (broker, ours)]
    out = sorted(str(p) for p in set(queues[0]) ^ set(queues[1]))
    out += [str(p) for p in queues[0] if p in set(queues[1]) and not filecmp.cmp(broker / p, ours / p, shallow=False)]
    if len(index[0]) != len(index[1]):
        out.append(f"index/: {len(index[0])} files, ours {len(index[1])}")
    out += [f"index/{a.name}" for a, b in zip(*index) if not filecmp.cmp(a, b, shallow=False)]
    return out
