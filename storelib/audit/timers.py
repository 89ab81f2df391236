"""The timer store and the delay levels' offsets against the commitlog (Spark-free): the wheel the timerlog folds
to, the units' records, the timer checkpoint, delayOffset.json (and its .bak, as ``ConfigManager.load`` falls
back to it), the pending messages, and what recover writes. Formats: storelib.formats.timerlog, timerwheel,
timercheck, delayoffset; rules: storelib.broker.timers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.audit.timerfold import NONE, FoldSettings, RecordIndex, Side, UnitFold, empty, fold_units
from storelib.broker import timers as rules
from storelib.errors import StoreFormatError
from storelib.findings import Finding, QueuePlace, finding
from storelib.formats import delayoffset, timercheck, timerlog, timerwheel
from storelib.formats.timercheck import TimerCheckpoint

WHEEL = timerwheel.FILE
CHECKPOINT = timercheck.PATH
DELAY_OFFSETS = delayoffset.PATH


@dataclasses.dataclass(frozen=True)
class TimerStore:
    """What the store holds of the timer store and the delay offsets (bytes as read; None: no such file)."""

    timerlog: tuple[timerlog.LogFile, ...]  # each file's walk (in ranges), in offset order
    wheel: bytes | None
    checkpoint: bytes | None
    delay_offsets: str | None
    delay_offsets_bak: str | None
    snapshots: tuple[tuple[str, bytes], ...] = ()  # timerwheel.<flag> files (5.4.0+)
    rocksdb_timer_records: int = -1  # records in rocksdbstore's timer column family (-1: none there, or not read)

    @property
    def present(self) -> bool:
        """Whether the store has a timer store at all (5.x with timerWheelEnable)."""
        return bool(self.timerlog) or self.wheel is not None or self.checkpoint is not None

    @property
    def live_checkpoint(self) -> TimerCheckpoint | None:
        """The timer checkpoint as the broker reads it; None when it is missing or too short to read."""
        try:
            return TimerCheckpoint.unpack(self.checkpoint) if self.checkpoint is not None else None
        except StoreFormatError:
            return None


@dataclasses.dataclass(frozen=True)
class Settings:
    """The broker settings and facts the checks need."""

    precision_ms: int
    timer_log_file_size: int
    release: tuple[int, ...]
    delay_levels_ms: tuple[int, ...]
    now_ms: int
    log_end: int  # the commitlog's end: one past its last valid record
    append_topic_for_delete_key: bool = False


@dataclasses.dataclass(frozen=True)
class TimerAudit:
    """The findings, what recover writes (store-relative path -> bytes), the messages' states and the counts."""

    findings: tuple[Finding, ...]
    wheel: bytes | None  # the rebuilt timerwheel (None: the store has no timer store)
    delay_table: dict[int, int]
    delay_offsets: str | None  # the rebuilt delayOffset.json (None: no delay level has records)
    checkpoint: TimerCheckpoint | None
    cut_at: int | None  # timerlog offset from which units point past the commitlog's end (recover zeroes them)
    writes: dict[str, str]  # store-relative file -> the finding kind it answers
    timers: tuple[rules.Message, ...]
    schedule: tuple[rules.Message, ...]
    counts: dict[str, int]

    def pending(self) -> list[rules.Message]:
        return [m for m in (*self.timers, *self.schedule) if m.pending]


@dataclasses.dataclass(frozen=True)
class TimerLog:
    """The timerlog folded: its files' walks (start, end, why), the fold of its units, and per wheel snapshot the
    touched slots of the units before its position."""

    files: tuple[tuple[int, int, str], ...]
    fold: UnitFold
    snapshots: dict[int, np.ndarray]


def fold_log(store: TimerStore, index: RecordIndex, s: Settings) -> TimerLog:
    """The timerlog's files walked range by range, each range folded and combined in timerlog order: memory holds
    one range, the fold's slots and the snapshots' slots."""
    fs = FoldSettings(s.precision_ms, s.log_end, rules.read_floor_ms(s.now_ms, s.precision_ms))
    flags = {f for f in (timerwheel.snapshot_flag(name) for name, _ in store.snapshots) if f is not None}
    snapshots = {f: timerwheel.empty_state() for f in flags}
    acc = empty(index)
    files = []
    for log_file in store.timerlog:
        for w in log_file.ranges():
            positions = w.positions
            acc = acc.then(fold_units(w.units, positions, index, fs))
            for f in flags:
                b = positions < f
                part = timerwheel.partial(
                    timerlog.unit_time(w.units[b]), positions[b], w.units["magic"][b], s.precision_ms
                )
                snapshots[f] = timerwheel.combine(snapshots[f], part)
        files.append((w.start, w.end, w.why))
    return TimerLog(tuple(files), acc, snapshots)


