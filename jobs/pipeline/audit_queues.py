"""The audit's ConsumeQueue stage: a task per queue, or per few queues (jobs.pipeline.tasks), reads the live and
rebuilt files and classifies each.

ConsumeQueues (LMQ queues included) go through udfs.audit_tasks.audit_queue; BatchConsumeQueues (5.0+, 46-byte
units in batchconsumequeue/) through udfs.audit_batch.audit_batch_queue. Both are listed by one lister
(jobs.pipeline.listing.list_queues over their storelib.formats.consumequeue.QueueFormat).
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from jobs.pipeline.context import Found
from jobs.pipeline.listing import list_queues
from jobs.pipeline.tasks import run_packed
from storelib.audit.scope import queue_repairs
from storelib.broker.config import BrokerConfig
from storelib.broker.segments import damaged_ranges
from storelib.errors import HostileNameError
from storelib.findings import Finding, finding
from storelib.formats.batchcq import BATCH_CONSUME_QUEUE
from storelib.formats.consumequeue import CONSUME_QUEUE
from storelib.formats.rocksdbcq import ROCKSDB_CQ_DIRS, ROCKSDB_FILE, as_queue_files, is_rocksdb, read_units
from storelib.layout import CONSUMEQUEUE, queue_dir
from storelib.reports.plan import Step
from storelib.reports.report import QueueRow
from udfs.audit_batch import audit_batch_queue
from udfs.audit_tasks import QueueTask, audit_queue
from udfs.fs import join, list_files, read_file, resolve, write_file

if TYPE_CHECKING:
    from jobs.pipeline.audit_types import Audit


def audit_queues(a: Audit) -> tuple[list[QueueRow], Found]:
    """The per-queue rows of the report, and the queues' findings and repairs.

    The queues are the union of the live and the rebuilt ones; since the base run, those whose last entry is in
    the audited segments. A RocksDB ConsumeQueue (5.2+) is first laid out as files in the work directory by one
    task (storelib.formats.rocksdbcq) and those are audited; recover never writes file queues into a RocksDB store.
    Under ``storeType=default`` (rolled back) a RocksDB is not what the broker reads: its file queues are audited,
    and ``cq-rolled-back-rocksdb`` says so. A double-write store's file queues are audited, its RocksDB one is not
    (``double_written``).
    """
    fs, root = resolve(a.store)
    dirs = [d for d in ROCKSDB_CQ_DIRS if is_rocksdb({i.base_name for i in list_files(fs, join(root, d))})]
    if dirs and a.cfg.rocksdbCQDoubleWriteEnable and not a.cfg.rocksdb_consume_queue:
        rows, found = _audit_queues(a, a.store, None)
        return rows, Found(skipped=(double_written(dirs[0], a.cfg),)) + found
    if dirs and not a.cfg.rocksdb_consume_queue:
        rows, found = _audit_queues(a, a.store, None)
        return rows, Found((rolled_back(dirs[0], a.cfg),)) + found
    if not dirs:
        return _audit_queues(a, a.store, None)
    with a.run.work_dir(a.rebuilt) as work:
        live_root, bad = _rocksdb_as_files(a, work, dirs[0])
        rows, found = _audit_queues(a, live_root, dirs[0])
        return rows, Found(tuple(bad)) + found


def _audit_queues(a: Audit, live_root: str, rocksdb_dir: str | None) -> tuple[list[QueueRow], Found]:
    """The queues of ``live_root`` (the store, or the RocksDB ConsumeQueue in ``rocksdb_dir`` laid out as files)."""
    live, listing = list_queues(live_root)
    kept = [f for f in listing if not _rocksdb_file(f)] if rocksdb_dir is None else _stale_file_queues(a.store)
    found = Found(tuple(kept))
    built, _ = list_queues(a.rebuilt)
    keys = sorted(set(live) | set(built))
    if a.scope.base:
        touched = {
            (q.topic, q.queue_id)
            for q in a.rebuild_report.consume_queues
            if q.last_commitlog_offset is None or q.last_commitlog_offset >= a.scope.start
        }
        unchanged = len(keys) - len(touched & set(keys))
        found += Found(skipped=a.scope.skipping(unchanged, "queues without messages in the audited segments"))
        keys = [k for k in keys if k in touched]
    out, found_batch = _audit_batch_queues(a)
    found += found_batch
    if not keys:
        return out, found
    tasks = [QueueTask(*k, tuple(sorted(live.get(k, {}))), tuple(sorted(built.get(k, {})))) for k in keys]
    store, rebuilt, cfg = live_root, a.rebuilt, a.cfg
    cl_min, cl_max = a.rebuild_report.commitlog.min_offset, a.rebuild_report.commitlog.max_offset
    weights = [(len(t.live_files) + len(t.rebuilt_files)) * CONSUME_QUEUE.file_size(cfg) for t in tasks]
    damaged = damaged_ranges(a.summaries.values())
    done = run_packed(
        a.run, "queues", tasks, weights, lambda t: audit_queue(t, store, rebuilt, cfg, cl_min, cl_max, damaged)
    )
    for _, qa in done:
        found += Found(
            tuple(qa.findings if rocksdb_dir is None else [_in_rocksdb(f, rocksdb_dir) for f in qa.findings])
        )
        if qa.row:
            out.append(qa.row)
            if rocksdb_dir is None:
                found += Found(repairs=tuple(queue_repairs(qa, live.get((qa.topic, qa.queue_id), {}))))
    return sorted(out, key=lambda q: (q.topic, q.queue_id)), found


def _audit_batch_queues(a: Audit) -> tuple[list[QueueRow], Found]:
    """Every BatchConsumeQueue, live or rebuilt, one task each: their rows, findings and repairs."""
    live, listing = list_queues(a.store, BATCH_CONSUME_QUEUE)
    built, _ = list_queues(a.rebuilt, BATCH_CONSUME_QUEUE)
    found = Found(tuple(listing))
    keys = sorted(set(live) | set(built))
    if not keys:
        return [], found
    store, rebuilt, cfg = a.store, a.rebuilt, a.cfg
    cl = (a.rebuild_report.commitlog.min_offset, a.rebuild_report.commitlog.max_offset)
    tasks = [(k, (sorted(live.get(k, [])), sorted(built.get(k, [])))) for k in keys]
    size = BATCH_CONSUME_QUEUE.file_size(cfg)
    weights = [(len(names) + len(rebuilt_names)) * size for _, (names, rebuilt_names) in tasks]
    damaged = damaged_ranges(a.summaries.values())
    done = run_packed(
        a.run, "batch queues", tasks, weights, lambda t: audit_batch_queue(*t, store, rebuilt, cfg, cl, damaged)
    )
    out = []
    for (_, (live_names, _)), qa in done:
        found += Found(tuple(qa.findings), tuple(queue_repairs(qa, live_names)))
        if qa.row:
            out.append(qa.row)
    return out, found


def _rocksdb_as_files(a: Audit, work: str, rocksdb_dir: str) -> tuple[str, list[Finding]]:
    """One task copies the store's RocksDB ConsumeQueue (in ``rocksdb_dir``), opens the copy read-only and writes
    every queue's units as ConsumeQueue files under ``work``; the root of those files, and the queues it could not
    lay out (hostile names)."""
    store, out, file_size = a.store, f"{work}/rocksdb", a.cfg.cq_file_size

    def materialize(_: Any) -> list[str]:
        root = resolve(store)[1]
        ofs, oroot = resolve(out)
        bad = []
        for (topic, queue_id), units in read_units(join(root, rocksdb_dir)).items():
            try:
                rel = queue_dir(topic, queue_id)
            except HostileNameError as exc:
                bad.append(finding("hostile-name", rocksdb_dir, f"RocksDB ConsumeQueue: {exc.reason}").to_dict())
                continue
            for name, data in as_queue_files(units, file_size):
                write_file(ofs, join(oroot, rel, name), data)
        return [json.dumps(bad)]

    bad = a.run.spark.sparkContext.parallelize([0], 1).flatMap(materialize).collect()
    return out, [Finding.from_dict(f) for f in json.loads(bad[0])]


def rolled_back(rocksdb_dir: str, cfg: BrokerConfig) -> Finding:
    """A RocksDB ConsumeQueue in a store whose broker runs with storeType=default: what that broker serves instead."""
    message = "a RocksDB ConsumeQueue the broker does not read with storeType=default; the file ConsumeQueues are"
    message += " rebuilt from the commitlog"
    appended = cfg.appended_topics
    kept = [t for t in cfg.rocksdbBatchCQTopics if t not in appended]
    if kept:
        message += (
            f"; {', '.join(kept)}: every batch served from the first, where the RocksDB broker served from its last"
            " (its min-offset search skips the INNER_NUM-stepped queue offsets)"
        )
    if appended:
        message += (
            f"; {', '.join(appended)}: not BatchCQ in config/topics.json (mqadmin rocksDBConfigToJson exports it), so"
            " plain queues served at dense offsets, one per record, not the RocksDB's queue offsets"
        )
    return finding("cq-rolled-back-rocksdb", rocksdb_dir, message)


def double_written(rocksdb_dir: str, cfg: BrokerConfig) -> str:
    """What the audit leaves out of a double-write store (rocksdbCQDoubleWriteEnable, CombineConsumeQueueStore): the
    RocksDB ConsumeQueue written beside the file ones, which stay the broker's primary and are audited."""
    lmq = ", and the LMQ queues it alone holds (combineCQUseRocksdbForLmq)" if cfg.combineCQUseRocksdbForLmq else ""
    return (
        f"the RocksDB ConsumeQueue in {rocksdb_dir}/ that rocksdbCQDoubleWriteEnable writes beside the file ones{lmq}"
    )


