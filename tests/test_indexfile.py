"""IndexFile: header codec, hand-derived files, the builder against a per-key reference, and lookups."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storelib.broker.config import BrokerConfig
from storelib.broker.dispatch import dispatch_batch
from storelib.errors import StoreFormatError
from storelib.formats.commitlog import Message
from storelib.formats.indexfile import (
    IndexFileReader,
    IndexFileSeries,
    IndexHeader,
    IndexLayout,
    entries_per_file,
    index_file_size,
    key_hash_of,
    needs_empty_tail_file,
    query_offsets,
)
from tests.builders import encode_segment, msg, scan
from tests.reference import ReferenceIndexService
from tests.roundtrip import assert_roundtrip

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

HEADER = bytes.fromhex(
    "000001a200fa1011"  # beginTimestamp 1795312717841
    "000001a200fa1180"  # endTimestamp 1795312718208
    "0000000000000000"  # beginPhyOffset 0
    "0000000000063c3c"  # endPhyOffset 408636
    "00000298"  # hashSlotCount 664
    "00000bb8"  # indexCount 3000
)


def test_hand_built_header() -> None:
    header = IndexHeader(1795312717841, 1795312718208, 0, 408636, 664, 3000)
    assert header.pack() == HEADER
    assert IndexHeader.unpack(HEADER + b"slots follow") == header
    assert IndexHeader() == IndexHeader(0, 0, 0, 0, 0, 1)  # indexCount starts at 1


int64s = st.integers(-(2**63), LONG_MAX)
int32s = st.integers(-(2**31), INT_MAX)


@given(st.builds(IndexHeader, int64s, int64s, int64s, int64s, int32s, int32s))
def test_header_roundtrip(header: IndexHeader) -> None:
    assert_roundtrip(IndexHeader.pack, IndexHeader.unpack, header)


def test_sizes() -> None:
    assert index_file_size(701, 3000) == 62844
    assert index_file_size(5_000_000, 20_000_000) == 420000040
    assert index_file_size(5, 4) == 140
    assert entries_per_file(3000) == 2999


def test_layout_parts() -> None:
    """maxHashSlotNum 5, maxIndexNum 4: header 0..39, slots 40..59, entries from 60, 140 bytes."""
    layout = IndexLayout(5, 4)
    assert (layout.entries_at, layout.entry_at(3), layout.size, layout.slot_table) == (60, 120, 140, (40, 20))
    assert [layout.head_size(n) for n in (0, 1, 3)] == [40, 100, 140]
    assert [layout.part_at(at) for at in (39, 40, 59, 60, 139)] == [
        "header",
        "hash slot 0",
        "hash slot 4",
        "entry 0",
        "entry 3",
    ]


# --- a tiny IndexFile derived by hand: maxHashSlotNum 5, maxIndexNum 4 (3 entries a file) ---------
#
# keyHash = "T#x".hashCode() = 84*31^2 + 35*31 + ord(x):  T#a 81906, T#b 81907, T#f 81911, T#k 81916
# slot = keyHash % 5:                                       a -> 1,   b -> 2,    f -> 1,    k -> 1

TINY = BrokerConfig(maxHashSlotNum=5, maxIndexNum=4)
TS1, TS2, TS3 = 1_700_000_000_000, 1_700_000_002_500, 1_700_000_010_000
A, B, F, K = 81906, 81907, 81911, 81916


def tiny_file(header: tuple[int, ...], slots: list[int], entries: dict[int, tuple[int, int, int, int]]) -> bytes:
    """Header, 5 slots, 4 entries (keyHash, phyOffset, timeDiff, prevIndex); entry 0 is never used."""
    data = struct.pack(">qqqqii", *header) + struct.pack(">5i", *slots)
    return data + b"".join(struct.pack(">iqii", *entries.get(i, (0, 0, 0, 0))) for i in range(4))


def first_file(slot_count: int) -> bytes:
    """After (100, TS1, key a) and (350, TS2, keys f b): full."""
    return tiny_file(
        (TS1, TS2, 100, 350, slot_count, 4),
        [0, 2, 3, 0, 0],  # slot 1: newest entry 2 (f), whose chain goes on to entry 1 (a); slot 2: entry 3
        {
            1: (A, 100, 0, 0),  # beginTimestamp is still 0 at the first put: timeDiff 0
            2: (F, 350, 2, 1),  # (TS2 - TS1) / 1000 = 2.5, truncated; prevIndex 1
            3: (B, 350, 2, 0),
        },
    )


EMPTY_FIRST_FILE = tiny_file((0, 0, 0, 0, 0, 1), [0] * 5, {})

# Each scenario: messages (commitlog offset, storeTimestamp, KEYS, tran type), then the files for
# hashSlotCount rule "occupied" and for "every-put".
SCENARIOS = {
    # message 2's third key does not fit: it opens file 2, measured against file 1's end (TS2)
    "keys-split-across-files": (
        [(100, TS1, "a", 0), (350, TS2, "f b k", 0), (600, TS3, "a", 0)],
        [
            first_file(2),
            tiny_file((TS2, TS3, 350, 600, 1, 3), [0, 2, 0, 0, 0], {1: (K, 350, 0, 0), 2: (A, 600, 7, 1)}),
        ],
        [
            first_file(3),
            tiny_file((TS2, TS3, 350, 600, 2, 3), [0, 2, 0, 0, 0], {1: (K, 350, 0, 0), 2: (A, 600, 7, 1)}),
        ],
    ),
    # file 1 fills exactly; message 3 opens file 2 and is measured against file 1's end time
    "roll-between-messages": (
        [(100, TS1, "a", 0), (350, TS2, "f b", 0), (600, TS3, "a", 0)],
        [first_file(2), tiny_file((TS3, TS3, 600, 600, 1, 2), [0, 1, 0, 0, 0], {1: (A, 600, 7, 0)})],
        [first_file(3), tiny_file((TS3, TS3, 600, 600, 1, 2), [0, 1, 0, 0, 0], {1: (A, 600, 7, 0)})],
    ),
    # file 1 fills exactly and a message without keys follows: an empty file with inherited values
    "empty-tail-file": (
        [(100, TS1, "a", 0), (350, TS2, "f b", 0), (600, TS3, None, 0)],
        [first_file(2), tiny_file((TS2, TS2, 350, 350, 0, 1), [0] * 5, {})],
        [first_file(3), tiny_file((TS2, TS2, 350, 350, 0, 1), [0] * 5, {})],
    ),
    # a ROLLBACK record is not indexed, but it still makes the broker open the next file
    "empty-tail-file-after-rollback": (
        [(100, TS1, "a", 0), (350, TS2, "f b", 0), (600, TS3, "a", 0xC)],
        [first_file(2), tiny_file((TS2, TS2, 350, 350, 0, 1), [0] * 5, {})],
        [first_file(3), tiny_file((TS2, TS2, 350, 350, 0, 1), [0] * 5, {})],
    ),
    "full-file-at-the-end": (
        [(100, TS1, "a", 0), (350, TS2, "f b", 0)],
        [first_file(2)],
        [first_file(3)],
    ),
    # messages but no keys: the first message still creates the first file
    "no-keys-at-all": ([(100, TS1, None, 0), (350, TS2, "", 0)], [EMPTY_FIRST_FILE], [EMPTY_FIRST_FILE]),
    "no-messages": ([], [], []),
}


def series_files(scenario: list[tuple[int, int, str | None, int]], cfg: BrokerConfig) -> list[bytes]:
    """IndexFileSeries fed message by message with the hand-computed keyHashes."""
    hashes = {"a": A, "b": B, "f": F, "k": K}
    series = IndexFileSeries(cfg)
    out = []
    for offset, ts, keys, tran in scenario:
        ks = [hashes[k] for k in (keys or "").split(" ") if k] if tran != 0xC else []
        out += series.add(np.array(ks, dtype=np.int32), np.full(len(ks), offset), np.full(len(ks), ts), offset)
    out += series.finish()
    return [data for _, data in out]


def reference_files_of(scenario: list[tuple[int, int, str | None, int]], cfg: BrokerConfig) -> list[bytes]:
    ref = ReferenceIndexService(cfg)
    for offset, ts, keys, tran in scenario:
        ref.build_index(offset, ts, "T", tran, None, keys)
    return ref.files_bytes()


@pytest.mark.parametrize("rule", ["occupied", "every-put"])
@pytest.mark.parametrize("name", SCENARIOS)
def test_hand_derived_files(name: str, rule: str) -> None:
    scenario, occupied, every_put = SCENARIOS[name]
    cfg = dataclasses.replace(TINY, hashSlotCountRule=rule)
    expected = occupied if rule == "occupied" else every_put
    assert series_files(scenario, cfg) == expected
    # the reference implementation below reproduces the hand-derived bytes too
    assert reference_files_of(scenario, cfg) == expected


def test_index_disabled_gives_no_files() -> None:
    messages = [msg("T", {"KEYS": "a b", "UNIQ_KEY": "U"}), msg("T", {"KEYS": "c"})]
    data, offsets = encode_segment(messages)
    cfg = dataclasses.replace(TINY, messageIndexEnable=False)
    assert rebuilt_index(data, cfg, 1 << 20, 1) == reference_index(messages, offsets, cfg) == []
    assert len(rebuilt_index(data, TINY, 1 << 20, 1)) == 2


@pytest.mark.parametrize(
    ("entries", "max_index_num", "more", "tail"),
    [
        (0, 4, False, False),
        (0, 4, True, True),  # messages but no keys: one empty file
        (3, 4, True, True),  # exactly one full file, then another message
        (3, 4, False, False),
        (4, 4, True, False),
        (6, 4, True, True),
        (2998, 3000, True, False),
        (2999, 3000, True, True),
    ],
)
def test_needs_empty_tail_file(entries: int, max_index_num: int, more: bool, tail: bool) -> None:
    assert needs_empty_tail_file(entries, max_index_num, more) is tail


# --- the reference (tests.reference): IndexService.buildIndex + IndexFile.putKey, key by key -------


def reference_index(messages: list[Message], offsets: list[int], cfg: BrokerConfig) -> list[bytes]:
    ref = ReferenceIndexService(cfg)
    if cfg.messageIndexEnable:
        for m, offset in zip(messages, offsets):
            p = m.property_map()
            ref.build_index(offset, m.store_timestamp, m.topic, m.sys_flag & 0xC, p.get("UNIQ_KEY"), p.get("KEYS"))
    return ref.files_bytes()


def rebuilt_index(data: bytes, cfg: BrokerConfig, chunk_size: int, batch_records: int) -> list[bytes]:
    """storelib's path: scanner -> dispatch_batch -> IndexFileSeries."""
    series = IndexFileSeries(cfg)
    files = []
    for batch in scan(data, chunk_size=chunk_size, batch_records=batch_records).batches:
        d = dispatch_batch(batch, cfg)
        r = d.index_record
        last = int(batch.physical_offset[-1])
        files += series.add(d.index_key_hash, batch.physical_offset[r], batch.store_timestamp[r], last)
    files += series.finish()
    assert [h for h, _ in files] == [IndexHeader.unpack(data) for _, data in files]  # each header is its file's
    return [data for _, data in files]