def audit_timers(store: TimerStore, records: pa.Table, s: Settings) -> TimerAudit:
    """Every check of the timer store and the delay offsets; the files recover would write."""
    found: list[Finding] = []
    writes: dict[str, str] = {}
    timers = rules.timer_states(records, s.release, s.append_topic_for_delete_key)
    schedule = rules.schedule_states(records, s.delay_levels_ms)
    wheel = None
    checkpoint = None
    index = RecordIndex.of(records, timers)
    log = fold_log(store, index, s)
    if store.present:
        found += _log_findings(log, s)
        wheel = timerwheel.wheel_bytes(_kept(log.fold).wheel)
        found += _wheel_findings(store, wheel, max(log.fold.first_pos, 0), writes, s)
        found += _snapshot_findings(store, log)
        checkpoint, ck_found = _checkpoint(store, log.fold, index.delivered_queue, records, s)
        found += ck_found
        if ck_found:
            writes[CHECKPOINT] = ck_found[0].kind
        found += _lookback(log.fold, s)
    if store.rocksdb_timer_records > 0:
        message = (
            f"the RocksDB timer store ({rules.ROCKSDB_DIR}/, column family {rules.ROCKSDB_TIMER_FAMILY}) holds "
            f"{store.rocksdb_timer_records} record(s): they are not checked, rebuilt nor listed as pending"
        )
        found.append(
            finding("timer-rocksdb-not-audited", rules.ROCKSDB_DIR, message, count=store.rocksdb_timer_records)
        )
    table, odd = rules.delivered_offsets(schedule)
    found += _schedule_findings(store, table, odd, writes)
    text = None
    if table:
        version = _live_data_version(store)
        text = delayoffset.encode(table, version, fastjson2=s.release[:2] >= (5, 4))
    counts = {
        "timerlog_files": len(store.timerlog),
        "timerlog_units": log.fold.units,
        "wheel_slots_used": int(np.count_nonzero(np.frombuffer(wheel, timerwheel.SLOT_DTYPE)["time"])) if wheel else 0,
        "timers": len(timers),
        "timers_pending": sum(m.pending for m in timers),
        "delayed": len(schedule),
        "delayed_pending": sum(m.pending for m in schedule),
    }
    return TimerAudit(
        tuple(found), wheel, table, text, checkpoint, log.fold.cut_at, writes, tuple(timers), tuple(schedule), counts
    )


def _kept(fold: UnitFold) -> Side:
    """The units the rebuilt files are made of: all of them, or those before the cut."""
    return fold.kept if fold.cut_at is not None else fold.all


def _log_findings(log: TimerLog, s: Settings) -> list[Finding]:
    """The timerlog's files and units: torn files, units past the log, units without their record, units whose time
    is not the record's TIMER_OUT_MS, units enqueued twice."""
    out = []
    for k, (start, end, why) in enumerate(log.files):
        last = k == len(log.files) - 1
        if why == timerlog.END_BAD or (not last and why != timerlog.END_BLANK):
            rel = f"{timerlog.DIR}/{timerlog.file_name(start)}"
            message = (
                f"the units stop at file offset {end} ({why}) before the end of the timerlog: the broker's "
                "recovery truncates the timerlog there when it reaches this file, and every later unit is lost"
            )
            out.append(finding("timer-log-torn", rel, message, file_offset=end, commitlog_offset=None))
    fold = log.fold
    if fold.first_past is not None:
        position, offset = fold.first_past
        where = (
            "recover cuts the timerlog there"
            if fold.cut_at is not None
            else (f"{fold.stray} unit(s) after them point inside the log, so recover leaves the timerlog as it is")
        )
        out.append(
            finding(
                "timer-unit-past-log",
                _unit_file(position, s),
                f"{fold.past} timerlog unit(s) point at or past the commitlog's end {s.log_end:,} (a truncated "
                f"log): dequeue cannot read them and drops their timers; {where}",
                file_offset=position % s.timer_log_file_size,
                commitlog_offset=offset,
                count=fold.past,
            )
        )
    if fold.first_bad_record is not None:
        position, offset, size = fold.first_bad_record
        out.append(
            finding(
                "timer-unit-bad-record",
                _unit_file(position, s),
                f"{fold.bad_record} timerlog unit(s) point at no rmq_sys_wheel_timer record of their size (the first: "
                f"offset {offset:,}, size {size}): dequeue cannot decode the message and drops the timer",
                file_offset=position % s.timer_log_file_size,
                commitlog_offset=offset,
                count=fold.bad_record,
            )
        )
    out += _time_findings(fold, s)
    dup = fold.duplicates
    if dup:
        out.append(
            finding(
                "timer-unit-duplicate",
                timerlog.DIR,
                f"{dup} rmq_sys_wheel_timer record(s) have more than one timerlog unit (an enqueue retried): the "
                "broker delivers each of them once per unit",
                count=dup,
            )
        )
    return out


