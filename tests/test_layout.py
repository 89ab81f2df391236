"""Store names and paths: offset names, IndexFile names, queueIds, topics and the containment rule."""

from __future__ import annotations

import pytest

from storelib.errors import HostileNameError
from storelib.layout import (
    deterministic_index_names,
    index_name,
    index_name_after,
    index_name_ms,
    inside,
    is_index_name,
    is_valid_topic,
    parse_offset_name,
    parse_queue_id,
    queue_dir,
    validate_topic,
)


@pytest.mark.parametrize(
    ("name", "offset"),
    [
        ("00000000000000000000", 0),
        ("00000000001073741824", 1073741824),
        ("0000000000000000000²", None),  # str.isdigit accepts it, int() would too: never a store name
        ("0000000000000000000١", None),  # an Arabic-Indic digit
        ("0000000000000000000", None),
        ("000000000000000000000", None),
        ("0000000000000000000a", None),
    ],
)
def test_offset_names_are_20_ascii_digits(name: str, offset: int | None) -> None:
    assert parse_offset_name(name) == offset


@pytest.mark.parametrize(
    ("name", "queue_id"),
    [("0", 0), ("7", 7), ("2147483647", 2147483647), ("2147483648", None), ("01", None), ("-1", None), ("３", None)],
)
def test_queue_ids_are_canonical_int32(name: str, queue_id: int | None) -> None:
    assert parse_queue_id(name) == queue_id


def test_index_names() -> None:
    # 1795312718885 ms = 2026-11-22 01:58:38.885 UTC (the 4.9.8 sample's fifth file begins then)
    assert index_name(1795312718885) == "20261122015838885"
    assert index_name_ms("20261122015838885") == 1795312718885
    assert is_index_name("20261122015838885")
    assert not is_index_name("2026112201583888")
    assert not is_index_name("2026112201583888５")


def test_created_index_names_sort_after_the_kept_ones() -> None:
    assert index_name_after(index_name_ms("20261122015840000"), "20261122015839765") == "20261122015840000"
    assert index_name_after(index_name_ms("20261122015830000"), "20261122015839999") == "20261122015840000"
    assert index_name_after(index_name_ms("20261122015840000"), None) == "20261122015840000"


def test_deterministic_names_move_1_ms_past_the_previous() -> None:
    t = 1795312718885
    assert deterministic_index_names([t, t, t - 5, t + 10]) == [
        "20261122015838885",
        "20261122015838886",
        "20261122015838887",
        "20261122015838895",
    ]
    assert deterministic_index_names([0]) == ["19700101000000000"]


@pytest.mark.parametrize(
    ("path", "root", "expected"),
    [("/a/b", "/a", True), ("/a", "/a", True), ("/a/../b", "/a", False), ("/ab", "/a", False), ("/a/", "/a", True)],
)
def test_inside(path: str, root: str, expected: bool) -> None:
    assert inside(path, root) is expected


@pytest.mark.parametrize("topic", ["OrderCreated", "%RETRY%billing-consumer", "a|b", "A_b-9", "t" * 127, "v" * 255])
def test_legal_topics(topic: str) -> None:
    assert validate_topic(topic) == topic
    assert is_valid_topic(topic)
    assert queue_dir(topic, 3) == f"consumequeue/{topic}/3"


@pytest.mark.parametrize("topic", ["", "..", "../etc", "a/b", "a\\b", "a b", "t" * 256, "ü", "a\0", "a\n"])
def test_hostile_topics_never_become_paths(topic: str) -> None:
    assert not is_valid_topic(topic)
    with pytest.raises(HostileNameError, match="illegal topic name"):
        validate_topic(topic, "commitlog/00000000000000000000")
    with pytest.raises(HostileNameError):
        queue_dir(topic, 0)


def test_negative_queue_id_is_hostile() -> None:
    with pytest.raises(HostileNameError, match="illegal queueId -1"):
        queue_dir("T", -1)
