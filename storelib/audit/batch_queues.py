"""The BatchConsumeQueue audit (5.0+): 46-byte units appended in queue order; the live queue ends where
``BatchConsumeQueue.recover`` stops (offset >= 0, size > 0, msgBaseOffset >= 0, batchSize > 0) and units are
compared with the rebuilt ones by msgBaseOffset."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from storelib.audit.queues import DAMAGED_UNITS, QueueAudit, into_ranges, max_physic_offset, queue_row
from storelib.broker.config import BrokerConfig
from storelib.findings import Finding, QueuePlace, finding, is_divergence
from storelib.formats.batchcq import BATCH_CONSUME_QUEUE


@dataclasses.dataclass
class _BatchQueue:
    """One BatchConsumeQueue laid out for comparison: live and rebuilt units in file order, each up to the end of
    its valid units (``l_end``, ``r_end``), and the findings so far."""

    topic: str
    queue_id: int
    file_size: int
    lv: np.ndarray
    rb: np.ndarray
    l_end: int
    r_end: int
    first_live: int  # ordinal of the first live unit (its file's start / unit size)
    findings: list[Finding] = dataclasses.field(default_factory=list)

    @property
    def rel_dir(self) -> str:
        return BATCH_CONSUME_QUEUE.queue_dir(self.topic, self.queue_id)

    def emit(self, kind: str, positions: np.ndarray, units: np.ndarray, message: str, ordinal0: int = 0) -> None:
        """One finding for ``units[positions]``, at the first of them (``ordinal0``: the first unit's ordinal)."""
        if not len(positions):
            return
        i, fmt = int(positions[0]), BATCH_CONSUME_QUEUE
        k = ordinal0 + i  # the unit's ordinal in the queue: its file and byte in it
        self.findings.append(
            finding(
                kind,
                f"{self.rel_dir}/{fmt.file_name(k, self.file_size)}",
                message.format(count=len(positions), first=int(units["msg_base_offset"][i])),
                topic=self.topic,
                queue_id=self.queue_id,
                queue_offset=int(units["msg_base_offset"][i]),
                commitlog_offset=int(units["offset"][i]),
                file_offset=fmt.file_offset(k, self.file_size),
                count=len(positions),
            )
        )


def classify_batch_queue(
    topic: str,
    queue_id: int,
    live: Mapping[str, bytes],
    rebuilt: Mapping[str, bytes],
    cfg: BrokerConfig,
    commitlog_min: int,
    commitlog_max: int,
    damaged: Sequence[tuple[int, int]] = (),
) -> QueueAudit:
    """Compare one live BatchConsumeQueue (file name -> bytes) with the rebuilt one, unit by msgBaseOffset;
    ``damaged``: the commitlog ranges of damaged records (live units pointing into them are cq-damaged-entries)."""
    fmt = BATCH_CONSUME_QUEUE
    lv, rb = _batch_units(live), _batch_units(rebuilt)
    first_live = fmt.first_unit(min(live, default="0"))
    q = _BatchQueue(topic, queue_id, fmt.file_size(cfg), lv, rb, fmt.valid_prefix(lv), fmt.valid_prefix(rb), first_live)
    for name, data in sorted(live.items()):
        if len(data) != q.file_size:
            message = f"file is {len(data)} bytes, not {q.file_size}; the broker will not load it"
            where: QueuePlace = {
                "topic": topic,
                "queue_id": queue_id,
                "file_offset": len(data) - fmt.partial_unit(len(data)),
            }
            q.findings.append(finding("cq-torn-file", f"{q.rel_dir}/{name}", message, **where, count=1))
    live_base, rebuilt_base = lv["msg_base_offset"][: q.l_end], rb["msg_base_offset"][: q.r_end]
    if q.r_end and not live:
        q.emit("cq-missing-queue", np.arange(q.r_end), rb, "{count} units from queue offset {first} have no file")
    else:
        _batch_rebuilt_units(q, live_base, rebuilt_base)
    _batch_live_units(q, ~np.isin(live_base, rebuilt_base), (commitlog_min, commitlog_max), damaged)
    write = delete = []
    if any(is_divergence(f) for f in q.findings):
        write = sorted(n for n, data in rebuilt.items() if live.get(n) != data)
        delete = sorted(n for n in live if n not in rebuilt)
    first = int(rebuilt_base[0]) if q.r_end else None
    live_max = max_physic_offset(lv["offset"][: q.l_end], lv["size"][: q.l_end])
    row = queue_row(
        topic, queue_id, q.findings, q.l_end, q.r_end, _batch_end(lv, q.l_end), first, _batch_end(rb, q.r_end), live_max
    )
    return QueueAudit(topic, queue_id, q.findings, row, write, delete, q.rel_dir)


def _batch_rebuilt_units(q: _BatchQueue, live_base: np.ndarray, rebuilt_base: np.ndarray) -> None:
    """The rebuilt units the live queue holds differently, lacks in its middle, or lacks at its end."""
    lv, rb = q.lv, q.rb
    pos = np.searchsorted(live_base, rebuilt_base)  # where each rebuilt unit's base is among the live ones
    found = pos < q.l_end
    found[found] = live_base[pos[found]] == rebuilt_base[found]
    same = found.copy()
    for f in ("offset", "size", "tags_code", "store_timestamp", "batch_size"):
        same[found] &= lv[f][pos[found]] == rb[f][: q.r_end][found]
    last_live = int(live_base[-1]) if q.l_end else -1
    q.emit("cq-wrong-entries", np.flatnonzero(found & ~same), rb, "{count} units differ, the first at {first}")
    lost = ~found & (rebuilt_base <= last_live)
    q.emit("cq-wrong-entries", np.flatnonzero(lost), rb, "{count} units are missing, the first at queue offset {first}")
    tail = np.flatnonzero(~found & (rebuilt_base > last_live))
    q.emit("cq-missing-tail", tail, rb, "the queue lacks its last {count} units, from queue offset {first}")


def _batch_live_units(
    q: _BatchQueue, unmatched: np.ndarray, commitlog: tuple[int, int], damaged: Sequence[tuple[int, int]]
) -> None:
    """The live units the rebuilt queue lacks (expired, past the commitlog's end, into damaged records, or wrong),
    and stale bytes."""
    lv, ordinal0 = q.lv, q.first_live
    expired = unmatched & (lv["offset"][: q.l_end] < commitlog[0])
    dirty = unmatched & (lv["offset"][: q.l_end] >= commitlog[1])
    kind = "cq-no-messages" if not q.r_end else "cq-wrong-entries"
    q.emit("cq-expired-head", np.flatnonzero(expired), lv, "{count} units point below the commitlog", ordinal0)
    q.emit("cq-dirty-tail", np.flatnonzero(dirty), lv, "{count} units point past the commitlog's end", ordinal0)
    into_damage = unmatched & into_ranges(lv["offset"][: q.l_end], damaged)
    q.emit("cq-damaged-entries", np.flatnonzero(into_damage & ~expired & ~dirty), lv, DAMAGED_UNITS, ordinal0)
    extra = np.flatnonzero(unmatched & ~expired & ~dirty & ~into_damage)
    q.emit(kind, extra, lv, "{count} units the commitlog does not hold", ordinal0)
    unit = BATCH_CONSUME_QUEUE.unit_size
    stale = np.flatnonzero(lv[q.l_end :].view(np.uint8).reshape(-1, unit).any(axis=1)) + q.l_end
    q.emit("cq-stale-bytes", stale, lv, "{count} units with stale bytes after the queue's logical end", ordinal0)


def _batch_end(units: np.ndarray, n: int) -> int | None:
    """One past the last queue offset of the first ``n`` units: msgBaseOffset + batchSize of the last."""
    return int(units["msg_base_offset"][n - 1]) + int(units["batch_size"][n - 1]) if n else None


def _batch_units(files: Mapping[str, bytes]) -> np.ndarray:
    """A BatchConsumeQueue's units in file order (whole units of each file)."""
    parts = [BATCH_CONSUME_QUEUE.decode(files[n]) for n in sorted(files)]
    return np.concatenate(parts) if parts else np.zeros(0, BATCH_CONSUME_QUEUE.unit)
