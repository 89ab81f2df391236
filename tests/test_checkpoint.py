"""StoreCheckpoint: one 4 KiB page of big-endian timestamps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storelib.errors import StoreFormatError
from storelib.formats.checkpoint import Checkpoint
from tests.roundtrip import assert_roundtrip

# 4.9.8: physicMsgTimestamp @0, logicsMsgTimestamp @8, indexMsgTimestamp @16, then zeros
PAGE_4_9_8 = bytes.fromhex(
    "000001a200fa17a4"  # physicMsgTimestamp 1795312719780
    "000001a200fab81f"  # logicsMsgTimestamp 1795312760863
    "000001a200fa1794"  # indexMsgTimestamp 1795312719764
) + bytes(4096 - 24)
CHECKPOINT_4_9_8 = Checkpoint(1795312719780, 1795312760863, 1795312719764)

# 5.x adds masterFlushedOffset @24 and confirmPhyOffset @32
PAGE_5 = bytes.fromhex(
    "0000000000000001"  # physicMsgTimestamp 1
    "0000000000000002"  # logicsMsgTimestamp 2
    "0000000000000003"  # indexMsgTimestamp 3
    "0000000000000400"  # masterFlushedOffset 1024
    "ffffffffffffffff"  # confirmPhyOffset -1
) + bytes(4096 - 40)


def test_hand_built_pages() -> None:
    assert Checkpoint.unpack(PAGE_4_9_8) == CHECKPOINT_4_9_8
    assert CHECKPOINT_4_9_8.pack() == PAGE_4_9_8
    assert Checkpoint.unpack(PAGE_5) == Checkpoint(1, 2, 3, 1024, -1)
    assert Checkpoint(1, 2, 3, 1024, -1).pack() == PAGE_5
    assert len(Checkpoint().pack()) == 4096


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=5, max_size=5))
def test_checkpoint_roundtrip(fields: list[int]) -> None:
    assert_roundtrip(Checkpoint.pack, Checkpoint.unpack, Checkpoint(*fields))


def test_short_checkpoint_names_the_file() -> None:
    with pytest.raises(StoreFormatError, match="checkpoint is 39 bytes, expected 4096") as err:
        Checkpoint.unpack(PAGE_4_9_8[:39], "store/checkpoint")
    assert err.value.file == "store/checkpoint"
    assert Checkpoint.unpack(PAGE_5[:40]) == Checkpoint(1, 2, 3, 1024, -1)


@pytest.mark.parametrize(
    ("physic", "logics", "minimum"),
    [(1795312719780, 1795312760863, 1795312716780), (9000, 5000, 2000), (1000, 9000, 0), (0, 5, 0)],
)
def test_min_timestamp(physic: int, logics: int, minimum: int) -> None:
    assert Checkpoint(physic, logics).min_timestamp() == minimum


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        ("clean", CHECKPOINT_4_9_8),
        ("crashed", CHECKPOINT_4_9_8),
        ("expired", Checkpoint(0, 1795312760863, 1795312719654)),  # nothing written after the restart
    ],
)
def test_fixture_checkpoints(fixture_dir, store: str, expected: Checkpoint) -> None:
    data = (fixture_dir / store / "checkpoint").read_bytes()
    assert Checkpoint.unpack(data) == expected
    assert expected.pack() == data
