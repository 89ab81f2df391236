"""One record per thing found wrong (or worth saying) about a store: the shared report schema.

Used by rebuild (damaged segments, queue offset gaps), audit and recover. The JSON form
(``Finding.to_dict``) is the documented, stable schema of every report.
"""

from __future__ import annotations

import dataclasses

SEVERITIES = ("info", "warning", "error")


@dataclasses.dataclass(frozen=True)
class Finding:
    kind: str  # what was found, e.g. "cq-wrong-entries", "crc-mismatch" (see README: report schema)
    severity: str  # "info" (expected, e.g. expired head), "warning", "error"
    file: str  # store-relative path of the file concerned ("" for the store as a whole)
    message: str  # one sentence for a person, in the broker's words
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None  # first queue offset concerned
    commitlog_offset: int | None = None  # first commitlog (physical) offset concerned
    file_offset: int | None = None  # byte offset inside ``file``
    count: int | None = None  # how many entries/records/bytes are concerned
    expected: str | None = None
    actual: str | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Finding:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
