"""The one round-trip assertion every storelib codec test uses."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def assert_roundtrip(encode: Callable[[T], bytes | str], decode: Callable[[bytes | str], T], value: T) -> None:
    """``decode(encode(v)) == v`` and ``encode(decode(encode(v))) == encode(v)``.

    Codecs whose decoded form is not directly comparable (numpy arrays) are wrapped by the
    caller so that ``decode`` returns plain Python values.
    """
    data = encode(value)
    back = decode(data)
    assert back == value, f"decode(encode(v)) differs:\n  v    = {value!r}\n  back = {back!r}"
    again = encode(back)
    assert again == data, f"encode(decode(encode(v))) differs:\n  first  = {data!r}\n  second = {again!r}"
