"""What a real broker started with its timer wheel on delivers from a copy of a store: the oracle for timers and
delay levels after a disaster (the harness's ``served`` turns the wheel off and marks every delay delivered).

``delivered(version, store_dir, expect, wait_s)`` copies the store, starts namesrv and broker with the store's
broker.conf (timerWheelEnable on), and pulls TopicTimers and TopicDelays (Timers.java, mode watch) until they hold
``expect`` messages or ``wait_s`` passed; one dict per message (topic, queueId, queueOffset, msgId, keys,
storeTimestamp, timerOutMs, ...). Not cached: what a broker delivers depends on the time it starts.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from storelib.broker.config import read_properties
from tests.broker.harness import CACHE, read_jsonl, running_broker

TOPICS = ("TopicTimers", "TopicDelays")


def delivered(version: str, store_dir: Path, expect: int, wait_s: float) -> list[dict]:
    """Every message of TopicTimers and TopicDelays once a broker on a copy of ``store_dir`` has run its timers."""
    settings = {**read_properties(store_dir.parent / "broker.conf"), "timerWheelEnable": "true"}
    run_dir = CACHE / "served-runs" / f"{version}-timers-{os.getpid()}-{time.time_ns()}"
    try:
        shutil.copytree(store_dir, run_dir / "store")
        out = run_dir / "delivered.jsonl"
        args = [f"out={out}", f"topics={','.join(TOPICS)}", f"expect={expect}", f"waitMs={int(wait_s * 1000)}"]
        with running_broker(version, run_dir, settings) as broker:
            broker.run_workload("timers", "watch", *args, timeout=wait_s + 120)
        return read_jsonl(out)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def copies(lines: list[dict]) -> dict[str, list[dict]]:
    """The delivered messages by msgId (UNIQ_KEY)."""
    out: dict[str, list[dict]] = {}
    for line in lines:
        out.setdefault(line["msgId"], []).append(line)
    return out
