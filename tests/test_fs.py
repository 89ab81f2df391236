"""udfs.fs on the local filesystem, directly and through a non-local pyarrow FileSystem (SubTreeFileSystem)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from udfs.fs import join, list_files, read_file, resolve, used_length, write_file, write_in_place

ZEROS_CHUNK = 8 << 20  # write_file's zero buffer: a size past it needs more than one write


def test_resolve_local_paths_and_file_uris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    fs, path = resolve("store/commitlog")
    assert isinstance(fs, pafs.LocalFileSystem) and path == f"{tmp_path}/store/commitlog"
    fs, path = resolve(f"file://{tmp_path}/store/../out")
    assert isinstance(fs, pafs.LocalFileSystem) and path.endswith("/out")
    assert join("a", "b/c", "d") == "a/b/c/d"


def test_write_file_leaves_a_hole_for_the_zeros_on_local_disk(tmp_path: Path) -> None:
    fs, root = resolve(str(tmp_path))
    path = join(root, "consumequeue", "T", "0", f"{0:020d}")  # parent directories are created
    size = 64 << 20
    write_file(fs, path, b"unit" * 5, size)
    st = os.stat(path)
    assert st.st_size == size
    assert st.st_blocks * 512 < 1 << 20  # a hole, not 64 MiB of written zeros
    with open(path, "rb") as f:
        assert f.read(20) == b"unit" * 5
        f.seek(size - 4096)
        assert f.read() == bytes(4096)


def test_the_zeros_a_store_file_ends_with_are_a_hole_too(tmp_path: Path) -> None:
    """A ConsumeQueue file handed over whole (6 MB, one unit used): only the unit is written, same bytes."""
    fs, root = resolve(str(tmp_path))
    size = 6_000_000
    data = b"\x00\x00\x00\x00\x00\x01\x00\x00" + b"\x00\x00\x00\xc8" + bytes(8) + bytes(size - 20)  # tagsCode 0
    write_file(fs, join(root, "cq"), data, len(data))
    st_ = os.stat(join(root, "cq"))
    assert st_.st_size == size and st_.st_blocks * 512 <= 64 << 10
    assert (tmp_path / "cq").read_bytes() == data
    write_file(fs, join(root, "json"), b"{}" + bytes(3))  # no size: not a store file, written as given
    assert (tmp_path / "json").read_bytes() == b"{}" + bytes(3)


@given(st.binary(max_size=64), st.integers(0, 20_000))
def test_used_length_is_the_length_without_trailing_zeros(head: bytes, zeros: int) -> None:
    data = head + bytes(zeros)
    assert used_length(data) == len(data.rstrip(b"\0"))
    assert used_length(bytearray(data)) == len(data.rstrip(b"\0"))


@pytest.mark.parametrize("size", [None, 10, 64, ZEROS_CHUNK + 30, 2 * ZEROS_CHUNK + 10])
def test_write_file_through_a_non_local_filesystem_writes_the_zeros(tmp_path: Path, size: int | None) -> None:
    """Any other FileSystem (HDFS, S3) gets the zeros written: here a SubTreeFileSystem over the local disk."""
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    data = bytes(range(40))
    write_file(fs, "index/20260101000000000", data, size)
    on_disk = (tmp_path / "index" / "20260101000000000").read_bytes()
    assert on_disk == data + bytes(max(0, (size or 0) - len(data)))
    assert read_file(fs, "index/20260101000000000") == on_disk


def test_write_file_replaces_a_longer_file(tmp_path: Path) -> None:
    fs, root = resolve(str(tmp_path))
    write_file(fs, join(root, "f"), b"x" * 100)
    write_file(fs, join(root, "f"), b"y", 3)
    assert read_file(fs, join(root, "f")) == b"y\0\0"


def test_list_files_is_sorted_files_only_and_empty_when_missing(tmp_path: Path) -> None:
    for rel in ("commitlog/00000000000000131072", "commitlog/00000000000000000000", "commitlog/sub/x"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    fs, root = resolve(str(tmp_path / "commitlog"))
    names = [i.path.rsplit("/", 1)[1] for i in list_files(fs, root)]
    assert names == ["00000000000000000000", "00000000000000131072"]  # the directory sub/ is not a file
    assert [i.path[len(root) + 1 :] for i in list_files(fs, root, recursive=True)] == [
        "00000000000000000000",
        "00000000000000131072",
        "sub/x",
    ]
    assert list_files(fs, join(root, "missing")) == []


def _fill(at: int, marker: bytes):
    def fill(out) -> int:
        out[at : at + len(marker)] = marker
        return len(marker)

    return fill


@pytest.mark.parametrize("local", [True, False])
def test_write_in_place_fills_the_head_of_a_zeroed_file_and_a_retry_starts_over(tmp_path: Path, local: bool) -> None:
    """Local: the file itself is mapped (sparse beyond what the fill wrote); another filesystem: a buffer, then
    write_file. A second run of the same task leaves only its own bytes."""
    fs = pafs.LocalFileSystem() if local else pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    path = str(tmp_path / "index" / "f") if local else "index/f"
    assert write_in_place(fs, path, 1 << 20, 8, _fill(5, b"abc")) == 3
    assert write_in_place(fs, path, 1 << 20, 8, _fill(1, b"xy")) == 2
    data = (tmp_path / "index" / "f").read_bytes()
    assert data == b"\0xy" + bytes((1 << 20) - 3)
    if local:
        assert os.stat(tmp_path / "index" / "f").st_blocks * 512 < 1 << 20  # the zeros are a hole