def _rocksdb_file(f: Finding) -> bool:
    """A listing finding about one of RocksDB's own files in consumequeue/ (a rolled-back store's database)."""
    name = f.file.removeprefix(f"{CONSUMEQUEUE}/").strip("'")
    return f.kind == "hostile-name" and ROCKSDB_FILE.match(name) is not None


def _stale_file_queues(store: str) -> list[Finding]:
    """``<topic>/<queueId>`` directories in consumequeue/ of a RocksDB store: file queues from before a switch,
    not read by the broker and not trusted here."""
    fs, root = resolve(store)
    sel = pafs.FileSelector(join(root, CONSUMEQUEUE), allow_not_found=True)
    dirs = sorted(i.base_name for i in fs.get_file_info(sel) if i.type == pafs.FileType.Directory)
    message = "a file ConsumeQueue directory beside the RocksDB ConsumeQueue (left from before a switch); not read"
    return [finding("stray-file", f"{CONSUMEQUEUE}/{d}", message) for d in dirs]


def _in_rocksdb(f: Finding, rocksdb_dir: str) -> Finding:
    """A queue finding about the RocksDB ConsumeQueue: its file is the database, the position a CQ index."""
    return dataclasses.replace(f, file=rocksdb_dir, file_offset=None, message=f"RocksDB ConsumeQueue: {f.message}")


