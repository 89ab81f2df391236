"""The records a replay reads, on the driver: a diff's missing-messages table (Parquet, udfs.schema.
MISSING_MESSAGE_SCHEMA), or a store's commitlog read segment by segment (only the segments the commitlog range
of the selection touches)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.pipeline.rebuild_flow import list_segments
from storelib.broker.config import BrokerConfig
from storelib.broker.segments import Segment
from storelib.constants import BLANK_MAGIC_CODE
from storelib.errors import BadInput, StoreFormatError
from storelib.formats.commitlog import HEAD_WORDS, Message, decode_message
from storelib.replay.messages import Record, Selection
from udfs.fs import join, resolve
from udfs.schema import MISSING_MESSAGE_SCHEMA


def read_records(source: str, selection: Selection, cfg: BrokerConfig) -> list[Record]:
    """The records of ``source`` (a store root or a diff's ``--out`` table) in the selection's commitlog range."""
    fs, path = resolve(source)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        raise BadInput(f"{source}: not a directory (a store root or a diff's --out table)")
    if fs.get_file_info(join(path, "commitlog")).type == pafs.FileType.Directory:
        return list(_store_records(source, selection, cfg))
    return _table_records(source, selection)


def _table_records(source: str, selection: Selection) -> list[Record]:
    fs, path = resolve(source)
    try:
        table = pq.read_table(path, filesystem=fs, schema=MISSING_MESSAGE_SCHEMA)
    except (OSError, ValueError) as exc:
        raise BadInput(f"{source}: not a diff's missing-messages table: {exc}") from None
    return [
        Record(
            r["store"],
            r["topic"],
            r["queue_id"],
            r["queue_offset"],
            r["commitlog_offset"],
            r["properties"],
            r["body"],
            r["flag"],
            r["sys_flag"],
            r["store_timestamp"],
        )
        for r in table.to_pylist()
        if selection.offsets_pass(r["commitlog_offset"])
    ]


def _store_records(store: str, selection: Selection, cfg: BrokerConfig) -> Iterator[Record]:
    """Every message record of a plain commitlog in the selection's range, up to each segment's end (a BLANK
    record or zeros)."""
    segments, _ = list_segments(store, cfg)
    if any(seg.framing.header for seg in segments):
        raise BadInput(f"{store}: a DLedger store: convert it first (rmqstore convert)")
    for seg in segments:
        if not _overlaps(selection, seg.start, seg.start + seg.size):
            continue
        for pos, m in _segment_messages(seg, f"{store}/{seg.rel}"):
            if selection.offsets_pass(seg.start + pos):
                yield Record(
                    store,
                    m.topic,
                    m.queue_id,
                    m.queue_offset,
                    seg.start + pos,
                    m.properties,
                    m.body,
                    m.flag,
                    m.sys_flag,
                    m.store_timestamp,
                )


#: the read buffer of a segment streamed record by record (memory holds one record and this, whatever its size)
STREAM_BUFFER = 1 << 20


def _segment_messages(seg: Segment, file: str) -> Iterator[tuple[int, Message]]:
    """(file offset, message) of each record of a segment, streamed, up to its end (a BLANK record or zeros); a
    record the file ends inside of is refused, naming it."""
    fs, path = resolve(seg.uri)
    with fs.open_input_stream(path, buffer_size=STREAM_BUFFER) as f:
        pos = 0
        while len(head := f.read(HEAD_WORDS.size)) == HEAD_WORDS.size:
            total, magic = HEAD_WORDS.unpack(head)
            if total <= 0 or magic == BLANK_MAGIC_CODE:
                return
            record = head + f.read(max(total - HEAD_WORDS.size, 0))
            if len(record) < total:
                raise StoreFormatError(f"a record of {total} bytes, cut short by the file's end", file, pos)
            try:
                yield pos, decode_message(record, 0, file)
            except StoreFormatError as e:
                raise StoreFormatError(e.reason, file, pos + (e.offset or 0)) from None
            pos += total


def _overlaps(selection: Selection, start: int, end: int) -> bool:
    return (selection.from_offset is None or end > selection.from_offset) and (
        selection.to_offset is None or start < selection.to_offset
    )