def _unit_file(position: int, s: Settings) -> str:
    return f"{timerlog.DIR}/{timerlog.file_name(position // s.timer_log_file_size * s.timer_log_file_size)}"


def _time_findings(fold: UnitFold, s: Settings) -> list[Finding]:
    """Units filed under another time than their record's TIMER_OUT_MS (a roll unit: not after it)."""
    if fold.first_wrong_time is None:
        return []
    position, offset, when, out_ms = fold.first_wrong_time
    return [
        finding(
            "timer-unit-wrong-time",
            _unit_file(position, s),
            f"{fold.wrong_time} timerlog unit(s) are filed under another time than their record's TIMER_OUT_MS (the "
            f"first: {when} for {out_ms}): the broker delivers them at the unit's time",
            file_offset=position % s.timer_log_file_size,
            commitlog_offset=offset,
            count=fold.wrong_time,
            expected=str(out_ms),
            actual=str(when),
        )
    ]


def _wheel_findings(
    store: TimerStore, rebuilt: bytes, timerlog_start: int, writes: dict[str, str], s: Settings
) -> list[Finding]:
    """The live timerwheel against the fold of the timerlog: missing, of the wrong size, or slots that differ (slots
    whose units were all in timerlog files already deleted are left out: their time is long past)."""
    live = store.wheel
    if live is None:
        return _missing_wheel(store, rebuilt, writes, s)
    if len(live) != timerwheel.WHEEL_SIZE:
        writes[WHEEL] = "timer-wheel-size"
        message = f"the timer wheel is {len(live):,} bytes, not {timerwheel.WHEEL_SIZE:,}: the broker does not start"
        return [finding("timer-wheel-size", WHEEL, message, expected=str(timerwheel.WHEEL_SIZE), actual=str(len(live)))]
    live_slots, want = timerwheel.read_slots(live), timerwheel.read_slots(rebuilt)
    bad = timerwheel.differing_slots(live_slots, want)
    expired = (live_slots["last_pos"][bad] < timerlog_start) & (want["time"][bad] == 0)
    bad = bad[~expired]
    if not len(bad):
        return []
    writes[WHEEL] = "timer-slot-wrong"
    i = int(bad[0])
    message = (
        f"{len(bad)} wheel slot(s) differ from the timerlog's fold (the first: slot {i}, "
        f"{_slot_text(live_slots[i])} instead of {_slot_text(want[i])}): dequeue walks a slot back from its lastPos, "
        "so its timers are lost, repeated or delivered at another time"
    )
    return [
        finding(
            "timer-slot-wrong",
            WHEEL,
            message,
            file_offset=i * timerwheel.SLOT_SIZE,
            count=len(bad),
            expected=_slot_text(want[i]),
            actual=_slot_text(live_slots[i]),
        )
    ]


def _missing_wheel(store: TimerStore, rebuilt: bytes, writes: dict[str, str], s: Settings) -> list[Finding]:
    """A missing wheel: ``TimerMessageStore.recover`` (5.0.0, 5.3.3, 5.5.0 jars) starts an empty one and refiles the
    timerlog's units from ``recovery_start`` on (``recoverAndRevise``); a slot not yet read (time from
    lastReadTimeMs on) whose first unit lies before that is lost."""
    ck = store.live_checkpoint
    flushed = ck.last_timer_log_flush_pos if ck else 0
    window = rules.recovery_start(flushed, s.timer_log_file_size)
    slots = timerwheel.read_slots(rebuilt)
    read_tick = (ck.last_read_time_ms if ck else 0) // s.precision_ms  # a slot holds its time in ticks
    unread = (slots["time"] > 0) & (slots["time"] >= read_tick)
    lost = unread & (slots["first_pos"] < window)
    units = int(slots["num"][lost].sum())
    size = s.timer_log_file_size
    where = f"timerlog position {window:,} (the file of lastTimerLogFlushPos {flushed:,} minus {size:,} bytes)"
    kind = "timer-wheel-missing" if units else "timer-wheel-refilled"
    writes[WHEEL] = kind
    if units:
        message = (
            f"the timer wheel is missing: the broker starts with an empty wheel and refiles only the timerlog's units "
            f"from {where} on; {int(lost.sum())} pending slot(s) holding {units} unit(s) begin before it: those "
            "timers are never delivered"
        )
    else:
        message = (
            f"the timer wheel is missing: the broker starts with an empty wheel and refiles the timerlog's units from "
            f"{where} on, where every pending slot begins: it refills the wheel itself (read from the jars; no broker "
            "has shown it here)"
        )
    return [finding(kind, WHEEL, message, count=units or None)]


