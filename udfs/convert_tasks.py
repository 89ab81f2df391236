"""Convert segments on executors: one task per source segment writes the plain commitlog segment of the same start
offset (storelib.formats.dledger_convert); the source is only read."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.fs as pafs

from storelib.broker.segments import Segment
from storelib.formats.dledger_convert import plain_records, segment_tail
from storelib.formats.scanner import END_BLANK, SegmentScanner
from storelib.layout import commitlog_file
from udfs.fs import join, resolve
from udfs.schema import ArrowMap

CONVERTED_SCHEMA = pa.schema([("segment", pa.string()), ("messages", pa.int64())])
_ZEROS = bytes(1 << 20)


def convert_segment(seg: Segment, out_uri: str) -> int:
    """Write ``seg`` as ``out_uri``/commitlog/<its name>; the messages written (-1: copied as it is)."""
    fs, path = resolve(seg.uri)
    ofs, root = resolve(out_uri)
    target = join(root, commitlog_file(seg.name))
    ofs.create_dir(join(root, "commitlog"), recursive=True)
    if not seg.framing.header:  # an old commitlog segment: plain already
        pafs.copy_files(path, target, source_filesystem=fs, destination_filesystem=ofs)
        return -1
    with fs.open_input_stream(path) as stream, ofs.open_output_stream(target) as out:
        scanner = SegmentScanner(stream, seg.name, seg.start, seg.size, check_crc=False, framing=seg.framing)
        written = 0
        for b in scanner:
            out.write(plain_records(b, seg.start + written))
            written += int(b.total_size.sum())
        head, zeros = segment_tail(written, seg.size, scanner.end is not None and scanner.end.reason == END_BLANK)
        out.write(head)
        while zeros > 0:
            out.write(_ZEROS[: min(zeros, len(_ZEROS))])
            zeros -= len(_ZEROS)
    return scanner.messages


def segment_converter(out_uri: str, segments: list[Segment]) -> ArrowMap:
    """The ``mapInArrow`` function: task k converts ``segments[k]``; one row (segment, messages) each."""

    def convert(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for k in batch.column("id").to_pylist():
                n = convert_segment(segments[k], out_uri)
                yield pa.RecordBatch.from_pylist([{"segment": segments[k].name, "messages": n}], CONVERTED_SCHEMA)

    return convert