# "Aa"/"BB" (and so "AaBB"/"BBAa") are hash twins; "mink-0N;28:B" in OrderCreated hashes to MIN_VALUE;
# the empty token makes double and trailing spaces
KEY_TOKENS = ["Aa", "BB", "k1", "k2", "", "mink-0N;28:B", "客户", "\U0001f9fe"]
UNIQ_KEYS = ["AaBB", "BBAa", "U1", "U2"]
TIME_STEPS = st.sampled_from([0, 1, 999, 1000, 1001, 1500, 60_000]) | st.integers(-3000, 3000) | st.just(3 * 10**12)
# one message: topic, UNIQ_KEY, KEYS, body length, transaction type, store time step
MESSAGE_PARTS = st.tuples(
    st.sampled_from(["T", "Tx", "OrderCreated"]),
    st.none() | st.sampled_from(UNIQ_KEYS),
    st.lists(st.sampled_from(KEY_TOKENS), max_size=4).map(" ".join),
    st.integers(0, 30),
    st.sampled_from([0, 0, 0, 0x4, 0x8, 0xC]),
    TIME_STEPS,
)
INDEX_CONFIGS = st.builds(
    BrokerConfig,
    maxHashSlotNum=st.integers(1, 7),
    maxIndexNum=st.integers(2, 7),
    hashSlotCountRule=st.sampled_from(["occupied", "every-put"]),
    messageIndexEnable=st.sampled_from([True, True, True, False]),
)


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Message], BrokerConfig]:
    ts = draw(st.integers(0, 2 * 10**12))
    messages = []
    for topic, uniq, keys, body_len, tran, step in draw(st.lists(MESSAGE_PARTS, max_size=25)):
        ts = max(0, ts + step)
        props = {"UNIQ_KEY": uniq, "KEYS": keys}
        props = {k: v for k, v in props.items() if v}
        messages.append(msg(topic, props, body=bytes(body_len), sys_flag=tran, store_timestamp=ts))
    return messages, draw(INDEX_CONFIGS)