def _slot_text(slot: np.void) -> str:
    return (
        f"time {int(slot['time'])} first {int(slot['first_pos'])} last {int(slot['last_pos'])} "
        f"num {int(slot['num'])} magic {int(slot['magic'])}"
    )


def _snapshot_findings(store: TimerStore, log: TimerLog) -> list[Finding]:
    """Each ``timerwheel.<flag>`` snapshot (5.4.0+) against the fold of the units before its flag."""
    out = []
    for name, data in store.snapshots:
        flag = timerwheel.snapshot_flag(name)
        if flag is None:
            continue
        live = timerwheel.read_slots(data)
        bad = timerwheel.differing_slots(live, timerwheel.read_slots(timerwheel.wheel_bytes(log.snapshots[flag])))
        if len(data) != timerwheel.WHEEL_SIZE or len(bad):
            message = (
                f"the wheel snapshot at timerlog position {flag} differs from the fold of the units before it in "
                f"{len(bad)} slot(s): with timerWheelSnapshotFlush the broker loads the newest snapshot at start"
            )
            out.append(finding("timer-snapshot-wrong", name, message, count=len(bad)))
    return out


def _checkpoint(
    store: TimerStore, fold: UnitFold, delivered_queue: int, records: pa.Table, s: Settings
) -> tuple[TimerCheckpoint, list[Finding]]:
    """The live timer checkpoint, or (missing, unreadable, or ahead of the timerlog or of rmq_sys_wheel_timer's
    records) the one the timerlog and the commitlog give, with the finding."""
    kept = _kept(fold)
    end = max(kept.end, 0)
    timer_records = records.filter(pc.equal(records["topic"], rules.TIMER_TOPIC))
    queue_end = int(pc.max(timer_records["queue_offset"]).as_py()) + 1 if timer_records.num_rows else 0
    live = store.live_checkpoint
    derived = _derived_checkpoint(kept, end, delivered_queue, s, live)
    if live is None:
        what = "missing" if store.checkpoint is None else f"{len(store.checkpoint)} bytes"
        message = (
            f"the timer checkpoint is {what}: the broker starts from zero, enqueues rmq_sys_wheel_timer again from "
            "its first record and reads the wheel from 7 days back, delivering timers again"
        )
        return derived, [finding("timer-checkpoint-unreadable", CHECKPOINT, message)]
    ahead = []
    if live.last_timer_log_flush_pos > end or fold.cut_at is not None:
        ahead.append(f"lastTimerLogFlushPos {live.last_timer_log_flush_pos:,} past the timerlog's end {end:,}")
    if max(live.last_timer_queue_offset, live.master_timer_queue_offset) > queue_end:
        ahead.append(
            f"queue offset {max(live.last_timer_queue_offset, live.master_timer_queue_offset):,} past "
            f"rmq_sys_wheel_timer's {queue_end:,} records"
        )
    if not ahead:
        return live, []
    release = "5.3.0 and later move" if rules.clamps_queue_offset(s.release) else "5.0.0 to 5.2.x do not move"
    message = (
        f"the timer checkpoint is ahead of the store ({'; '.join(ahead)}): dequeue cannot read what it points at, "
        f"and {release} the enqueue offset back into the queue, so new timers wait until the queue grows past it"
    )
    return derived, [finding("timer-checkpoint-ahead", CHECKPOINT, message)]


def _derived_checkpoint(
    kept: Side, end: int, delivered_queue: int, s: Settings, live: TimerCheckpoint | None
) -> TimerCheckpoint:
    """A checkpoint the store vouches for: the wheel read up to the earliest slot holding a pending timer (else one
    slot past the last unit's), the timerlog flushed to its end, rmq_sys_wheel_timer enqueued up to one past the
    last record that has a unit or was delivered; the live DataVersion kept."""
    last = kept.last_ms + s.precision_ms if kept.last_ms != NONE else 0
    read = kept.read_ms if kept.read_ms is not None else last
    enqueued = max(kept.queue, delivered_queue) + 1
    version = (live.state_version, live.data_version_timestamp, live.data_version_counter) if live else (0, 0, 0)
    return TimerCheckpoint(read, end, enqueued, enqueued, *version)


