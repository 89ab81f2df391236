"""The figures tests/test_disasters.py saw, and the table of docs/disasters.md made from them.

Each disaster test writes `<cache>/disasters/<version>-<scenario>.json`: what the broker served before the loss (or,
after a crash, from the untouched copy), from the damaged copy alone, and after `rmqstore recover --apply`.
`python -m tests.broker.disasters` puts the table between the `<!-- BEGIN disasters table -->` markers of
docs/disasters.md.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tests.broker.harness import CACHE

FIGURES = CACHE / "disasters"
PAGE = Path(__file__).resolve().parents[2] / "docs" / "disasters.md"
BEGIN, END = "<!-- BEGIN disasters table -->", "<!-- END disasters table -->"
SCENARIOS = {
    "a-index-lost": "`index/` lost",
    "b-queues-lost": "`consumequeue/` + `batchconsumequeue/` lost",
    "c-all-but-commitlog-and-config-lost": "all but `commitlog/` and `config/` lost (checkpoint too)",
    "d-kill9": "`kill -9` in a send burst",
    "e-torn-tail": "power loss: last record's second half zeros, `abort`",
    "f-queue-file-zeroed": "middle third of a ConsumeQueue file zeroed",
    "g-rocksdb-rolled-back": "RocksDB ConsumeQueue store rolled back: topics exported, `storeType=default`",
}


def counts(lines: list[dict]) -> dict[str, int]:
    """Messages pulled, tag-filtered messages pulled, lookups that found a message, lookups asked."""
    tagged = sum(len(x.get("queueOffsets", [])) for x in lines if x["kind"] == "tagged")
    lookups = [x for x in lines if x["kind"] == "lookup"]
    messages = sum(x["kind"] == "message" for x in lines)
    found = sum(bool(x.get("found")) for x in lookups)
    return {"messages": messages, "tagged": tagged, "found": found, "asked": len(lookups)}


def figures(oracle: list[dict], alone: list[dict], after: list[dict]) -> dict[str, dict[str, int]]:
    return {"oracle": counts(oracle), "alone": counts(alone), "after": counts(after)}


def table() -> str:
    """One row per version and scenario the suite ran."""
    rows = [
        "| version | disaster | served after recover | served by the broker alone |",
        "|---|---|---|---|",
    ]
    for path in sorted(FIGURES.glob("*.json"), key=lambda p: (p.stem.split("-", 1)[1], p.stem)):
        version, scenario = path.stem.split("-", 1)
        f = json.loads(path.read_text())
        rows.append(
            f"| {version} | {SCENARIOS[scenario]} | {cell(f['after'], f['oracle'])} | {cell(f['alone'], f['oracle'])} |"
        )
    return "\n".join(rows)


def cell(got: dict[str, int], of: dict[str, int]) -> str:
    return (
        f"{got['messages']:,} of {of['messages']:,} messages, {got['tagged']:,} of {of['tagged']:,} by tag, "
        f"{got['found']:,} of {of['asked']:,} lookups"
    )


def main() -> int:
    text = PAGE.read_text()
    new = re.sub(f"{re.escape(BEGIN)}.*?{re.escape(END)}", f"{BEGIN}\n{table()}\n{END}", text, flags=re.S)
    if new == text and BEGIN not in text:
        print(f"no {BEGIN} in {PAGE}", file=sys.stderr)
        return 1
    PAGE.write_text(new)
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
