"""A DLedger node's own files beside its data (io.openmessaging.storage.dledger 0.3.x, ``DLedgerMmapFileStore``).

- ``data/``: entries, each a 48-byte header (magic 1, size, index, term, pos, channel, chainCrc, bodyCrc, bodyLen)
  and one message record (the scanner's DLedger framing, ``storelib.formats.scanner.check_entry``).
- ``index/``: one 32-byte unit per entry, at file offset index * 32: magic, pos, size, index, term
  (``INDEX_UNIT_SIZE``), in files of ``mappedFileSizeForEntryIndex`` (167,772,160 bytes, which DLedgerCommitLog
  leaves at its default) named by their 20-digit start offset; zeros after the last unit.
- ``checkpoint`` (and ``checkpoint.bak``): ``committedIndex`` and ``endIndex`` as properties.

Recovery (``DLedgerMmapFileStore.recover``) walks the data and stops at the first entry whose pos is not where it
sits, whose index is not the previous one + 1 or whose term is below the previous one; what follows is truncated.
It then compares the index with the data and rebuilds the index from the first unit that differs.
"""

from __future__ import annotations

import numpy as np

from storelib.constants import DLEDGER_INDEX_UNIT_SIZE

#: an index unit, also what a parse keeps of each entry's header
UNIT_DTYPE = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")])
INDEX_FILE_SIZE = 167_772_160  # DLedgerConfig.mappedFileSizeForEntryIndex
UNITS_PER_INDEX_FILE = INDEX_FILE_SIZE // DLEDGER_INDEX_UNIT_SIZE
#: the kinds of entry damage (reported by the parse; what they mean: storelib.findings.KINDS)
ENTRY_POS, ENTRY_INDEX, ENTRY_TERM = "dledger-entry-pos", "dledger-entry-index", "dledger-entry-term"


def _field(a: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The big-endian ints of ``width`` bytes at positions ``at`` of ``a``."""
    raw = a[at[:, None] + np.arange(width)]
    return raw.copy().view(f">i{width}").ravel()


def entry_units(a: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The index units the entries whose headers start at ``at`` (positions in ``a``) should have: magic, the pos,
    size, index and term fields of each header."""
    units = np.zeros(len(at), UNIT_DTYPE)
    units["magic"], units["size"] = _field(a, at, 4), _field(a, at + 4, 4)
    units["index"], units["term"], units["pos"] = _field(a, at + 8, 8), _field(a, at + 16, 8), _field(a, at + 24, 8)
    return units


def entry_damage(units: np.ndarray, where: np.ndarray, before: tuple[int, int] | None) -> list[tuple[int, str, str]]:
    """(position of the entry, kind, detail) for each entry recovery would stop at: its pos field is not ``where``
    it sits, its index does not follow the previous entry's, or its term is below it. ``before``: (index, term) of
    the entry before the first, None at the start of the log."""
    prev_index = np.concatenate(([units["index"][0] - 1 if before is None else before[0]], units["index"][:-1]))
    prev_term = np.concatenate(([units["term"][0] if before is None else before[1]], units["term"][:-1]))
    out = []
    for i in np.flatnonzero(units["pos"] != where).tolist():
        out.append((int(where[i]), ENTRY_POS, f"the entry's pos field says {units['pos'][i]}"))
    for i in np.flatnonzero(units["index"] != prev_index + 1).tolist():
        out.append((int(where[i]), ENTRY_INDEX, f"entry index {units['index'][i]} after {prev_index[i]}"))
    for i in np.flatnonzero(units["term"] < prev_term).tolist():
        out.append((int(where[i]), ENTRY_TERM, f"term {units['term'][i]} after term {prev_term[i]}"))
    return sorted(out)


def index_file_name(file_no: int) -> str:
    """The name of the ``file_no``-th index file (its start offset, 20 digits)."""
    return f"{file_no * INDEX_FILE_SIZE:020d}"


def differing_units(live: np.ndarray, rebuilt: np.ndarray) -> tuple[int, int]:
    """(first unit that differs, how many do) between two index files' units, (-1, 0) when equal; a missing or
    short live file's absent units differ where the rebuilt ones are not zeros."""
    n = max(len(live), len(rebuilt))
    a, b = np.zeros(n, UNIT_DTYPE), np.zeros(n, UNIT_DTYPE)
    a[: len(live)], b[: len(rebuilt)] = live, rebuilt
    bad = np.flatnonzero(a != b)
    return (int(bad[0]), len(bad)) if len(bad) else (-1, 0)


def parse_checkpoint(text: str) -> dict[str, int]:
    """``committedIndex`` and ``endIndex`` of a checkpoint file (``key=value`` lines); absent keys are left out."""
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    out = {}
    for key, value in pairs:
        if key.strip() in ("committedIndex", "endIndex"):
            try:
                out[key.strip()] = int(value.strip())
            except ValueError:
                continue
    return out


def index_plans(ranges: list[tuple[str, str, int, int]]) -> list[tuple[str, int, list[str]]]:
    """Which index files the entries fill, and from which segments: ``ranges`` holds (DLedger directory, segment,
    first entry index, last entry index) per data file with entries; out: (directory, file number, segments)."""
    plans: dict[tuple[str, int], list[str]] = {}
    for directory, segment, first, last in ranges:
        for file_no in range(max(first, 0) // UNITS_PER_INDEX_FILE, max(last, 0) // UNITS_PER_INDEX_FILE + 1):
            plans.setdefault((directory, file_no), []).append(segment)
    return [(d, n, segs) for (d, n), segs in sorted(plans.items())]


def index_file_units(units: np.ndarray, file_no: int) -> np.ndarray:
    """The units of index file ``file_no``, each at its entry's index, up to the last one (zeros between)."""
    units = units[(units["index"] // UNITS_PER_INDEX_FILE) == file_no]
    slot = units["index"] - file_no * UNITS_PER_INDEX_FILE
    out = np.zeros(int(slot.max()) + 1 if len(units) else 0, UNIT_DTYPE)
    out[slot] = units
    return out


def checkpoint_findings(checkpoint: dict[str, int], last_index: int, file: str) -> list[tuple[str, str, int]]:
    """(kind, message, count) of a DLedger checkpoint against the data's last entry index: committedIndex or
    endIndex past it, and entries past committedIndex."""
    out = []
    ahead = {k: v for k, v in sorted(checkpoint.items()) if v > last_index}
    if ahead:
        said = ", ".join(f"{k}={v}" for k, v in ahead.items())
        message = f"{file} says {said}, but the last entry in the data is index {last_index}"
        out.append(("dledger-checkpoint-ahead", message, max(ahead.values()) - last_index))
    committed = checkpoint.get("committedIndex", last_index)
    if last_index > committed:
        message = f"entries {committed + 1} to {last_index} are past {file}'s committedIndex={committed}"
        out.append(("dledger-uncommitted", message, last_index - committed))
    return out