@settings(deadline=None, max_examples=100)
@given(workloads(), st.sampled_from([64, 1 << 20]), st.integers(1, 4))
def test_builder_matches_the_reference(workload, chunk_size: int, batch_records: int) -> None:
    messages, cfg = workload
    data, offsets = encode_segment(messages)
    expected = reference_index(messages, offsets, cfg)
    assert rebuilt_index(data, cfg, chunk_size, batch_records) == expected


def test_reference_workload_covers_splits_and_twins() -> None:
    """One fixed workload with every feature at once, checked file by file."""
    topics_keys = [("T", "Aa BB"), ("T", "BB  Aa "), ("OrderCreated", "mink-0N;28:B Aa"), ("T", None), ("T", "k1")]
    messages = [msg(t, {"KEYS": k} if k else {}, store_timestamp=TS1 + 700 * i) for i, (t, k) in enumerate(topics_keys)]
    data, offsets = encode_segment(messages)
    for rule in ("occupied", "every-put"):
        cfg = BrokerConfig(maxHashSlotNum=3, maxIndexNum=3, hashSlotCountRule=rule)
        expected = reference_index(messages, offsets, cfg)
        assert len(expected) == 4  # 7 keys, 2 a file: the keys of messages 2 and 3 are split
        assert rebuilt_index(data, cfg, 64, 2) == expected
        headers = [IndexHeader.unpack(f) for f in expected]
        assert [h.index_count for h in headers] == [3, 3, 3, 2]
        assert headers[2].begin_phy_offset == offsets[2] and headers[3].begin_phy_offset == offsets[4]


