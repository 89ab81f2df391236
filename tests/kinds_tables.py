"""The docs' tables of finding kinds, made from ``storelib.findings.KINDS``.

Each page holds its areas' table between ``<!-- BEGIN kinds -->`` and ``<!-- END kinds -->``;
``python -m tests.kinds_tables`` rewrites them, and tests/test_findings.py fails when one differs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from storelib.findings import AREA_TIMERS, AREAS, kinds_table

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- BEGIN kinds -->", "<!-- END kinds -->"
#: each page and the areas whose kinds its table lists; together, every area once
PAGES = {
    ROOT / "docs" / "audit-and-recover.md": tuple(a for a in AREAS if a != AREA_TIMERS),
    ROOT / "docs" / "timers.md": (AREA_TIMERS,),
}
_SECTION = re.compile(f"{re.escape(BEGIN)}\n(.*?)\n{re.escape(END)}", re.S)


def page_table(page: Path) -> str | None:
    """The table between the page's markers, None when it has none."""
    m = _SECTION.search(page.read_text())
    return m.group(1) if m else None


def main() -> int:
    for page, areas in PAGES.items():
        text = page.read_text()
        if page_table(page) is None:
            print(f"no {BEGIN} ... {END} in {page}", file=sys.stderr)
            return 1
        table = f"{BEGIN}\n{kinds_table(areas)}\n{END}"
        page.write_text(_SECTION.sub(lambda _, table=table: table, text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
