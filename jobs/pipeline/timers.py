"""The timer store and the delay offsets on the driver: one Spark task (udfs.timers) judges the store's timer files
against the timer records the parse left in the scratch directory; the rebuild has it write the rebuilt timerwheel,
config/timercheck and config/delayOffset.json, the audit turns its result into findings and recover's steps."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jobs.pipeline.context import Found, Run, numbered_tasks, spark_schema
from storelib.audit.timers import Settings
from storelib.findings import Finding
from storelib.formats import timerlog
from storelib.reports.plan import Step
from udfs.fs import join, list_files, resolve
from udfs.timers import RESULT_SCHEMA, timer_task

if TYPE_CHECKING:
    from jobs.pipeline.audit_types import Audit

TIMER_FILES = ("timerwheel", "config/timercheck", "config/delayOffset.json")


@dataclasses.dataclass(frozen=True)
class TimerResult:
    """What the timer task found: findings, counts, the pending messages by real topic, the files it wrote."""

    findings: tuple[Finding, ...]
    counts: dict[str, int]
    pending: tuple[dict[str, Any], ...]
    writes: dict[str, str]  # store-relative file recover writes -> the finding kind it answers
    written: tuple[str, ...]  # the rebuilt files in the output
    cut_at: int | None
    delay_table: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["findings"] = [f.to_dict() for f in self.findings]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TimerResult:
        """A result as ``to_dict`` (or the timer task) wrote it."""
        return cls(
            tuple(Finding.from_dict(f) for f in d.get("findings", ())),
            dict(d.get("counts", {})),
            tuple(d.get("pending", ())),
            dict(d.get("writes", {})),
            tuple(d.get("written", ())),
            d.get("cut_at"),
            dict(d.get("delay_table", {})),
        )


def applies(run: Run, store: str) -> bool:
    """Whether the store's rules are a 5.x release's: the timer store and these delay-offset rules are 5.x's."""
    rules = run.broker_rules.get(store)
    return rules is not None and _release(rules.rules.name) >= (5,)


def settings(run: Run, store: str, log_end: int, now_ms: int | None = None) -> Settings:
    """The timer checks' settings from the run's broker config and the store's rules."""
    cfg = run.cfg
    release = _release(cfg.brokerVersion or run.broker_rules[store].rules.name)
    return Settings(
        cfg.timerPrecisionMs,
        cfg.mappedFileSizeTimerLog,
        release,
        cfg.delay_levels_ms,
        int(time.time() * 1000) if now_ms is None else now_ms,
        log_end,
        cfg.appendTopicForTimerDeleteKey,
    )


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def judge_timers(
    run: Run, store: str, scratch: str, log_end: int, out: str | None = None, pending_out: str | None = None
) -> TimerResult:
    """Run the timer task: ``out`` receives the rebuilt timer files, ``pending_out`` the pending messages."""
    task = timer_task(store, scratch, settings(run, store, log_end), out, pending_out)
    rows = numbered_tasks(run, 1).mapInArrow(task, spark_schema(RESULT_SCHEMA)).collect()
    return TimerResult.from_dict(json.loads(rows[0].result))


def timer_steps(result: TimerResult, store_files: list[str], timer_log_file_size: int) -> list[Step]:
    """recover's steps for the timer files: each file to write from the rebuilt one (replace or create), and the cut
    of the timerlog (its file zeroed from the cut, later files deleted)."""
    steps = [Step("replace" if f in store_files else "create", f, kind, f) for f, kind in sorted(result.writes.items())]
    if result.cut_at is not None:
        cut_file = result.cut_at // timer_log_file_size * timer_log_file_size
        name = f"{timerlog.DIR}/{timerlog.file_name(cut_file)}"
        steps.append(Step("truncate", name, "timer-unit-past-log", offset=result.cut_at - cut_file))
        later = [f for f in store_files if f.startswith(timerlog.DIR + "/") and f > name]
        steps += [Step("delete", f, "timer-unit-past-log") for f in sorted(later)]
    return steps


def audit_timers(a: Audit) -> tuple[dict[str, int] | None, Found]:
    """The audit's share: the timer store's counts, its findings and recover's steps. With ``--rebuilt`` the timer
    task judges the store as it is now, over the audit's scan; else the audit's own rebuild judged it (rebuild.json's
    ``timers``). A ``--since-last`` audit leaves the timers out (they need the whole commitlog's records)."""
    if not applies(a.run, a.store):
        return None, Found()
    if a.scope.start > 0:
        return None, Found(skipped=("timers and delay offsets: they need the whole commitlog",))
    if a.scratch is not None:
        result = judge_timers(a.run, a.store, a.scratch, a.rebuild_report.commitlog.max_offset)
    else:
        result = TimerResult.from_dict(a.rebuild_report.timers)
    found = Found(result.findings, tuple(timer_steps(result, store_files(a.store), a.cfg.mappedFileSizeTimerLog)))
    return result.counts, found


def store_files(store: str) -> list[str]:
    """The store's timer files that exist (store-relative): the timerlog files, timerwheel, timercheck,
    delayOffset.json."""
    fs, root = resolve(store)
    out = [f"{timerlog.DIR}/{i.base_name}" for i in list_files(fs, join(root, timerlog.DIR))]
    out += [f for f in TIMER_FILES if fs.get_file_info(join(root, f)).size is not None]
    return sorted(out)
