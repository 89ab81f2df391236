"""Test data shared by the storelib tests: commitlog segments built from messages, their scans, and the small
generated store of every feature (tests/test_generate.py, tests/test_inspect.py)."""

from __future__ import annotations

import dataclasses
import io
from typing import BinaryIO

from storelib.broker.config import BrokerConfig
from storelib.formats.commitlog import Message, encode_blank, encode_message, format_properties
from storelib.formats.scanner import RecordBatch, SegmentEnd, SegmentScanner
from storelib.synthetic.spec import GeneratorSpec

SEGMENT_FILE = "commitlog/00000000000000000000"
#: what a RecordBatch says about each record
RECORD_COLUMNS = (
    "physical_offset",
    "total_size",
    "body_crc",
    "queue_id",
    "flag",
    "queue_offset",
    "stored_physical_offset",
    "sys_flag",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
    "prepared_transaction_offset",
    "body_length",
    "crc_ok",
    "topic",
    "properties",
)


def msg(topic: str = "TopicA", props: dict[str, str] | None = None, **fields: object) -> Message:
    """A message record with ``props`` as its properties (4.9.8 form: no trailing separator)."""
    return Message(topic=topic, properties=format_properties(props or {}), **fields)


def encode_segment(
    messages: list[Message], base: int = 0, size: int | None = None, blank: bool = False
) -> tuple[bytes, list[int]]:
    """Records back to back from commitlog offset ``base`` (PHYSICALOFFSET set to where each lands).

    With ``size``: padded to it with zeros, or with a BLANK record when ``blank``.
    Returns the bytes and each record's commitlog offset.
    """
    parts, offsets, pos = [], [], base
    for m in messages:
        record = encode_message(dataclasses.replace(m, physical_offset=pos))
        parts.append(record)
        offsets.append(pos)
        pos += len(record)
    data = b"".join(parts)
    if size is not None:
        if blank:
            data += encode_blank(size - len(data))
        data = data.ljust(size, b"\0")
    return data, offsets


@dataclasses.dataclass
class Scan:
    """A finished scan: its batches, where and why it stopped, and the damage it recorded."""

    scanner: SegmentScanner
    batches: list[RecordBatch]

    @property
    def end(self) -> SegmentEnd:
        assert self.scanner.end is not None
        return self.scanner.end

    @property
    def damage(self) -> list[tuple[str, str, int]]:
        return [(d.file, d.kind, d.offset) for d in self.scanner.damage]

    def rows(self) -> list[dict[str, object]]:
        """One dict per record: every per-record RecordBatch column as a plain Python value."""
        out = []
        for b in self.batches:
            columns = {name: getattr(b, name) for name in RECORD_COLUMNS}
            for i in range(len(b)):
                out.append({name: _plain(col[i]) for name, col in columns.items()})
        return out

    def offsets(self) -> list[int]:
        return [int(o) for b in self.batches for o in b.physical_offset]


def _plain(v: object) -> object:
    return v.item() if hasattr(v, "item") else v


def scan(
    data: bytes | BinaryIO,
    file: str = SEGMENT_FILE,
    base: int = 0,
    file_size: int | None = None,
    **kwargs: object,
) -> Scan:
    """Run a SegmentScanner over ``data`` (bytes, or an open stream with ``file_size``) to the end."""
    if isinstance(data, bytes):
        file_size = len(data) if file_size is None else file_size
        data = io.BytesIO(data)
    assert file_size is not None
    scanner = SegmentScanner(data, file, base, file_size, **kwargs)
    return Scan(scanner, list(scanner))


def batch_of(messages: list[Message], base: int = 0) -> RecordBatch:
    """The messages as the scanner hands them to dispatch: one RecordBatch."""
    data, _ = encode_segment(messages, base)
    (batch,) = scan(data, base=base).batches
    return batch


#: every feature on, small files of every kind: ~14 segments, 2-3 CQ files per business queue, ~20 IndexFiles
SMALL_CFG = BrokerConfig(
    mappedFileSizeCommitLog=64 * 1024, mappedFileSizeConsumeQueue=2000, maxHashSlotNum=97, maxIndexNum=400
)
SMALL_SPEC = GeneratorSpec(
    messages=3000,
    body_size=(0, 300),
    multibyte_fraction=0.2,
    odd_keys_fraction=0.1,
    ipv6_fraction=0.1,
    delay_fraction=0.06,
    transaction_fraction=0.06,
    legacy_transaction_fraction=0.03,
    long_topic=True,
    seed=7,
)
