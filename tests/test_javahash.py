"""Java ``String.hashCode()`` over UTF-16 code units, scalar and batched, and the IndexFile keyHash."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storelib.formats.javahash import combine_hash, index_key_hash, java_hash, java_hash_batch, java_hash_utf8_runs

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1

# Values Java computes. The non-ASCII ones are the tagsCode and javaHashCode values the real
# 4.9.8 broker wrote for the sample store (expected/commitlog_records.jsonl.gz, index_queries.jsonl).
KNOWN = {
    "": 0,
    "a": 97,
    "Aa": 2112,
    "BB": 2112,
    "hello": 99162322,
    "polygenelubricants": INT_MIN,
    "\U0001f4e6": 0xD83D * 31 + 0xDCE6,  # one character, two UTF-16 units
    "\ud800": 0xD800,  # a lone surrogate is one unit
    "ação": 3118866,
    "заказ": 1029489224,
    "订单创建": 1086086002,
    "Zahlung-ü": -1193753550,
    "\U0001f4e6ship": 670013957,
    "new||vip": 1404363517,
    "credit_note": -303451784,
    "OrderCreated#pair-AaBB": 1031083562,
    "OrderCreated#pair-BBAa": 1031083562,
    "OrderCreated#mink-0N;28:B": INT_MIN,
    "Audit-Log#\U0001f9fe-186": 501091507,
    "Audit-Log#客户-188": -1434597494,
    "Audit-Log#Kunde-ü-190": -1583407714,
}


def reference_hash(s: str) -> int:
    """The definition: sum of u[i] * 31^(n-1-i) over UTF-16 code units, as a wrapping int32."""
    units = s.encode("utf-16-be", "surrogatepass")
    code_units = [int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2)]
    n = len(code_units)
    h = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(code_units)) % 2**32
    return h - 2**32 if h > INT_MAX else h


# any text, plus text built from the characters that need care: astral (surrogate pairs),
# lone surrogates, and multi-byte BMP characters
texts = st.text() | st.text(alphabet=st.sampled_from(["a", "Z", "#", "\ud800", "\udfff", "ü", "订", "\U0001f4e6"]))


@pytest.mark.parametrize(("text", "expected"), KNOWN.items())
def test_known_values(text: str, expected: int) -> None:
    assert java_hash(text) == expected
    assert java_hash_batch([text]).tolist() == [expected]


def test_batch_of_known_values_keeps_order_and_empty_strings() -> None:
    texts_ = ["", *KNOWN, ""]
    got = java_hash_batch(texts_)
    assert got.dtype == np.int32
    assert got.tolist() == [0, *KNOWN.values(), 0]
    assert java_hash_batch([]).tolist() == []
    assert java_hash_batch(["", ""]).tolist() == [0, 0]


@given(texts)
def test_scalar_matches_definition(text: str) -> None:
    assert java_hash(text) == reference_hash(text)


@settings(deadline=None)
@given(st.lists(texts, max_size=20))
def test_batch_matches_scalar(strings: list[str]) -> None:
    assert java_hash_batch(strings).tolist() == [java_hash(s) for s in strings]


def test_batch_of_long_strings() -> None:
    # longer than any earlier string: the batch's table of powers of 31 has to grow
    strings = ["x" * 5000, "\U0001f4e6" * 3000, "y"]
    assert java_hash_batch(strings).tolist() == [java_hash(s) for s in strings]


def utf16_length(s: str) -> int:
    return len(s.encode("utf-16-be", "surrogatepass")) // 2


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.text()), max_size=12))
def test_utf8_runs(runs: list[tuple[int, str]]) -> None:
    """Strings stored as UTF-8 at (start, length) in a byte array, with junk bytes between them."""
    buf, starts, lengths = bytearray(), [], []
    for gap, text in runs:
        buf += b"\xff" * gap
        starts.append(len(buf))
        lengths.append(len(text.encode()))
        buf += text.encode()
    a = np.frombuffer(bytes(buf), dtype=np.uint8)
    hashes, units = java_hash_utf8_runs(a, np.array(starts, np.int64), np.array(lengths, np.int64))
    assert hashes.tolist() == [java_hash(text) for _, text in runs]
    assert units.tolist() == [utf16_length(text) for _, text in runs]


@given(st.lists(st.tuples(texts, texts), min_size=1, max_size=12))
def test_combine_hash(pairs: list[tuple[str, str]]) -> None:
    """hashCode(prefix + suffix) from the two hashes and the suffix's UTF-16 length."""
    prefix = np.array([java_hash(p) for p, _ in pairs], dtype=np.int32)
    suffix = np.array([java_hash(s) for _, s in pairs], dtype=np.int32)
    lengths = np.array([utf16_length(s) for _, s in pairs], dtype=np.int64)
    assert combine_hash(prefix, suffix, lengths).tolist() == [java_hash(p + s) for p, s in pairs]


def test_index_key_hash() -> None:
    hashes = np.array([0, 97, -97, INT_MAX, -INT_MAX, INT_MIN], dtype=np.int32)
    got = index_key_hash(hashes)
    assert got.dtype == np.int32
    # abs(), except Integer.MIN_VALUE, whose abs() is still negative: keyHash 0
    assert got.tolist() == [0, 97, 97, INT_MAX, INT_MAX, 0]


def test_fixture_query_hashes(fixture_dir) -> None:
    """Every javaHashCode the real broker logged for the sample queries."""
    queries = [json.loads(line) for line in (fixture_dir / "expected" / "index_queries.jsonl").open()]
    keys = [q["indexKey"] for q in queries]
    expected = [q["javaHashCode"] for q in queries]
    assert len(keys) == 46
    assert [java_hash(k) for k in keys] == expected
    assert java_hash_batch(keys).tolist() == expected