def stopping_queues(rebuilt: str, repairs: Sequence[Step]) -> dict[str, int]:
    """The repaired ConsumeQueues (queue directory -> queue offset) whose rebuilt files hold a unit the broker stops at.

    ``ConsumeQueue.recover`` reads a queue while ``offset >= 0 and size > 0``: a rebuilt queue with an invalid
    unit before a sound entry (a queue offset the commitlog has no record for) would hide every entry after it.
    """
    queues = sorted({posixpath.dirname(r.file) for r in repairs if r.file.startswith(f"{CONSUMEQUEUE}/")})
    return {q: at for q in queues if (at := rebuilt_queue_stop(rebuilt, q)) is not None}


def rebuilt_queue_stop(rebuilt: str, queue_dir: str) -> int | None:
    """Queue offset of the first invalid unit of a rebuilt queue that a valid unit follows; None when there is none.

    The files are read one at a time, in queue order.
    """
    fs, root = resolve(rebuilt)
    stop = None
    for f in list_files(fs, join(root, queue_dir)):
        units = CONSUME_QUEUE.decode(read_file(fs, f.path))
        valid = CONSUME_QUEUE.valid(units)
        first = CONSUME_QUEUE.valid_prefix(units) if stop is None else len(units)
        if first < len(units):
            stop = CONSUME_QUEUE.first_unit(f.base_name) + first
            valid = valid[first:]
        if stop is not None and valid.any():
            return stop
    return None