# --- reading back: IndexFile.selectPhyOffset and IndexService.queryOffset --------------------------

SPLIT_FILES = SCENARIOS["keys-split-across-files"][1]


def readers(files: list[bytes], cfg: BrokerConfig = TINY) -> list[IndexFileReader]:
    return [IndexFileReader(data, cfg, f"index/{i}") for i, data in enumerate(files)]


@pytest.mark.parametrize(
    ("key", "file1", "file2"),
    [("T#a", [100], [600]), ("T#f", [350], []), ("T#b", [350], []), ("T#k", [], [350]), ("T#zz", [], [])],
)
def test_select_phy_offsets(key: str, file1: list[int], file2: list[int]) -> None:
    r1, r2 = readers(SPLIT_FILES)
    assert r1.select_phy_offsets(key, 64, 0, LONG_MAX) == file1
    assert r2.select_phy_offsets(key, 64, 0, LONG_MAX) == file2
    assert query_offsets([r1, r2], key, 64, 0, LONG_MAX) == file2 + file1  # newest file first


def test_hash_twins_are_not_filtered() -> None:
    """Keys with the same keyHash share a chain, and selectPhyOffset only compares keyHashes."""
    # "T#Aa".hashCode() = 84*31^3 + 35*31^2 + 65*31 + 97 = 2538191 = "T#BB".hashCode(); slot 2538191 % 5 = 1
    twin = 2538191
    r = IndexFileReader(
        tiny_file((TS1, TS1, 100, 300, 1, 3), [0, 2, 0, 0, 0], {1: (twin, 100, 0, 0), 2: (twin, 300, 0, 1)}), TINY
    )
    assert r.select_phy_offsets("T#Aa", 64, 0, LONG_MAX) == [300, 100]
    assert r.select_phy_offsets("T#BB", 64, 0, LONG_MAX) == [300, 100]
    assert r.select_phy_offsets("T#BB", 1, 0, LONG_MAX) == [300]
    assert r.select_phy_offsets("T#Ab", 64, 0, LONG_MAX) == []


