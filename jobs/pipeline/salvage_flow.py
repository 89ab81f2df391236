"""``rmqstore recover --salvage``: every damaged byte range the audit names (``damaged-records``) and every record
that frames but fails its BODYCRC or ``__CRC32#`` (``crc-mismatch``, ``crc-property-mismatch``) rewritten as
salvage records (storelib.broker.salvage), so the broker's recovery truncates nothing, every sound record keeps its
commitlog offset and queue offset and no damaged message is served; with the queue and index files rebuilt from the
salvaged log.

How: the salvaged segments are written into the work directory, beside hard links of every other store file (a
view of the store as it will be, no store byte changed); the view is rebuilt and audited; recover's transaction
then applies the salvaged segments and the view's repairs to the store in one backup (one undo). What the damaged
ranges held goes into the backup directory: ``salvage/<start>-<end>.bin`` (the old bytes) and
``salvage/manifest.json`` (each range, what was read of each message in it, the records written).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np

from jobs.pipeline.audit_flow import AuditResult, audit
from jobs.pipeline.context import Run
from jobs.pipeline.durable import Piece, write_durably
from jobs.pipeline.liveness import local_path
from jobs.pipeline.rebuild_flow import rebuild
from jobs.pipeline.recover_flow import check_stopped, plan, said_after
from jobs.pipeline.transaction import apply
from storelib.broker.config import BrokerConfig
from storelib.broker.dispatch import lmq_targets
from storelib.broker.resync import DAMAGED_RECORDS, read_what_is_left
from storelib.broker.salvage import SalvageRecord, Unit, fill
from storelib.constants import (
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_INNER_MULTI_QUEUE_OFFSET,
)
from storelib.errors import EXIT_CANNOT, EXIT_OK, Refused
from storelib.findings import KINDS, Finding
from storelib.formats.batchcq import decode_units as decode_batch_units
from storelib.formats.commitlog import decode_message, parse_properties
from storelib.formats.consumequeue import CQ_STORE_UNIT_SIZE, decode_units
from storelib.layout import BATCH_CONSUMEQUEUE, CONSUMEQUEUE, queue_dir
from storelib.reports.plan import Step

SALVAGE_DIR = "salvage"
CQ_DAMAGED = "cq-damaged-entries"


@dataclasses.dataclass(frozen=True)
class Salvage:
    """One damaged range [start, end) of segment ``file`` (store-relative), its old bytes and the records that
    replace them."""

    file: str
    base: int  # the segment's commitlog offset
    start: int
    end: int
    old: bytes
    records: tuple[SalvageRecord, ...]
    new: bytes

    def lines(self) -> list[str]:
        """The dry run's lines for this range."""
        out = [f"  salvage {self.file}: commitlog offsets {self.start} to {self.end} ({self.end - self.start} bytes):"]
        for r in self.records:
            what = "end-of-file BLANK" if r.blank else "filler (no queue, no index)"
            if r.unit is not None:
                units = ", ".join(f"{u.topic}/{u.queue_id} queue offset {u.queue_offset}" for u in (r.unit, *r.lmq))
                what = f"tombstone of {units}"
            out.append(f"    at {r.offset}, {r.size} bytes: {what}")
        return out


def holes(result: AuditResult) -> list[Finding]:
    """The findings salvage rewrites the records of: one per damaged range, one per record that frames (a record
    failing both its BODYCRC and its ``__CRC32#`` is named twice, salvaged once)."""
    out: dict[int | None, Finding] = {}
    for f in result.findings:
        if KINDS[f.kind].salvaged:
            out.setdefault(f.commitlog_offset, f)
    return list(out.values())


def live_units(root: Path, queues: set[tuple[str, int]], start: int, end: int) -> list[Unit]:
    """The units of the live ConsumeQueues ``queues`` that point into [start, end)."""
    out = []
    for topic, queue_id in sorted(queues):
        directory = root / queue_dir(topic, queue_id, CONSUMEQUEUE)
        for path in sorted(directory.iterdir()) if directory.is_dir() else []:
            units = decode_units(path.read_bytes())
            hit = np.flatnonzero((units["offset"] >= start) & (units["offset"] < end) & (units["size"] > 0))
            first = int(path.name) // CQ_STORE_UNIT_SIZE
            out += [Unit(topic, queue_id, first + int(i), int(units["offset"][i]), int(units["size"][i])) for i in hit]
    return out


def refuse_batch_units(root: Path, start: int, end: int) -> None:
    """Refused when a unit of a BatchCQ queue (batchconsumequeue/) points into [start, end): one unit stands for a
    batch's messages, a tombstone for one message is not built."""
    for path in sorted((root / BATCH_CONSUMEQUEUE).glob("*/*/*")):
        units = decode_batch_units(path.read_bytes())
        hit = np.flatnonzero((units["offset"] >= start) & (units["offset"] < end) & (units["size"] > 0))
        if len(hit):
            u = units[hit[0]]
            raise Refused(
                f"{path.relative_to(root)}: the BatchCQ unit of queue offset {int(u['msg_base_offset'])} points at "
                f"commitlog offset {int(u['offset'])} in the damaged range {start} to {end}: a batch's tombstone is "
                "not built; not salvaged"
            )


