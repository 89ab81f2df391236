"""Java ``String.hashCode()`` over UTF-16 code units, scalar and batched (compiled, ``storelib.formats.kernel``).

``s[0]*31^(n-1) + s[1]*31^(n-2) + ... + s[n-1]`` in wrapping int32 arithmetic,
where ``s[i]`` are UTF-16 code units (a character outside the BMP is a surrogate pair).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from storelib.constants import INT32_MIN
from storelib.formats import kernel

_POW_CACHE = np.ones(1, dtype=np.uint32)


def _pow31(n: int) -> np.ndarray:
    """31**k mod 2**32 for k in [0, n]."""
    global _POW_CACHE
    if len(_POW_CACHE) <= n:
        size = max(n + 1, 2 * len(_POW_CACHE))
        p = np.empty(size, dtype=np.uint32)
        p[0] = 1
        with np.errstate(over="ignore"):
            for i in range(1, size):
                p[i] = p[i - 1] * np.uint32(31)
        _POW_CACHE = p
    return _POW_CACHE


def _to_int32(h: int) -> int:
    h &= 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def java_hash(s: str) -> int:
    """``String.hashCode()`` of ``s`` as a signed int32."""
    if s.isascii():
        units = s.encode("ascii")
    else:
        data = s.encode("utf-16-be", "surrogatepass")
        units = np.frombuffer(data, dtype=">u2").tolist()
    h = 0
    for u in units:
        h = (31 * h + u) & 0xFFFFFFFF
    return _to_int32(h)


def java_hash_batch(strings: Sequence[str]) -> np.ndarray:
    """``String.hashCode()`` of every string, as an int32 array, compiled over their UTF-16 code units."""
    units = np.frombuffer("".join(strings).encode("utf-16-be", "surrogatepass"), dtype=">u2").astype(np.uint16)
    lengths = np.fromiter(
        (len(s) if s.isascii() else len(s.encode("utf-16-be", "surrogatepass")) // 2 for s in strings),
        dtype=np.int64,
        count=len(strings),
    )
    return kernel.hash_utf16_runs(units, lengths)


def java_hash_utf8_runs(a: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """hashCode and UTF-16 length of the UTF-8 strings at (start, length) in byte array ``a``.

    The bytes are decoded as Java's ``new String(bytes, UTF_8)`` and Python's ``decode("utf-8",
    "replace")`` do (U+FFFD per maximal invalid subpart), a 4-byte sequence giving a surrogate pair.
    """
    return kernel.hash_utf8_runs(a, kernel.as_int64(start), kernel.as_int64(length))


def combine_hash(prefix_hash: np.ndarray, suffix_hash: np.ndarray, suffix_utf16_len: np.ndarray) -> np.ndarray:
    """hashCode(prefix + suffix) = hashCode(prefix) * 31^len(suffix) + hashCode(suffix), wrapping."""
    pw = _pow31(int(suffix_utf16_len.max()) if len(suffix_utf16_len) else 0)
    with np.errstate(over="ignore"):
        hp = np.asarray(prefix_hash, dtype=np.int32).view(np.uint32)
        hs = np.asarray(suffix_hash, dtype=np.int32).view(np.uint32)
        return (hp * pw[suffix_utf16_len] + hs).astype(np.uint32).view(np.int32)


def index_key_hash(hashes: np.ndarray) -> np.ndarray:
    """IndexFile keyHash: ``abs(hashCode)``, and 0 for Integer.MIN_VALUE (whose abs stays negative)."""
    h = hashes.astype(np.int64)
    out = np.abs(h)
    out[h == INT32_MIN] = 0
    return out.astype(np.int32)
