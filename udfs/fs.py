"""Paths on any filesystem the executors can reach (local, HDFS, S3) through pyarrow.fs.

Executor code opens files only through these helpers, never with local-path assumptions.

S3 (``s3://`` and Hadoop's ``s3a://``, one bucket namespace) is configured once for all three clients: the
standard ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL`` and ``AWS_REGION`` variables,
overridden by the running Spark driver's ``spark.hadoop.fs.s3a.*`` settings; ``s3_options`` gives them, and
``spark_s3_settings`` / ``pyarrow.fs`` (``resolve``) / ``delta_storage_options`` hand them to each client.
Executors see the environment only (``spark.executorEnv.AWS_*`` on a cluster).
"""

from __future__ import annotations

import errno
import mmap
import os
import posixpath
from collections.abc import Callable, Mapping
from typing import NamedTuple, TypeVar
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

Result = TypeVar("Result")

OBJECT_STORE_SCHEMES = ("s3", "s3a", "s3n", "gs", "gcs")
_S3_SCHEMES = ("s3a://", "s3n://")
#: Hadoop S3A setting -> S3Options field
_S3A_KEYS = {
    "fs.s3a.access.key": "access_key",
    "fs.s3a.secret.key": "secret_key",
    "fs.s3a.endpoint": "endpoint",
    "fs.s3a.endpoint.region": "region",
}


class S3Options(NamedTuple):
    """Where S3 is and who we are: endpoint URL (None: AWS itself), region, keys (None: the client's chain)."""

    endpoint: str | None
    region: str | None
    access_key: str | None
    secret_key: str | None


def is_object_store(uri: str) -> bool:
    """True for object stores (S3, GCS): no directories, no rename; a key is written once, whole."""
    return urlsplit(uri).scheme.lower() in OBJECT_STORE_SCHEMES


def to_s3(uri: str) -> str:
    """``s3a://bucket/key`` (Hadoop's name) as ``s3://bucket/key`` (pyarrow's and delta-rs's); others unchanged."""
    for scheme in _S3_SCHEMES:
        if uri.startswith(scheme):
            return "s3://" + uri[len(scheme) :]
    return uri


def s3_options(hadoop: Mapping[str, str] | None = None) -> S3Options:
    """The S3 settings: the ``AWS_*`` variables, with Hadoop's ``fs.s3a.*`` on top (default: the active Spark
    driver's ``spark.hadoop.fs.s3a.*``).

    A bare endpoint (``host:port``) takes its scheme from ``fs.s3a.connection.ssl.enabled`` (default true).
    """
    env = os.environ
    found = {
        "endpoint": env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
        "region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
        "access_key": env.get("AWS_ACCESS_KEY_ID"),
        "secret_key": env.get("AWS_SECRET_ACCESS_KEY"),
    }
    hadoop = _driver_s3a_settings() if hadoop is None else hadoop
    found.update({field: hadoop[key] for key, field in _S3A_KEYS.items() if hadoop.get(key)})
    endpoint = found["endpoint"]
    if endpoint and "://" not in endpoint:
        ssl = hadoop.get("fs.s3a.connection.ssl.enabled", "true").lower() != "false"
        found["endpoint"] = ("https://" if ssl else "http://") + endpoint
    return S3Options(**found)