def damaged_queues(findings: list[Finding]) -> set[tuple[str, int]]:
    """The queues the audit named with units pointing into damaged records (``cq-damaged-entries``)."""
    return {
        (f.topic, f.queue_id)
        for f in findings
        if f.kind == CQ_DAMAGED and f.topic is not None and f.queue_id is not None
    }


def crc_range(seg: Path, base: int, offset: int, cfg: BrokerConfig) -> tuple[int, int, set[tuple[str, int]]]:
    """A record that frames but fails its BODYCRC or ``__CRC32#``: its range and the queues its header and LMQ
    properties name (where its units are looked for)."""
    with seg.open("rb") as f:
        f.seek(offset - base)
        (total,) = struct.unpack(">i", f.read(4))
        f.seek(offset - base)
        m = decode_message(f.read(total), 0, str(seg))
    props = parse_properties(m.properties)
    lmq = lmq_targets(
        cfg,
        m.topic,
        m.queue_id,
        props.get(PROPERTY_INNER_MULTI_DISPATCH, ""),
        props.get(PROPERTY_INNER_MULTI_QUEUE_OFFSET, ""),
    )
    return offset, offset + total, {(m.topic, m.queue_id), *((name, qid) for name, qid, _ in lmq)}


def check_record_units(h: Finding, queues: set[tuple[str, int]], units: list[Unit]) -> None:
    """A record that frames is salvaged only where a live unit points at it and, where the finding puts it in a
    queue (a header no CRC covers), the live unit of that queue offset (written when it was appended) is one of them;
    else Refused."""
    if not units:
        raise Refused(
            f"{h.file}: no live unit of the queues {sorted(queues)} points at the record at {h.commitlog_offset}"
        )
    if h.queue_offset is not None and (h.topic, h.queue_id, h.queue_offset) not in {
        (u.topic, u.queue_id, u.queue_offset) for u in units
    }:
        raise Refused(
            f"{h.file}: the live unit of {h.topic}/{h.queue_id} queue offset {h.queue_offset} does not point at the "
            f"record at {h.commitlog_offset} the audit puts there: not salvaged"
        )


def store_timestamp(seg: Path, base: int, end: int) -> int:
    """The STORETIMESTAMP of the sound record at ``end`` (the next after the damage), else (the damage runs to the
    segment's end-of-file BLANK or its end) of the segment's first record: the broker's crash recovery picks its
    start segment by its first record's store time, so a salvage record there never moves the start later."""
    with seg.open("rb") as f:
        for at in (end - base, 0):
            f.seek(at)
            head = np.frombuffer(f.read(256), dtype=np.uint8)
            magic = int.from_bytes(head[4:8].tobytes(), "big", signed=True) if len(head) >= 8 else 0
            ts = read_what_is_left(head, 0, base + at).store_timestamp
            if magic in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) and ts is not None:
                return ts
    raise Refused(f"{seg}: no sound record to take a store timestamp from")


def plan_salvage(root: Path, result: AuditResult, cfg: BrokerConfig) -> list[Salvage]:
    """One Salvage per damaged range (``damaged-records``) and per record that frames but fails a CRC
    (``crc-mismatch``, ``crc-property-mismatch``); Refused when one cannot be filled."""
    out = []
    for h in holes(result):
        assert h.commitlog_offset is not None
        seg = root / h.file
        base = int(seg.name)
        if h.kind == DAMAGED_RECORDS:
            assert h.count is not None
            start, end = h.commitlog_offset, h.commitlog_offset + h.count
            queues = damaged_queues(result.findings)
        else:  # a record that frames; a queue its header does not name where the finding proves it belongs
            start, end, queues = crc_range(seg, base, h.commitlog_offset, cfg)
            queues |= {(h.topic, h.queue_id)} if h.topic is not None and h.queue_id is not None else set()
        if end - base > cfg.mappedFileSizeCommitLog:
            raise Refused(f"{h.file}: the damaged range {start} to {end} crosses the segment's end: not salvaged")
        refuse_batch_units(root, start, end)
        units = live_units(root, queues, start, end)
        if KINDS[h.kind].kept:
            check_record_units(h, queues, units)
        segment_end = end - base == seg.stat().st_size
        records, new = fill(start, end, units, store_timestamp(seg, base, end), segment_end)
        with seg.open("rb") as f:
            f.seek(start - base)
            old = f.read(end - start)
        out.append(Salvage(h.file, base, start, end, old, tuple(records), new))
    return out


def make_view(root: Path, view: Path, salvages: list[Salvage]) -> None:
    """``view``: hard links of every store file, the salvaged segments as new files (old bytes, ranges rewritten)."""
    changed = {s.file for s in salvages}
    for dirpath, _, names in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        if rel.parts and rel.parts[0].startswith(".rmqstore"):
            continue
        (view / rel).mkdir(parents=True, exist_ok=True)
        for name in names:
            if str(rel / name) not in changed and name != "lock":
                os.link(Path(dirpath) / name, view / rel / name)
    for file in sorted(changed):
        shutil.copyfile(root / file, view / file)
        with (view / file).open("r+b") as f:
            for s in (s for s in salvages if s.file == file):
                f.seek(s.start - s.base)
                f.write(s.new)


