"""Store modes told from the store or broker.conf: the 5.5.0 double-write store (``rocksdbCQDoubleWriteEnable``,
CombineConsumeQueueStore: file ConsumeQueues primary, a RocksDB one beside them; ``combineCQUseRocksdbForLmq``: LMQ
queues in RocksDB only) rebuilds the broker's file ConsumeQueues and IndexFiles and audits clean, with the settings
in broker.conf and without them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from jobs.pipeline.audit_flow import audit
from jobs.pipeline.context import Run
from jobs.pipeline.rebuild_flow import rebuild
from jobs.pipeline.recover_flow import recover
from storelib.broker.config import BrokerConfig, load_broker_config, with_store_mode
from storelib.formats.rocksdbcq import read_units
from tests.broker.fixtures import harness_store
from tests.reference import store_files
from tests.storecopy import copy_store

DOUBLE_WRITE = {"storeType": "default", "rocksdbCQDoubleWriteEnable": True, "combineCQUseRocksdbForLmq": True}


FILE_QUEUES = frozenset({"TopicOrders", "SCHEDULE_TOPIC_XXXX"})
WITH_LMQ = FILE_QUEUES | {"%LMQ%room-0"}


@pytest.mark.parametrize(
    ("given", "rocksdb_cq", "file_config", "queue_dirs", "mode"),
    [
        ({}, False, True, WITH_LMQ, ("default", False, False)),  # a file store
        ({}, True, False, FILE_QUEUES, ("defaultRocksDB", False, False)),  # a RocksDB config/topics/, or config/ lost
        ({}, True, True, frozenset(), ("defaultRocksDB", False, False)),  # no file queue beside the RocksDB
        ({}, True, True, FILE_QUEUES, ("default", True, True)),  # double write, no %LMQ% file queue: LMQ in RocksDB
        ({}, True, True, WITH_LMQ, ("default", True, False)),  # double write, %LMQ% file queues: LMQ in both
        ({"storeType": "defaultRocksDB"}, True, True, FILE_QUEUES, ("defaultRocksDB", False, False)),  # broker.conf
        ({"storeType": "default"}, True, False, WITH_LMQ, ("default", False, False)),  # rolled back from RocksDB
        ({"rocksdbCQDoubleWriteEnable": True}, True, False, WITH_LMQ, ("default", True, False)),  # broker.conf says
    ],
)
def test_store_mode_from_broker_conf_else_from_the_store(
    given: dict, rocksdb_cq: bool, file_config: bool, queue_dirs: frozenset[str], mode: tuple[str, bool, bool]
) -> None:
    cfg = with_store_mode(BrokerConfig(enableMultiDispatch=True, **given), rocksdb_cq, file_config, queue_dirs)
    assert (cfg.storeType, cfg.rocksdbCQDoubleWriteEnable, cfg.combineCQUseRocksdbForLmq) == mode
    assert cfg.multi_dispatch_to_files == (not mode[2])  # LMQ units go into file ConsumeQueues


def queue_files(root: Path) -> dict[str, bytes]:
    """The file ConsumeQueues under root/consumequeue (its <topic>/<queueId>/ files, not the RocksDB beside them)."""
    return {k: v for k, v in store_files(root, "consumequeue").items() if k.count("/") == 3}


@pytest.mark.broker
@pytest.mark.parametrize("told_by", ["broker.conf", "store"])
def test_double_write_store_rebuilt_as_the_broker_split_it_and_audited_clean(
    spark, tmp_path: Path, told_by: str
) -> None:
    """The real 5.5.0 broker's double-write store: the RocksDB beside consumequeue/'s files holds every queue, the
    %LMQ% ones only there; the rebuild writes the broker's file ConsumeQueues (no %LMQ% file) and IndexFiles, byte
    for byte, and the audit finds nothing (exit 0), with the mode in broker.conf or told by the store; recover puts
    a damaged file queue back and leaves the RocksDB as it is."""
    store = harness_store("5.5.0", "doublewrite-lmq")
    live = store / "store"
    cfg = load_broker_config(store / "broker.conf")
    assert (cfg.rocksdbCQDoubleWriteEnable, cfg.combineCQUseRocksdbForLmq) == (True, True)
    if told_by == "store":
        cfg = dataclasses.replace(cfg, storeType="", rocksdbCQDoubleWriteEnable=False, combineCQUseRocksdbForLmq=False)
    in_rocksdb = {topic for topic, _ in read_units(live / "consumequeue")}
    files = queue_files(live)
    lmq = {t for t in in_rocksdb if t.startswith("%LMQ%")}
    assert lmq and not any(k.split("/")[1] in lmq for k in files)  # the store shows the mode

    run, out = Run(spark, cfg), tmp_path / "out"
    rebuild(run, str(live), str(out))
    written = json.loads((out / "rebuild.json").read_text())["broker_config"]
    assert {k: written[k] for k in DOUBLE_WRITE} == DOUBLE_WRITE
    assert queue_files(out) == files
    assert list(store_files(out, "index").values()) == list(store_files(live, "index").values())

    result = audit(run, str(live), str(out), None)
    assert ([f.kind for f in result.findings], result.exit_code) == ([], 0)
    assert result.report.summary.queues.audited == len({k.rsplit("/", 1)[0] for k in files})

    # a file queue zeroed in a copy: found and put back, the RocksDB beside it untouched
    copy = copy_store(live, tmp_path / "copy", without=("lock",))
    rocksdb = {k: v for k, v in store_files(copy, "consumequeue").items() if k.count("/") == 1}
    damaged = sorted(k for k in files if k.startswith("consumequeue/TopicOrders/"))[0]
    (copy / damaged).write_bytes(bytes(len(files[damaged])))
    assert recover(run, str(copy), str(out), True, backup_dir=tmp_path / "backup") == 0
    assert queue_files(copy) == files
    assert {k: v for k, v in store_files(copy, "consumequeue").items() if k.count("/") == 1} == rocksdb
