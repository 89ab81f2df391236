"""The bench's comparison with the real broker and a bare Spark process, as ratios against the issue's targets."""

from __future__ import annotations

import dataclasses
from statistics import median

#: our whole process against the broker's own rebuild (speed: broker seconds / ours), our nearly empty store
#: against a bare Spark process (seconds / seconds), our marginal rate against the broker's (rate / rate), the
#: audit of the big store against our rebuild of it (seconds / seconds)
TARGETS = {"whole": 1.0, "empty_vs_bare": 0.5, "marginal": 4.0, "audit_vs_rebuild": 1.2}
#: ten full 1 GiB segments: ours against the broker's rebuild (speed), at least
TEN_GB_TARGET = 3.0
AT_MOST = ("empty_vs_bare", "audit_vs_rebuild")  # the targets a ratio meets from below


@dataclasses.dataclass(frozen=True)
class Measured:
    """Seconds of every repeat: the broker's rebuild (store.log) and ours (whole process) of the big store and its
    nearly empty twin, a bare Spark process (plain pyspark) and the same through our session, our audit of the big
    store (whole process, found clean); the stores' messages; the files where the two rebuilds differ."""

    messages: tuple[int, int]  # big, nearly empty
    broker: tuple[list[float], list[float]]
    ours: tuple[list[float], list[float]]
    bare: list[float]
    session: list[float]
    audit: list[float]
    differing: tuple[list[str], list[str]]


def marginal_rate(messages: tuple[int, int], seconds: tuple[float, float]) -> float:
    """(n_big - n_empty) / (t_big - t_empty): records per second once every fixed cost is out."""
    dt = seconds[0] - seconds[1]
    return (messages[0] - messages[1]) / dt if dt > 0 else float("inf")


def ratios(m: Measured) -> dict[str, float]:
    """The ratios of the issue's targets, each from the medians of the repeats of what it compares (the
    fastest of each would pair one round's luck with another's: a marginal rate from two lucky minutes)."""
    broker, ours = tuple(map(median, m.broker)), tuple(map(median, m.ours))
    return {
        "whole": broker[0] / ours[0],
        "empty_vs_bare": ours[1] / median(m.bare),
        "marginal": marginal_rate(m.messages, ours) / marginal_rate(m.messages, broker),
        "audit_vs_rebuild": median(m.audit) / ours[0],
    }


def _span(values: list[float]) -> str:
    return f"{median(values):.2f} s ({min(values):.2f}–{max(values):.2f})" if len(values) > 1 else f"{values[0]:.2f} s"


def table(m: Measured, version: str, record_size: int) -> str:
    """The comparison as text: seconds (median, range), rates, ratios beside their targets, byte-equality."""
    r = ratios(m)
    broker, ours = tuple(map(median, m.broker)), tuple(map(median, m.ours))
    meets = {k: (r[k] <= t if k in AT_MOST else r[k] >= t) for k, t in TARGETS.items()}
    mark = {k: "meets" if v else "misses" for k, v in meets.items()}
    rows = [
        ("", f"broker {version} (store.log)", "rmqstore rebuild (process)", "ratio (target)"),
        (
            f"{m.messages[0]:,} x {record_size} B",
            _span(m.broker[0]),
            _span(m.ours[0]),
            f"{r['whole']:.2f}x broker speed (>= {TARGETS['whole']}: {mark['whole']})",
        ),
        (f"nearly empty, {m.messages[1]:,}", _span(m.broker[1]), _span(m.ours[1]), ""),
        (
            "marginal msgs/s",
            f"{marginal_rate(m.messages, broker):,.0f}",
            f"{marginal_rate(m.messages, ours):,.0f}",
            f"{r['marginal']:.2f}x broker (>= {TARGETS['marginal']}: {mark['marginal']})",
        ),
        (
            "bare Spark process (plain pyspark)",
            "",
            _span(m.bare),
            f"nearly empty {r['empty_vs_bare']:.2f}x bare (<= {TARGETS['empty_vs_bare']}: {mark['empty_vs_bare']})",
        ),
        ("the same, our session", "", _span(m.session), f"nearly empty {ours[1] / median(m.session):.2f}x it"),
        (
            f"rmqstore audit, {m.messages[0]:,}",
            "",
            _span(m.audit),
            f"{r['audit_vs_rebuild']:.2f}x our rebuild (<= {TARGETS['audit_vs_rebuild']}: {mark['audit_vs_rebuild']})",
        ),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    for name, differing in zip(("big", "nearly empty"), m.differing):
        same = "byte-equal" if not differing else f"DIFFER: {', '.join(differing[:5])}"
        lines.append(f"{name} store, consumequeue/ and index/ of both rebuilds: {same}")
    return "\n".join(lines)