def view_steps(run: Run, view: Path, rebuilt: Path, salvages: list[Salvage], report: str | None) -> list[Step]:
    """Rebuild and audit the view; the salvaged segments (their new bytes under ``rebuilt/salvage``) and the
    view's repairs, as recover's steps. Refused when the view still has damage or the audit cannot vouch."""
    rebuild(run, str(view), str(rebuilt), on_error="stop")
    checked = audit(run, str(view), str(rebuilt), report)
    if holes(checked):
        raise Refused("the salvaged view still has damaged records: " + holes(checked)[0].message)
    planned = plan(checked, truncate_torn_tail=False)
    if planned.stopping:
        queue, at = next(iter(planned.stopping.items()))
        raise Refused(
            f"{queue}: the rebuilt queue of the salvaged store has no unit for queue offset {at} (a live unit points "
            "at a record salvage wrote for no queue of its own): not salvaged"
        )
    steps = []
    for file in sorted({s.file for s in salvages}):
        (rebuilt / SALVAGE_DIR / file).parent.mkdir(parents=True, exist_ok=True)
        os.link(view / file, rebuilt / SALVAGE_DIR / file)
        steps.append(Step("replace", file, DAMAGED_RECORDS, source=f"{SALVAGE_DIR}/{file}"))
    return steps + list(planned.steps)


def keep_old_bytes(backup: Path, salvages: list[Salvage]) -> None:
    """``backup/salvage``: each range's old bytes and manifest.json (what was read of each record in it)."""
    entries = []
    for s in salvages:
        name = f"{SALVAGE_DIR}/{s.start}-{s.end}.bin"
        write_durably(backup / name, [Piece.of_bytes(s.old)])
        old = np.frombuffer(s.old, dtype=np.uint8)
        entries.append(
            {
                "file": s.file,
                "start": s.start,
                "end": s.end,
                "bytes": name,
                "records": [_record_entry(r, old, s.start) for r in s.records],
            }
        )
    text = json.dumps({"format": "rmqstore-salvage/1", "ranges": entries}, indent=1) + "\n"
    write_durably(backup / SALVAGE_DIR / "manifest.json", [Piece.of_bytes(text.encode())])


def _record_entry(r: SalvageRecord, old: np.ndarray, start: int) -> dict[str, object]:
    """One written record and what the old bytes at its offset still read as (never trusted)."""
    entry: dict[str, object] = {"offset": r.offset, "size": r.size, "written": r.written}
    if r.unit is not None:
        entry["unit"] = dataclasses.asdict(r.unit)
    entry["read"] = dataclasses.asdict(read_what_is_left(old[r.offset - start :], 0, r.offset))
    return entry


def check_salvageable(cfg: BrokerConfig, damaged: list[Finding]) -> None:
    """Refused for the stores salvage was not proven on: DLedger entries, RocksDB ConsumeQueues, and brokers whose
    recovery wants a ``__CRC32#`` property (``forceVerifyPropCRC``)."""
    if cfg.forceVerifyPropCRC:
        raise Refused("forceVerifyPropCRC: the broker's recovery wants a __CRC32# property salvage records do not have")
    if cfg.enableDLegerCommitLog or any(not f.file.startswith("commitlog/") for f in damaged):
        raise Refused("salvage rewrites commitlog/ records; DLedger entries are not salvaged")
    if cfg.rocksdb_consume_queue:
        raise Refused("salvage reads the live units of file ConsumeQueues; this store's are in RocksDB")


def salvage(run: Run, store: str, before: AuditResult, backup: Path | None, report: str | None) -> int:
    """Print the salvage of every damaged range and the steps that apply it; with ``backup`` (--apply) apply
    them in one transaction, keep the old bytes in the backup and audit the store again. The exit code."""
    if before.exit_code == EXIT_CANNOT:
        raise Refused("the store could not be audited: " + "; ".join(f.message for f in before.findings[:3]))
    if not holes(before):
        print("recover --salvage: no damaged records to salvage")
        return EXIT_OK
    check_salvageable(run.cfg, holes(before))
    root = local_path(store)
    salvages = plan_salvage(root, before, run.cfg)
    for s in salvages:
        print("\n".join(s.lines()))
    with run.work_dir(str(root), same_filesystem=True) as uri:
        work = local_path(uri)
        make_view(root, work / "view", salvages)
        steps = view_steps(run, work / "view", work / "rebuilt", salvages, report and f"{report}/view")
        for step in steps:
            print(f"  {step.action} {step.file}: {step.reason}")
        if backup is None:
            print("recover --salvage: dry run; nothing was changed (--apply to make these changes)")
            return EXIT_OK
        check_stopped(store)
        apply(steps, store, str(work / "rebuilt"), backup, run.cfg)
        keep_old_bytes(backup, salvages)
        print(f"recover: applied; backup in {backup} (undo: rmqstore recover --store {store} --undo {backup})")
        after = audit(run, store, str(work / "rebuilt"), report and f"{report}/after")
    return said_after(after)
