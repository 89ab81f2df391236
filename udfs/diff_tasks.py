"""The diff's work on executors (storelib.audit.message_diff): message keys, the comparison of every record of a
set of keys, and the missing messages read back from their segments, each by its offset and size."""

from __future__ import annotations

import itertools
import posixpath
from collections.abc import Iterable, Iterator, Mapping

import pyarrow as pa

from storelib.audit.message_diff import compare, with_message_keys
from storelib.constants import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY
from storelib.formats.commitlog import decode_message
from udfs.fs import resolve
from udfs.schema import MISSING_MESSAGE_SCHEMA, ArrowMap


def keyed(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """RECORD_SCHEMA batches in, KEYED_SCHEMA batches out."""
    for batch in batches:
        yield from with_message_keys(batch).to_batches()


def compared(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task's records (every record of its keys, both stores) in, DIFF_SCHEMA rows out."""
    records = list(batches)
    if records:
        yield from compare(pa.Table.from_batches(records)).to_batches()


def message_reader(stores: tuple[str, str], segments: Mapping[tuple[int, str], str]) -> ArrowMap:
    """DIFF_SCHEMA rows in, MISSING_MESSAGE_SCHEMA rows out: each record read at its offset in its segment
    (``segments``: (side, segment name) -> URI; a segment's name is its start offset)."""

    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            rows = batch.select(["side", "segment", "commitlog_offset", "size"]).to_pylist()
            by_segment = itertools.groupby(sorted(rows, key=_place), key=lambda r: (r["side"], r["segment"]))
            out = [m for (side, name), rs in by_segment for m in _messages(stores[side], segments[side, name], rs)]
            yield pa.RecordBatch.from_pylist(out, MISSING_MESSAGE_SCHEMA)

    return read


def _place(row: dict) -> tuple[int, str, int]:
    return row["side"], row["segment"], row["commitlog_offset"]


def _messages(store: str, uri: str, rows: Iterable[dict]) -> Iterator[dict]:
    """The records at ``rows``' offsets in the segment at ``uri`` (its name is its start offset)."""
    fs, path = resolve(uri)
    start = int(posixpath.basename(path))
    with fs.open_input_file(path) as f:
        for row in rows:
            at = row["commitlog_offset"] - start
            m = decode_message(f.read_at(row["size"], at), 0, f"{uri} @ {at}")
            props = m.property_map()
            yield {
                "store": store,
                "topic": m.topic,
                "queue_id": m.queue_id,
                "queue_offset": m.queue_offset,
                "commitlog_offset": m.physical_offset,
                "keys": props.get(PROPERTY_KEYS),
                "tags": props.get(PROPERTY_TAGS),
                "uniq_key": props.get(PROPERTY_UNIQ_KEY),
                "properties": m.properties,
                "body": m.body,
                "flag": m.flag,
                "sys_flag": m.sys_flag,
                "born_timestamp": m.born_timestamp,
                "store_timestamp": m.store_timestamp,
            }
