"""Paths on any filesystem the executors can reach (local, HDFS, S3) through pyarrow.fs.

Executor code opens files only through these helpers, never with local-path assumptions.
"""

from __future__ import annotations

import posixpath

import pyarrow.fs as pafs


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) for a local path or a ``file://``, ``hdfs://``, ``s3://``/``s3a://`` URI."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), posixpath.abspath(uri)
    if uri.startswith("s3a://"):
        uri = "s3://" + uri[len("s3a://") :]
    return pafs.FileSystem.from_uri(uri)


def join(*parts: str) -> str:
    return posixpath.join(*parts)


_ZEROS = bytes(8 << 20)


def write_file(fs: pafs.FileSystem, path: str, data: bytes, size: int | None = None) -> None:
    """Write ``data``, then zeros up to ``size`` (store files are preallocated, zero after their data).

    On a local filesystem the zeros are a hole (``truncate``): the same bytes, without writing them.
    """
    fs.create_dir(posixpath.dirname(path), recursive=True)
    if isinstance(fs, pafs.LocalFileSystem):
        with open(path, "wb") as f:
            f.write(data)
            if size is not None and size > len(data):
                f.truncate(size)
        return
    with fs.open_output_stream(path) as out:
        out.write(data)
        left = (size or 0) - len(data)
        while left > 0:
            out.write(_ZEROS[: min(left, len(_ZEROS))])
            left -= len(_ZEROS)


def read_file(fs: pafs.FileSystem, path: str) -> bytes:
    with fs.open_input_stream(path) as f:
        return f.read()


def list_files(fs: pafs.FileSystem, path: str, recursive: bool = False) -> list[pafs.FileInfo]:
    """Files (not directories) under ``path``, sorted by path; [] when it does not exist."""
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        return []
    sel = pafs.FileSelector(path, recursive=recursive)
    return sorted((i for i in fs.get_file_info(sel) if i.type == pafs.FileType.File), key=lambda i: i.path)
