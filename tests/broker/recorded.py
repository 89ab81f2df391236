"""What the real brokers wrote and answered, checked in (tests/broker/recorded/), so a machine with no cache reads
it instead of starting a broker for it: the stores the suite reads (one xz tar per store, named as in the cache:
``<version>-<variant>-seed<seed>-<sources hash>``) and the broker answers it asks for (``served`` and
``restarted`` results, named by their key, which covers the store's bytes). A store or answer whose name is not
here (a changed workload, a new variant, a store the product wrote differently) is made by the real broker as
before. MANIFEST.json says which release wrote each store and when.

``make broker-stores`` runs the suite with RMQSTORE_RECORDED=off (nothing taken from here), which notes every
store and answer it used in ``<cache>/used.txt``, then ``python -m tests.broker.recorded`` packs those and removes
the ones no test used.
"""

from __future__ import annotations

import io
import json
import lzma
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent
RECORDED = HERE / "recorded"
STORES, ANSWERS, MANIFEST = RECORDED / "stores", RECORDED / "answers", RECORDED / "MANIFEST.json"
# what of a store directory is packed: the store, its settings, what the client sent and a broker served, a failover
# pair's slave store, and the store log (test_bench reads it); the other logs stay in the cache
PACKED = (
    "store",
    "broker.conf",
    "COMPLETE",
    "sent.jsonl",
    "sent-*.jsonl",
    "served.jsonl",
    "consumed.jsonl",
    "slave/store",
)
PACKED += ("logs/rocketmqlogs/store.log",)
HOLE = 1 << 16  # a zero run this long, aligned, is left a hole on unpacking


def _enabled() -> bool:
    """RMQSTORE_RECORDED=off: every store and answer from the real broker (make broker-stores)."""
    return os.environ.get("RMQSTORE_RECORDED", "on") != "off"


#: the harness's cache: $RMQSTORE_CACHE or ~/.cache/rmq-store-rebuild
CACHE = Path(os.environ.get("RMQSTORE_CACHE", "~/.cache/rmq-store-rebuild")).expanduser()


def note_used(kind: str, name: str) -> None:
    """Append `kind name` to <cache>/used.txt: what the next `make broker-stores` packs."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "used.txt", "a", encoding="utf-8") as f:
        f.write(f"{kind} {name}\n")


def unpack_store(name: str, dest: Path) -> bool:
    """The checked-in store `name` unpacked into `dest` (True), or False when none is checked in. Zero runs stay
    holes, as in the broker's preallocated files (a 100 MiB timerlog, a 38.7 MB timerwheel)."""
    archive = STORES / f"{name}.tar.xz"
    if not _enabled() or not archive.is_file():
        return False
    shutil.rmtree(dest, ignore_errors=True)
    with tarfile.open(archive, "r:xz") as tar:
        for member in tar:
            safe = tarfile.data_filter(member, str(dest))  # refuses absolute paths, "..", links out of dest
            if safe.isfile():
                _write_sparse(tar.extractfile(safe), dest / safe.name, safe.size)
    return True


def _write_sparse(src: IO[bytes] | None, path: Path, size: int) -> None:
    assert src is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        while chunk := src.read(HOLE):
            if chunk.count(0) == len(chunk):
                out.seek(len(chunk), os.SEEK_CUR)
            else:
                out.write(chunk)
        out.truncate(size)


def answer(kind: str, key: str, suffix: str) -> bytes | None:
    """The checked-in broker answer `<kind>/<key><suffix>`, or None."""
    path = ANSWERS / kind / f"{key}{suffix}.xz"
    return lzma.decompress(path.read_bytes()) if _enabled() and path.is_file() else None


def _packed_files(store_dir: Path) -> list[Path]:
    files = {p for pattern in PACKED for top in store_dir.glob(pattern) for p in [top, *top.rglob("*")]}
    return sorted(p for p in files if p.is_file())


def pack_store(store_dir: Path, archive: Path) -> None:
    """`store_dir`'s PACKED files as a reproducible xz tar (sorted, no owners, mtime 0)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _packed_files(store_dir):
            info = tarfile.TarInfo(str(path.relative_to(store_dir)))
            info.size, info.mode = path.stat().st_size, 0o644
            with open(path, "rb") as f:
                tar.addfile(info, f)
    archive.write_bytes(lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME))


def _used(everything: bool) -> dict[str, set[str]]:
    """What used.txt lists, or with `everything` what the cache holds."""
    used: dict[str, set[str]] = {"store": set(), "served": set(), "restarted": set()}
    if everything:
        used["store"] = {p.parent.name for p in (CACHE / "stores").glob("*/COMPLETE")}
        used["served"] = {p.name.removesuffix(".jsonl") for p in (CACHE / "served").glob("*.jsonl")}
        used["restarted"] = {p.name.removesuffix(".log") for p in (CACHE / "restarted").glob("*.log")}
        return used
    path = CACHE / "used.txt"
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        kind, _, name = line.partition(" ")
        used.setdefault(kind, set()).add(name)
    return used


def _record_stores(names: set[str], manifest: dict[str, dict]) -> None:
    STORES.mkdir(parents=True, exist_ok=True)
    for name in sorted(names):
        archive, store_dir = STORES / f"{name}.tar.xz", CACHE / "stores" / name
        if not archive.is_file() and (store_dir / "COMPLETE").is_file():
            pack_store(store_dir, archive)
            manifest[name] = _describe(name, store_dir)
    for stale in STORES.glob("*.tar.xz"):
        if stale.name.removesuffix(".tar.xz") not in names:
            stale.unlink()
            manifest.pop(stale.name.removesuffix(".tar.xz"), None)


def _describe(name: str, store_dir: Path) -> dict[str, str | int]:
    """The manifest entry of a store named `<version>-<variant>-seed<seed>-<hash>`."""
    version, rest = name.split("-", 1)
    variant, seed_hash = rest.rsplit("-seed", 1)
    written = time.strftime("%Y-%m-%d", time.gmtime((store_dir / "COMPLETE").stat().st_mtime))
    return {
        "written_by": f"RocketMQ {version} broker",
        "variant": variant,
        "seed": int(seed_hash.split("-")[0]),
        "written_on": written,
    }


def _record_answers(kind: str, keys: set[str], suffix: str) -> None:
    folder = ANSWERS / kind
    folder.mkdir(parents=True, exist_ok=True)
    for key in sorted(keys):
        src, dst = CACHE / kind / f"{key}{suffix}", folder / f"{key}{suffix}.xz"
        if not dst.is_file() and src.is_file():
            dst.write_bytes(lzma.compress(src.read_bytes(), preset=9))
    for stale in folder.glob(f"*{suffix}.xz"):
        if stale.name.removesuffix(f"{suffix}.xz") not in keys:
            stale.unlink()


def main(argv: list[str]) -> int:
    """Pack what the last suite run used (<cache>/used.txt; --all: the whole cache) into tests/broker/recorded/;
    drop what it did not use."""
    used = _used("--all" in argv)
    if not used["store"]:
        print(f"nothing noted in {CACHE / 'used.txt'}: run the suite first (make broker-stores)", file=sys.stderr)
        return 1
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.is_file() else {}
    _record_stores(used["store"], manifest)
    _record_answers("served", used["served"], ".jsonl")
    _record_answers("restarted", used["restarted"], ".log")
    MANIFEST.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    size = sum(p.stat().st_size for p in RECORDED.rglob("*") if p.is_file())
    answers = len(used["served"]) + len(used["restarted"])
    print(f"tests/broker/recorded: {len(used['store'])} stores, {answers} answers, {size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
