"""The report schema: one registry of finding kinds, one Finding per thing found, and its JSON form."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storelib.findings import (
    AREA_COMMITLOG,
    AREAS,
    KINDS,
    SEVERITIES,
    Finding,
    blocks_recover,
    finding,
    finding_order,
    is_repairable,
    kinds_table,
)
from storelib.formats.scanner import END_BAD_BLANK, END_BAD_MAGIC, END_BAD_SIZE, END_TORN, END_ZERO_TAIL
from storelib.reports.report import _rebuild_order
from tests.kinds_tables import PAGES, page_table
from tests.roundtrip import assert_roundtrip

ROOT = Path(__file__).resolve().parents[1]
optional_ints = st.none() | st.integers(-(2**63), 2**63 - 1)
optional_texts = st.none() | st.text()
findings = st.builds(
    finding,
    kind=st.sampled_from(sorted(KINDS)),
    file=st.text(),
    message=st.text(),
    topic=optional_texts,
    queue_id=optional_ints,
    queue_offset=optional_ints,
    commitlog_offset=optional_ints,
    file_offset=optional_ints,
    count=optional_ints,
    expected=optional_texts,
    actual=optional_texts,
)


@given(findings)
def test_finding_json_roundtrip(f: Finding) -> None:
    assert_roundtrip(lambda x: json.dumps(x.to_dict(), sort_keys=True), lambda t: Finding.from_dict(json.loads(t)), f)


def test_finding_schema() -> None:
    f = finding("crc-mismatch", "commitlog/00000000000001835008", "BODYCRC mismatch", commitlog_offset=1965519)
    assert f.to_dict() == {
        "kind": "crc-mismatch",
        "severity": "warning",
        "file": "commitlog/00000000000001835008",
        "message": "BODYCRC mismatch",
        "topic": None,
        "queue_id": None,
        "queue_offset": None,
        "commitlog_offset": 1965519,
        "file_offset": None,
        "count": None,
        "expected": None,
        "actual": None,
    }
    # unknown keys (a newer schema) are ignored when reading
    assert Finding.from_dict({**f.to_dict(), "added_later": 1}) == f


def test_unregistered_kinds_and_wrong_severities_fail_where_they_are_made() -> None:
    with pytest.raises(KeyError, match="not registered"):
        finding("no-such-kind", "", "")
    with pytest.raises(ValueError, match="not a registered kind"):
        Finding("crc-mismatch", "error", "", "")  # the registry says warning


def _emitted_kinds() -> set[str]:
    """Every kind the code passes to finding() as a literal, and the segment-<end reason> kinds."""
    out = set()
    for path in [*ROOT.glob("storelib/**/*.py"), *ROOT.glob("udfs/*.py"), *ROOT.glob("jobs/**/*.py")]:
        out |= set(re.findall(r'finding\(\s*"([a-z-]+)"', path.read_text()))
    # judge_ends emits segment-<reason> for every way records can stop early in the middle of the log
    out |= {f"segment-{r}" for r in (END_BAD_BLANK, END_BAD_MAGIC, END_BAD_SIZE, END_TORN, END_ZERO_TAIL)}
    return out


def test_every_emitted_kind_is_registered() -> None:
    emitted = _emitted_kinds()
    assert len(emitted) > 30  # the scan found the code's calls
    assert emitted - set(KINDS) == set()


def test_the_docs_tables_of_kinds_are_the_registry() -> None:
    """Each page's table of kinds (docs/audit-and-recover.md; docs/timers.md: the timer-* and schedule-* kinds) is the
    one kinds_table makes from KINDS, row for row: `python -m tests.kinds_tables` rewrites them."""
    assert sorted(a for areas in PAGES.values() for a in areas) == sorted(AREAS)  # every kind on one page
    for page, areas in PAGES.items():
        assert page_table(page) == kinds_table(areas), f"{page.name}: run python -m tests.kinds_tables"
    rows = re.findall(
        r"^\| `([a-z-]+)` \| (info|warning|error) \| (yes|) *\| (.+?) \|$",
        "\n".join(page_table(p) or "" for p in PAGES),
        re.M,
    )
    table = {kind: (severity, recover == "yes", meaning) for kind, severity, recover, meaning in rows}
    assert table == {k: (v.severity, v.repairable, v.meaning) for k, v in KINDS.items()}


def test_what_recover_does_with_a_kind() -> None:
    assert is_repairable(finding("cq-zeroed-entries", "", ""))
    assert not is_repairable(finding("cq-expired-head", "", ""))  # info: nothing to do
    assert blocks_recover(finding("rebuilt-stale", "", "")) and blocks_recover(finding("hostile-topic-name", "", ""))
    assert not blocks_recover(finding("cq-wrong-entries", "", ""))


def test_findings_sort_worst_first() -> None:
    info = finding("cq-expired-head", "a", "")
    error = finding("cq-wrong-entries", "b", "", queue_offset=5)
    warning = finding("cq-dirty-tail", "a", "")
    assert sorted([info, warning, error], key=finding_order) == [error, warning, info]


def test_findings_equal_in_file_place_and_kind_come_in_one_order_whatever_order_they_arrive_in() -> None:
    """Two queues' gaps found in one file at one place: every report gives them in one order, so two runs over the
    same store give the same bytes whichever task finished first."""
    a = finding("queue-offset-gap", "commitlog", "2 missing", topic="A", queue_id=1, queue_offset=3)
    b = finding("queue-offset-gap", "commitlog", "1 missing", topic="B", queue_id=0, queue_offset=3)
    assert sorted([a, b], key=finding_order) == sorted([b, a], key=finding_order)
    assert sorted([a, b], key=_rebuild_order) == sorted([b, a], key=_rebuild_order)  # rebuild.json's order


def test_the_facts_of_each_kind_agree() -> None:
    for name, k in KINDS.items():
        assert k.area in AREAS and k.severity in SEVERITIES, name
        assert not k.kept or k.record_damage, f"{name}: only damage to one record is kept"
        assert not (k.blocks_recover and k.repairable), f"{name}: recover cannot both refuse and repair"
        assert not k.start_fails or k.severity == "error", f"{name}: a store the broker refuses is an error"
        assert not k.record_damage or k.area == AREA_COMMITLOG, name
    assert {name for name, k in KINDS.items() if k.recovery} >= {n for n in KINDS if n.startswith("segment-")}
