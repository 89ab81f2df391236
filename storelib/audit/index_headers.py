"""The IndexFile audit by file: header consistency, and the live files compared with the rebuilt ones by order
(names are creation times)."""

from __future__ import annotations

import dataclasses

import numpy as np

from storelib.broker.config import BrokerConfig
from storelib.findings import Finding, finding
from storelib.formats.indexfile import IndexFileReader, IndexHeader, IndexLayout


def index_entries(reader: IndexFileReader) -> tuple[np.ndarray, np.ndarray]:
    """(keyHash, commitlog offset) of the entries within the header's indexCount: entry ``n`` at ``n - 1``."""
    count = max(1, min(reader.header.index_count, len(reader.entries)))
    e = reader.entries[1:count]
    return e["key_hash"].astype(np.int32), e["phy_offset"].astype(np.int64)


def check_index_header(file: str, reader: IndexFileReader, cfg: BrokerConfig) -> list[Finding]:
    """indexCount, hashSlotCount and the begin/end offsets against the slots and entries themselves."""
    h = reader.header
    problems: list[tuple[str, str, str]] = []  # (what, expected, actual)
    count = h.index_count
    if not 1 <= count <= cfg.maxIndexNum:
        problems.append(("indexCount out of range", f"1..{cfg.maxIndexNum}", str(count)))
    count = max(1, min(count, cfg.maxIndexNum))
    rest = reader.entries[count:]
    used = np.flatnonzero(
        (rest["key_hash"] != 0) | (rest["phy_offset"] != 0) | (rest["time_diff"] != 0) | (rest["prev_index"] != 0)
    )
    if len(used):
        last = count + int(used[-1])
        problems.append((f"{len(used)} non-empty entries lie past indexCount", f"indexCount {last + 1}", f"{count}"))
    past = int((reader.slots >= count).sum())
    if past:
        problems.append((f"{past} hash slots point past indexCount", "slots <= indexCount - 1", f"{past} slots"))
    occupied = int((reader.slots > 0).sum()) if not cfg.hash_slot_every_put else count - 1
    if h.hash_slot_count != occupied:
        problems.append(("hashSlotCount disagrees with the hash slots", str(occupied), str(h.hash_slot_count)))
    if count > 1:
        first, last = reader.entries[1], reader.entries[count - 1]
        if h.begin_phy_offset != int(first["phy_offset"]):
            problems.append(("beginPhyOffset is not entry 1's", str(int(first["phy_offset"])), str(h.begin_phy_offset)))
        if h.end_phy_offset != int(last["phy_offset"]):
            problems.append(
                (f"endPhyOffset is not entry {count - 1}'s", str(int(last["phy_offset"])), str(h.end_phy_offset))
            )
    if h.end_timestamp < h.begin_timestamp:
        problems.append(("endTimestamp before beginTimestamp", f">= {h.begin_timestamp}", str(h.end_timestamp)))
    if not problems:
        return []
    what, expected, actual = problems[0]
    return [
        finding(
            "index-header-inconsistent",
            file,
            "; ".join(p[0] for p in problems),
            file_offset=36 if "indexCount" in what else 0,
            count=len(problems),
            expected=expected,
            actual=actual,
        )
    ]


def compare_index_files(
    file: str, live: bytes | memoryview, rebuilt_name: str, rebuilt: bytes | memoryview, cfg: BrokerConfig
) -> list[Finding]:
    """The first difference between a live IndexFile and the rebuilt one at the same position (memory: a chunk)."""
    n = min(len(live), len(rebuilt))
    at, differ = differing_bytes(live, rebuilt, n)
    if not differ and len(live) == len(rebuilt):
        return []
    where = IndexLayout.of(cfg).part_at(at)
    exp = act = ""
    if where == "header":
        fields = ("beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset", "hashSlotCount", "indexCount")
        names = [fields[i] for i, (a, b) in enumerate(zip(_header(live), _header(rebuilt))) if a != b]
        where = "header " + ", ".join(names)
        exp = ", ".join(f"{k} {v}" for k, v in zip(fields, _header(rebuilt)) if k in names)
        act = ", ".join(f"{k} {v}" for k, v in zip(fields, _header(live)) if k in names)
    return [
        finding(
            "index-file-differs",
            file,
            f"differs from the rebuilt file {rebuilt_name} (same position), first at {where}",
            file_offset=at,
            count=differ + abs(len(live) - len(rebuilt)),
            expected=exp or f"{len(rebuilt)} bytes as rebuilt",
            actual=act or f"{len(live)} bytes, {differ} differ",
        )
    ]


def differing_bytes(
    live: bytes | memoryview, rebuilt: bytes | memoryview, n: int, chunk: int = 1 << 23
) -> tuple[int, int]:
    """The first differing byte of the first ``n`` (``n`` when none) and how many differ, ``chunk`` at a time."""
    first, count = n, 0
    for at in range(0, n, chunk):
        size = min(chunk, n - at)
        diff = np.frombuffer(live, np.uint8, size, at) != np.frombuffer(rebuilt, np.uint8, size, at)
        k = int(np.count_nonzero(diff))
        first, count = (min(first, at + int(diff.argmax())) if k else first), count + k
    return first, count


def _header(data: bytes | memoryview) -> tuple[int, ...]:
    return dataclasses.astuple(IndexHeader.unpack(data)) if len(data) >= IndexLayout.HEADER_SIZE else ()
