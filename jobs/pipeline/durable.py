"""Files recover writes so that a crash leaves the old file or the new one: each new file is written under a
temporary name in ``<store>/.rmqstore-recover-tmp`` (same filesystem, a directory the broker never lists), fsynced,
renamed over the old one (``os.replace``), and its directory fsynced."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

TMP_DIR = ".rmqstore-recover-tmp"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: files are copied and hashed this many bytes at a time: recover's memory does not grow with a 1 GiB segment
CHUNK = 8 << 20
_ZEROS = bytes(CHUNK)


@dataclasses.dataclass(frozen=True)
class Piece:
    """Bytes [start, stop) of what ``open()`` reads (a binary stream), or ``stop - start`` zeros when it is None."""

    open: Callable[[], BinaryIO] | None
    start: int
    stop: int

    @classmethod
    def of_file(cls, path: Path, start: int, stop: int) -> Piece:
        return cls(lambda: open(path, "rb"), start, stop)

    @classmethod
    def of_bytes(cls, data: bytes) -> Piece:
        return cls(lambda: io.BytesIO(data), 0, len(data))


def pour(pieces: list[Piece], out: BinaryIO | None, digest: Any) -> None:
    """The pieces' bytes, in order, into ``digest`` and, unless None, ``out`` (zeros skipped: a hole), a CHUNK at a
    time; OSError when a source ends early."""
    for p in pieces:
        left = p.stop - p.start
        if p.open is None:
            if out is not None:
                out.seek(left, os.SEEK_CUR)
            while left:
                digest.update(memoryview(_ZEROS)[: min(CHUNK, left)])
                left -= min(CHUNK, left)
            continue
        with p.open() as src:
            if p.start:
                src.seek(p.start)
            while left:
                chunk = src.read(min(CHUNK, left))
                if not chunk:
                    raise OSError(f"{getattr(src, 'name', 'a source')} ends {left} bytes before byte {p.stop}")
                digest.update(chunk)
                if out is not None:
                    out.write(chunk)
                left -= len(chunk)


def write_durably(path: Path, pieces: list[Piece], digest: Any = None) -> str:
    """The pieces into ``path`` (zeros a hole), fsynced; the sha256 of its bytes (continuing ``digest`` if given)."""
    digest = hashlib.sha256() if digest is None else digest
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pour(pieces, f, digest)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())
    return digest.hexdigest()


def write_tmp(root: Path, pieces: list[Piece]) -> tuple[Path, str]:
    """The pieces written durably under a temporary name in the store's tmp dir; that name and their sha256."""
    tmp = root / TMP_DIR / uuid.uuid4().hex
    return tmp, write_durably(tmp, pieces)


def rename_into(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` over ``target`` (a crash leaves the old or the new file), fsync the directories."""
    created = not target.parent.exists()
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, target)
    fsync_dir(target.parent)
    if created:
        fsync_dir(target.parent.parent)
        fsync_dir(target.parent.parent.parent)
