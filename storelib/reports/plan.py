"""recover's plan, one function for the audit's advice, recover's dry run and recover's actions: which store files
change and why, and what is left alone and why. Pure logic over the audit's findings and repairs; no I/O."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from posixpath import dirname
from typing import Any

from storelib.findings import AREA_TIMERS, KINDS, Finding, blocks_recover, is_divergence, is_repairable
from storelib.layout import CHECKPOINT

ACTIONS = ("replace", "create", "delete", "truncate")


@dataclasses.dataclass(frozen=True)
class Step:
    """One change to one store file: its new content is the rebuilt file ``source``, the rebuilt checkpoint (with
    the live 5.x offsets), or for ``truncate`` the file's bytes up to ``offset`` and zeros after."""

    action: str  # replace, create, delete, truncate
    file: str  # store-relative path
    reason: str
    source: str | None = None  # rebuilt-relative path of the new content
    offset: int | None = None  # truncate: file offset from which the file is zeroed

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_repair(self) -> dict[str, Any]:
        """report.json's ``repairs`` entry: the step less ``offset`` (the audit's repairs replace, create, delete)."""
        return {"action": self.action, "file": self.file, "source": self.source, "reason": self.reason}


@dataclasses.dataclass(frozen=True)
class Plan:
    """The steps in order, the queues left alone (queue directory -> the queue offset the broker would stop at),
    and a note for everything recover leaves alone."""

    steps: tuple[Step, ...]
    stopping: Mapping[str, int]
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"steps": [s.to_dict() for s in self.steps], "stopping": dict(self.stopping), "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Plan:
        return cls(tuple(Step(**s) for s in d["steps"]), dict(d["stopping"]), tuple(d["notes"]))


def recover_plan(
    findings: Sequence[Finding],
    repairs: Sequence[Step],
    stopping: Mapping[str, int],
    truncate: bool,
) -> Plan:
    """The audit's repairs less the queues the broker would stop reading (``stopping``, found in the rebuilt
    files), the torn commitlog tail when ``truncate`` (``--truncate-torn-tail``), then the checkpoint whenever
    another file changes (a timer file alone leaves it) or a finding the checkpoint answers stands."""
    steps = [r for r in repairs if dirname(r.file) not in stopping]
    notes = [
        f"{q}: left alone: the rebuilt queue has no entry for queue offset {at} (no record of it in the commitlog), "
        "and the broker would stop reading the queue at that unit, hiding every entry after it"
        for q, at in stopping.items()
    ]
    for f in findings:
        if f.kind == "commitlog-torn-tail" and truncate:
            steps.append(Step("truncate", f.file, f.kind, offset=f.file_offset))
        elif f.kind == "commitlog-torn-tail":
            notes.append(
                f"torn commitlog tail in {f.file} at file offset {f.file_offset}: left alone (--truncate-torn-tail)"
            )
    if any(not _timer_step(s) for s in steps) or any(KINDS[f.kind].by_checkpoint for f in findings):
        steps.append(Step("replace", CHECKPOINT, "checkpoint for the rebuilt index"))
    notes += [
        f"{f.kind} {f.file}: not something recover changes ({f.message})" + _salvage_hint(f)
        for f in findings
        if is_divergence(f) and not is_repairable(f) and not blocks_recover(f)
    ]
    return Plan(tuple(steps), dict(stopping), tuple(notes))


def _salvage_hint(f: Finding) -> str:
    """For damaged records: the option that rewrites them."""
    return "; recover --salvage rewrites them (docs/salvage.md)" if KINDS[f.kind].salvaged else ""


def _timer_step(s: Step) -> bool:
    """A step for the timer store or the delay offsets (its reason is one such kind): the checkpoint stays."""
    kind = KINDS.get(s.reason)
    return kind is not None and kind.area == AREA_TIMERS
