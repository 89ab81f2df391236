"""Offset-named files: names and the layout rule shared by commitlog segments and ConsumeQueue files."""

from __future__ import annotations

from storelib.layout import offset_file_name, offset_layout_problems


def test_offset_file_name_is_20_digits() -> None:
    assert offset_file_name(0) == "00000000000000000000"
    assert offset_file_name(1073741824) == "00000000001073741824"


def test_layout_problems_name_misaligned_files_and_gaps() -> None:
    assert offset_layout_problems([0, 100, 200], 100) == []
    assert offset_layout_problems([100, 200], 100) == []  # an expired head is not a gap
    assert offset_layout_problems([0, 300, 400], 100) == [("gap", 300, 100)]
    # 150 is misaligned and leaves 100 missing; 250 follows 150 but is misaligned too
    assert offset_layout_problems([0, 150, 250], 100) == [
        ("misaligned", 150, 0),
        ("gap", 150, 100),
        ("misaligned", 250, 0),
    ]
