"""The report schema: one Finding per thing found, and its JSON form."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storelib.findings import Finding
from tests.roundtrip import assert_roundtrip

optional_ints = st.none() | st.integers(-(2**63), 2**63 - 1)
optional_texts = st.none() | st.text()
findings = st.builds(
    Finding,
    kind=st.text(min_size=1),
    severity=st.sampled_from(["info", "warning", "error"]),
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
def test_finding_json_roundtrip(finding: Finding) -> None:
    assert_roundtrip(
        lambda f: json.dumps(f.to_dict(), sort_keys=True),
        lambda text: Finding.from_dict(json.loads(text)),
        finding,
    )


def test_finding_schema() -> None:
    f = Finding("crc-mismatch", "error", "commitlog/00000000000001835008", "BODYCRC mismatch", commitlog_offset=1965519)
    assert f.to_dict() == {
        "kind": "crc-mismatch",
        "severity": "error",
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


def test_severity_is_checked() -> None:
    with pytest.raises(ValueError, match="severity must be one of"):
        Finding("x", "fatal", "", "")
