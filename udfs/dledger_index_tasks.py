"""DLedger index files on executors: one task per file builds it from the parse's entry units (rebuild), or
compares the live file with the rebuilt one (audit). Formats: storelib.formats.dledger."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from storelib.formats.dledger import INDEX_FILE_SIZE, UNIT_DTYPE, differing_units, index_file_name, index_file_units
from storelib.layout import DLEDGER_INDEX, dledger_file
from udfs.fs import join, read_file, resolve, write_file
from udfs.parse import dledger_units_path
from udfs.schema import DLEDGER_INDEX_SCHEMA, ArrowMap

#: (DLedger data directory, index file number, the segments whose entries it indexes)
Plan = tuple[str, int, list[str]]


def _units(fs: pafs.FileSystem, path: str) -> np.ndarray:
    """The units of an index file, or of a parse's entry-units file; none when it does not exist."""
    if fs.get_file_info(path).type != pafs.FileType.File:
        return np.zeros(0, UNIT_DTYPE)
    data = read_file(fs, path)
    return np.frombuffer(data[: len(data) - len(data) % UNIT_DTYPE.itemsize], UNIT_DTYPE)


def _row(file: str, units: int, first_bad: int = -1, bad: int = 0, live_size: int = -1) -> pa.RecordBatch:
    """One DLEDGER_INDEX_SCHEMA row."""
    values = [[file], [units], [first_bad], [bad], [live_size]]
    return pa.RecordBatch.from_arrays(
        [pa.array(v, f.type) for v, f in zip(values, DLEDGER_INDEX_SCHEMA)], schema=DLEDGER_INDEX_SCHEMA
    )


def index_builder(out_uri: str, scratch: str, plans: list[Plan]) -> ArrowMap:
    """The ``mapInArrow`` function: task k writes ``plans[k]``'s index file into ``out_uri`` (a full-size file,
    zeros after the last unit: a hole on local disk)."""

    def build(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, root = resolve(out_uri)
        sfs = resolve(scratch)[0]
        for batch in batches:
            for k in batch.column("id").to_pylist():
                data_dir, file_no, segments = plans[k]
                units = np.concatenate([_units(sfs, resolve(dledger_units_path(scratch, s))[1]) for s in segments])
                built = index_file_units(units, file_no)
                rel = dledger_file(data_dir, DLEDGER_INDEX, index_file_name(file_no))
                write_file(fs, join(root, rel), built.tobytes(), INDEX_FILE_SIZE)
                yield _row(rel, len(built))

    return build


def index_auditor(store: str, rebuilt: str, files: list[str]) -> ArrowMap:
    """The ``mapInArrow`` function: task k compares the live index file ``files[k]`` (store-relative) with the
    rebuilt one, unit by unit."""

    def compare(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, root = resolve(store)
        rfs, rroot = resolve(rebuilt)
        for batch in batches:
            for k in batch.column("id").to_pylist():
                info = fs.get_file_info(join(root, files[k]))
                live, want = _units(fs, join(root, files[k])), _units(rfs, join(rroot, files[k]))
                first_bad, bad = differing_units(live, want)
                size = info.size if info.type == pafs.FileType.File else -1
                yield _row(files[k], len(want), first_bad, bad, size)

    return compare