def _driver_s3a_settings() -> dict[str, str]:
    """``fs.s3a.*`` of the SparkContext running in this process (the driver), from its ``spark.hadoop.`` keys."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return {}
    prefix = "spark.hadoop."
    return {k[len(prefix) :]: v for k, v in context.getConf().getAll() if k.startswith(prefix + "fs.s3a.")}


def spark_s3_settings(options: S3Options | None = None) -> dict[str, str]:
    """``spark.hadoop.fs.s3a.*`` for the options (default: the environment's): endpoint, region, keys, and for
    an endpoint other than AWS path-style access and, on ``http://``, no TLS."""
    options = options or s3_options()
    out = {f"spark.hadoop.{key}": getattr(options, field) for key, field in _S3A_KEYS.items()}
    if options.endpoint:
        out["spark.hadoop.fs.s3a.path.style.access"] = "true"
        out["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(options.endpoint.startswith("https://")).lower()
    return {k: v for k, v in out.items() if v}


def s3_filesystem(options: S3Options | None = None) -> pafs.S3FileSystem:
    """pyarrow's S3 client for the options (default: ``s3_options()``), path-style on a custom endpoint."""
    options = options or s3_options()
    endpoint = urlsplit(options.endpoint) if options.endpoint else None
    return pafs.S3FileSystem(
        access_key=options.access_key,
        secret_key=options.secret_key,
        region=options.region,
        scheme=endpoint.scheme if endpoint else None,
        endpoint_override=endpoint.netloc if endpoint else None,
    )


def delta_storage_options(uri: str, options: S3Options | None = None) -> dict[str, str]:
    """delta-rs ``storage_options`` for a table at ``uri``: the S3 options for S3 tables, else {}.

    delta-rs commits on S3 with conditional writes (put if absent), so concurrent writers never overwrite
    each other's commit: no locking table needed.
    """
    if not to_s3(uri).startswith("s3://"):
        return {}
    options = options or s3_options()
    out = {
        "AWS_ENDPOINT_URL": options.endpoint,
        "AWS_REGION": options.region,
        "AWS_ACCESS_KEY_ID": options.access_key,
        "AWS_SECRET_ACCESS_KEY": options.secret_key,
        "AWS_ALLOW_HTTP": "true" if (options.endpoint or "").startswith("http://") else None,
        "AWS_CONDITIONAL_PUT": "etag",
    }
    return {k: v for k, v in out.items() if v}


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) for a local path or a ``file://``, ``hdfs://``, ``s3://``/``s3a://`` URI."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), posixpath.abspath(uri)
    uri = to_s3(uri)
    if uri.startswith("s3://"):
        return s3_filesystem(), uri[len("s3://") :].rstrip("/")
    return pafs.FileSystem.from_uri(uri)


class LocalExtents:
    """Data and holes of a file on this host's file system (``lseek`` SEEK_DATA / SEEK_HOLE; a file system without
    them says all data): storelib.formats.scanner.Extents."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _seek(self, pos: int, whence: int) -> int | None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return os.lseek(fd, pos, whence)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # past the last data (SEEK_DATA) or the end (SEEK_HOLE)
                return None
            raise
        finally:
            os.close(fd)

    def data_after(self, pos: int) -> int | None:
        return self._seek(pos, os.SEEK_DATA)

    def hole_after(self, pos: int) -> int:
        found = self._seek(pos, os.SEEK_HOLE)
        return pos if found is None else found


def local_extents(fs: pafs.FileSystem, path: str) -> LocalExtents | None:
    """The file's data and holes, where it is on this host's file system."""
    return LocalExtents(path) if isinstance(fs, pafs.LocalFileSystem) and hasattr(os, "SEEK_DATA") else None


def join(*parts: str) -> str:
    return posixpath.join(*parts)


_ZEROS = bytes(8 << 20)


def write_file(fs: pafs.FileSystem, path: str, data: bytes | bytearray, size: int | None = None) -> None:
    """Write ``data``, then zeros up to ``size``: a store file (``size`` given) is preallocated, zero after its data.

    On a local filesystem a store file's zeros, those ``data`` ends with included, are a hole (``truncate``):
    the same bytes, without writing them (a ConsumeQueue file is 6 MB, mostly zeros in a queue's last file).
    """
    fs.create_dir(posixpath.dirname(path), recursive=True)
    if isinstance(fs, pafs.LocalFileSystem):
        total = len(data) if size is None else max(size, len(data))
        used = len(data) if size is None else used_length(data)
        with open(path, "wb") as f:
            f.write(memoryview(data)[:used])
            if total > used:
                f.truncate(total)
        return
    with fs.open_output_stream(path) as out:
        out.write(data)
        left = (size or 0) - len(data)
        while left > 0:
            out.write(_ZEROS[: min(left, len(_ZEROS))])
            left -= len(_ZEROS)


def write_then_move(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """``data`` as ``path``, written under a temporary name first: a task run twice leaves the same file, and a reader
    never finds half of one."""
    write_file(fs, path + ".tmp", data)
    fs.move(path + ".tmp", path)


def write_in_place(
    fs: pafs.FileSystem, path: str, size: int, head: int, fill: Callable[[bytearray | mmap.mmap], Result]
) -> Result:
    """A store file of ``size`` bytes whose first ``head`` bytes ``fill`` writes into zeros, and ``fill``'s result.

    On a local filesystem ``fill`` writes into the file itself (a shared mapping of the new, sparse file): no buffer
    as big as the head is faulted in and then copied by ``write`` (a 20M-entry IndexFile's head: 420 MB), and the
    pages it leaves alone stay holes. Elsewhere into a buffer, then ``write_file``. A task
    run again truncates the file and fills it anew.
    """
    if not isinstance(fs, pafs.LocalFileSystem):
        buffer = bytearray(head)
        result = fill(buffer)
        write_file(fs, path, buffer, size)
        return result
    fs.create_dir(posixpath.dirname(path), recursive=True)
    with open(path, "w+b") as f:
        f.truncate(size)
        with mmap.mmap(f.fileno(), size) as mapped:
            return fill(mapped)


def used_length(data: bytes | bytearray) -> int:
    """``len(data)`` without its trailing zero bytes, looking back from the end in growing windows (no copy)."""
    a = np.frombuffer(data, dtype=np.uint8)
    end, window = len(a), 4096
    while end > 0:
        start = max(0, end - window)
        nonzero = np.flatnonzero(a[start:end])
        if len(nonzero):
            return start + int(nonzero[-1]) + 1
        end, window = start, window * 2
    return 0


def read_file(fs: pafs.FileSystem, path: str) -> bytes:
    with fs.open_input_stream(path) as f:
        return f.read()


def map_file(fs: pafs.FileSystem, path: str) -> bytes | memoryview:
    """A whole file: memory-mapped when local (the page cache holds it, not the task), else read."""
    if isinstance(fs, pafs.LocalFileSystem):
        return memoryview(pa.memory_map(path).read_buffer())
    return read_file(fs, path)


def list_files(fs: pafs.FileSystem, path: str, recursive: bool = False) -> list[pafs.FileInfo]:
    """Files (not directories) under ``path``, sorted by path; [] when it does not exist."""
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        return []
    sel = pafs.FileSelector(path, recursive=recursive)
    return sorted((i for i in fs.get_file_info(sel) if i.type == pafs.FileType.File), key=lambda i: i.path)


def delete_tree(uri: str) -> None:
    """Delete everything under ``uri`` (a directory, or an object-store prefix) and the directory itself; no-op
    when absent. On S3 this deletes every key under the prefix (no directory objects needed)."""
    fs, path = resolve(uri)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.Directory:
        fs.delete_dir(path)
    elif info.type == pafs.FileType.File:
        fs.delete_file(path)