def _lookback(fold: UnitFold, s: Settings) -> list[Finding]:
    """Pending timers filed before the 7-day look-back: the broker never reads their slots again."""
    lost = _kept(fold).lookback
    if not lost:
        return []
    floor = rules.read_floor_ms(s.now_ms, s.precision_ms)
    message = (
        f"{lost} pending timer(s) are due before the broker's 7-day look-back ({floor} ms): a broker "
        "started now never delivers them; send them again (rmqstore inspect --pending-out)"
    )
    return [finding("timer-lookback-exceeded", timerlog.DIR, message, count=lost)]


def effective_delay_offsets(store: TimerStore) -> tuple[dict[int, int] | None, str]:
    """The offset table ``ConfigManager.load`` ends with, and from which file: delayOffset.json when it has
    content that parses, else its .bak (when that has content that does not parse: None, the broker does not
    start), else an empty table."""
    for text, name in ((store.delay_offsets, DELAY_OFFSETS), (store.delay_offsets_bak, DELAY_OFFSETS + ".bak")):
        if text:
            try:
                return delayoffset.parse(text, name)[0], name
            except StoreFormatError:
                if name.endswith(".bak"):
                    return None, name
    return {}, ""


def _live_data_version(store: TimerStore) -> dict | None:
    for text in (store.delay_offsets, store.delay_offsets_bak):
        try:
            version = delayoffset.parse(text)[1] if text else None
        except StoreFormatError:
            continue
        if version is not None:
            return version
    return None


def _schedule_findings(
    store: TimerStore, table: dict[int, int], odd: Sequence[rules.Message], writes: dict[str, str]
) -> list[Finding]:
    """The delay offsets the broker would load against those the commitlog shows delivered."""
    live, source = effective_delay_offsets(store)
    out = []
    if live is None:
        message = (
            "delayOffset.json and delayOffset.json.bak cannot be read: ConfigManager.load fails, the broker does not "
            "start"
        )
        out.append(finding("schedule-offsets-unreadable", DELAY_OFFSETS, message))
    else:
        out += _compare_levels(live, table, source)
    if odd:
        m = odd[0]
        message = (
            f"{len(odd)} delayed message(s) were delivered after an earlier one of their level was not (the first: "
            f"level {m.queue_id + 1}, queue offset {m.queue_offset}): no offset says so; they are delivered again"
        )
        out.append(finding("schedule-delivered-out-of-order", DELAY_OFFSETS, message, count=len(odd)))
    if any(f.kind != "schedule-delivered-out-of-order" for f in out):
        writes[DELAY_OFFSETS] = out[0].kind
    return out


def _compare_levels(live: dict[int, int], table: dict[int, int], source: str) -> list[Finding]:
    out = []
    read = f"read from {source}" if source else "no delayOffset.json nor .bak"
    missing = sorted(level for level in table if level not in live)
    if missing:
        message = (
            f"no delivered offset for delay level(s) {', '.join(map(str, missing))} ({read}): the broker starts those "
            "levels at their first record and delivers every delayed message of them again"
        )
        out.append(finding("schedule-offsets-missing", DELAY_OFFSETS, message, count=len(missing)))
    for level in sorted(set(table) & set(live)):
        have, want = live[level], table[level]
        if have < want:
            message = (
                f"delay level {level} ({read}) says {have}, but the commitlog shows its queue delivered up to {want}: "
                f"the broker delivers {want - have} message(s) again"
            )
            out.append(_level("schedule-offset-behind", level, message, want, have))
        elif have > want:
            message = (
                f"delay level {level} ({read}) says {have}, but the commitlog shows its queue delivered only up to "
                f"{want}: the broker never delivers the {have - want} message(s) between"
            )
            out.append(_level("schedule-offset-ahead", level, message, want, have))
    return out


def _level(kind: str, level: int, message: str, want: int, have: int) -> Finding:
    where: QueuePlace = {"topic": rules.SCHEDULE_TOPIC, "queue_id": level - 1, "queue_offset": min(want, have)}
    return finding(kind, DELAY_OFFSETS, message, count=abs(want - have), expected=str(want), actual=str(have), **where)