def test_query_max_num_and_time_range() -> None:
    files = readers(SPLIT_FILES)
    assert query_offsets(files, "T#a", 1, 0, LONG_MAX) == [600]
    # timeDiff is stored in whole seconds: entry (a, 600) reads back as TS2 + 7000 < TS3, so a query
    # from TS3 misses it, and stops at file 2 because that file begins before TS3
    assert query_offsets(files, "T#a", 64, TS3, LONG_MAX) == []
    assert query_offsets(files, "T#a", 64, TS2 + 7000, LONG_MAX) == [600]
    # from TS2: file 2 gives 600; file 1's chain for slot 1 stops at entry 2 (read time TS1 + 2000 < TS2)
    assert query_offsets(files, "T#a", 64, TS2, LONG_MAX) == [600]
    assert query_offsets(files, "T#a", 64, 0, TS1) == [100]
    assert query_offsets(files, "T#a", 64, 0, TS1 - 1) == []


def test_lowered_index_count_hides_entries() -> None:
    """Slot values above the header's indexCount are treated as empty (crashed/ lowered one by 100)."""
    data = bytearray(SPLIT_FILES[0])
    struct.pack_into(">i", data, 36, 2)
    r = IndexFileReader(bytes(data), TINY)
    assert r.header.index_count == 2
    assert r.select_phy_offsets("T#b", 64, 0, LONG_MAX) == []  # slot 2 holds entry 3 > 2
    assert r.select_phy_offsets("T#a", 64, 0, LONG_MAX) == [100]  # slot 1 holds entry 2, then 1
    assert r.select_phy_offsets("T#f", 64, 0, LONG_MAX) == [350]
    struct.pack_into(">i", data, 36, 1)
    assert IndexFileReader(bytes(data), TINY).select_phy_offsets("T#a", 64, 0, LONG_MAX) == []


def test_time_matched() -> None:
    r1, _ = readers(SPLIT_FILES)
    assert r1.is_time_matched(0, LONG_MAX)
    assert r1.is_time_matched(TS1, TS1)
    assert r1.is_time_matched(TS2, LONG_MAX)
    assert r1.is_time_matched(0, TS1)
    assert not r1.is_time_matched(TS2 + 1, LONG_MAX)
    assert not r1.is_time_matched(0, TS1 - 1)


def test_reader_checks_the_file_size() -> None:
    with pytest.raises(StoreFormatError, match="IndexFile is 139 bytes, expected 140") as err:
        IndexFileReader(SPLIT_FILES[0][:-1], TINY, "index/20261122015837846")
    assert err.value.file == "index/20261122015837846"


def test_a_message_s_keys_are_found_past_a_hot_key_s_long_chain() -> None:
    """Every message carries the key "hot" (as messages share a tag): its chain holds all 100 entries, and the 64
    newest do not reach the oldest message; the run of entries beside its UNIQ_KEY entry does."""
    cfg = BrokerConfig(maxHashSlotNum=50, maxIndexNum=400)
    messages = [msg("T", {"UNIQ_KEY": f"U{i:03d}", "KEYS": f"hot k{i}"}, store_timestamp=TS1) for i in range(100)]
    _, offsets = encode_segment(messages)
    (r,) = readers(reference_index(messages, offsets, cfg), cfg)
    assert offsets[0] not in r.select_phy_offsets("T#hot", 64, 0, LONG_MAX)
    assert r.message_key_hashes("T#U000", offsets[0]) == {key_hash_of(f"T#{k}") for k in ("U000", "hot", "k0")}
    assert r.message_key_hashes("T#U057", offsets[57]) == {key_hash_of(f"T#{k}") for k in ("U057", "hot", "k57")}
    assert r.message_key_hashes("T#U000", offsets[1]) is None  # its entry is for another message
    assert r.message_key_hashes("T#nope", offsets[0]) is None


def test_a_message_whose_keys_did_not_fit_goes_on_at_the_next_file_s_start() -> None:
    """Keys "f b k" of the message at 350: f and b fill the first file, k leads the second (IndexService.putKey
    retries in a new file): the second file's leading entries are the message's rest, and no other message's."""
    r1, r2 = readers(SPLIT_FILES)
    assert r1.message_key_hashes("T#f", 350) == {key_hash_of("T#f"), key_hash_of("T#b")}
    assert r2.leading_key_hashes(350) == {key_hash_of("T#k")}
    assert r2.leading_key_hashes(600) == frozenset() and r1.leading_key_hashes(350) == frozenset()
