"""Where the compiled kernels (storelib.formats.kernel, storelib.formats.index_walks) cache their machine code.

Compiled code is cached (numba ``cache=True``): in ``NUMBA_CACHE_DIR`` when set, else next to the source when that
directory is writable, else in ``~/.cache/rmq-store-rebuild/numba`` or the temp directory.

numba (0.68) caches a function from a zip under ~/.cache/numba whatever NUMBA_CACHE_DIR says, keyed by the zip's
mtime: an executor's copy of a --py-files zip would recompile in every application. A kernel module imported from a
zip runs instead from a copy of its source (``source_copy``), rewritten only when it changes, which caches in
``CACHE`` and stays valid.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any


def _writable_dir(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def cache_dir() -> Path | None:
    """Where numba must cache: None when the default (``__pycache__`` beside a writable source file) works."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"])
    here = Path(__file__).parent
    if here.is_dir() and _writable_dir(here / "__pycache__"):
        return None
    for candidate in (Path.home() / ".cache" / "rmq-store-rebuild" / "numba", Path(tempfile.gettempdir())):
        target = candidate if candidate.name == "numba" else candidate / f"rmq-store-rebuild-numba-{os.getuid()}"
        if _writable_dir(target):
            return target
    return None


CACHE = cache_dir()


def source_copy(name: str, loader: Any) -> ModuleType:
    """The kernel module ``name`` (imported from a zip by ``loader``) run from a copy of its source in the cache
    directory: ``storelib.formats.kernel`` as ``storelib._kernel_file``."""
    short = name.rsplit(".", 1)[1]
    copy = (CACHE or Path(tempfile.gettempdir())) / "storelib_kernel_src" / f"{short}.py"
    source = loader.get_source(name)
    copy.parent.mkdir(parents=True, exist_ok=True)
    if not copy.is_file() or copy.read_text() != source:
        tmp = copy.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, copy)
    spec = importlib.util.spec_from_file_location(f"storelib._{short}_file", copy)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the copy {copy} of {name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
