"""CommitLog: the record codec against hand-built bytes, properties, and the segment scanner on damage."""

from __future__ import annotations

import dataclasses
import io
import ipaddress
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storelib.errors import StoreFormatError
from storelib.formats.commitlog import (
    MIN_RECORD_SIZE,
    Message,
    body_crc,
    decode_message,
    encode_blank,
    encode_message,
    format_properties,
    parse_properties,
    record_length,
)
from storelib.formats.scanner import (
    DAMAGE_CRC,
    DAMAGE_LENGTH,
    END_BAD_BLANK,
    END_BAD_MAGIC,
    END_BAD_SIZE,
    END_BLANK,
    END_EOF,
    END_TORN,
    END_ZERO_TAIL,
    SegmentScanner,
)
from tests.builders import encode_segment, msg, scan
from tests.roundtrip import assert_roundtrip

# --- hand-built records (field by field from the spec's record table) ---------------------

V1_IPV4 = bytes.fromhex(
    "0000007a"  # TOTALSIZE 122
    "daa320a7"  # MAGICCODE v1
    "3610a686"  # BODYCRC: CRC32("hello") = 0x3610a686, & 0x7fffffff
    "00000003"  # QUEUEID 3
    "00000001"  # FLAG 1
    "0000000000000007"  # QUEUEOFFSET 7
    "0000000000000400"  # PHYSICALOFFSET 1024
    "00000000"  # SYSFLAG 0
    "0000018bcfe56800"  # BORNTIMESTAMP 1700000000000
    "0a000001 00009c40"  # BORNHOST 10.0.0.1:40000
    "0000018bcfe56805"  # STORETIMESTAMP 1700000000005
    "c0a80102 00002a9f"  # STOREHOST 192.168.1.2:10911
    "00000002"  # RECONSUMETIMES 2
    "0000000000000000"  # PREPARED TRANSACTION OFFSET 0
    "00000005 68656c6c6f"  # BODYLENGTH 5, "hello"
    "06 546f70696341"  # TOPICLENGTH 6 (1 byte), "TopicA"
    "0014 54414753017461674102 4b45595301 6b31206b32"  # 20 bytes: TAGS\1tagA\2KEYS\1k1 k2
)
V1_IPV4_MESSAGE = Message(
    topic="TopicA",
    body=b"hello",
    properties="TAGS\x01tagA\x02KEYS\x01k1 k2",
    queue_id=3,
    flag=1,
    queue_offset=7,
    physical_offset=1024,
    sys_flag=0,
    born_timestamp=1700000000000,
    born_host="10.0.0.1:40000",
    store_timestamp=1700000000005,
    store_host="192.168.1.2:10911",
    reconsume_times=2,
    prepared_transaction_offset=0,
    body_crc=0x3610A686,
)

V1_IPV6_BORN = bytes.fromhex(
    "00000068"  # TOTALSIZE 104 = 91 + 12 (IPv6 born host) + topic 1
    "daa320a7"  # MAGICCODE v1
    "00000000"  # BODYCRC of an empty body
    "00000000"  # QUEUEID 0
    "00000000"  # FLAG 0
    "0000000000000000"  # QUEUEOFFSET 0
    "0000000000000000"  # PHYSICALOFFSET 0
    "00000014"  # SYSFLAG 0x14: PREPARED | BORNHOST_V6
    "0000000000000001"  # BORNTIMESTAMP 1
    "fd000000000000000000000000000001 000004d2"  # BORNHOST [fd00::1]:1234, 20 bytes
    "0000000000000002"  # STORETIMESTAMP 2, at offset 68 (56 + 12)
    "7f000001 00002a9f"  # STOREHOST 127.0.0.1:10911
    "00000000"  # RECONSUMETIMES 0
    "0000000000000000"  # PREPARED TRANSACTION OFFSET 0
    "00000000"  # BODYLENGTH 0
    "01 54"  # TOPICLENGTH 1, "T"
    "0000"  # PROPERTIESLENGTH 0
)
V1_IPV6_BORN_MESSAGE = Message(
    topic="T",
    sys_flag=0x14,
    born_timestamp=1,
    born_host="fd00:0:0:0:0:0:0:1:1234",
    store_timestamp=2,
    store_host="127.0.0.1:10911",
    body_crc=0,
)

V2_IPV6_STORE = bytes.fromhex(
    "00000079"  # TOTALSIZE 121 = 91 + 12 (IPv6 store host) + 1 (2-byte topic length) + 3 + 2 + 12
    "daa320ab"  # MAGICCODE v2
    "352441c2"  # BODYCRC: CRC32("abc") = 0x352441c2
    "00000011"  # QUEUEID 17
    "00000000"  # FLAG 0
    "0000000000000005"  # QUEUEOFFSET 5
    "00000000000a0000"  # PHYSICALOFFSET 655360
    "00000028"  # SYSFLAG 0x28: COMMIT | STOREHOST_V6
    "0000000000000064"  # BORNTIMESTAMP 100
    "0a080002 00005bd0"  # BORNHOST 10.8.0.2:23504
    "00000000000000c8"  # STORETIMESTAMP 200
    "fd123456789a00000000000000000020 00002a9f"  # STOREHOST [fd12:3456:789a::20]:10911
    "00000000"  # RECONSUMETIMES 0
    "0000000000001000"  # PREPARED TRANSACTION OFFSET 4096
    "00000003 616263"  # BODYLENGTH 3, "abc"
    "0002 5432"  # TOPICLENGTH 2 (2 bytes), "T2"
    "000c 554e49515f4b455901494431"  # 12 bytes: UNIQ_KEY\1ID1
)
V2_IPV6_STORE_MESSAGE = Message(
    topic="T2",
    body=b"abc",
    properties="UNIQ_KEY\x01ID1",
    queue_id=17,
    queue_offset=5,
    physical_offset=655360,
    sys_flag=0x28,
    born_timestamp=100,
    born_host="10.8.0.2:23504",
    store_timestamp=200,
    store_host="fd12:3456:789a:0:0:0:0:20:10911",
    prepared_transaction_offset=4096,
    body_crc=0x352441C2,
    v2=True,
)

BLANK_64 = bytes.fromhex("00000040 cbd43194") + bytes(56)  # TOTALSIZE 64, BLANK magic, zeros

HAND_BUILT = [
    pytest.param(V1_IPV4, V1_IPV4_MESSAGE, id="v1-ipv4"),
    pytest.param(V1_IPV6_BORN, V1_IPV6_BORN_MESSAGE, id="v1-ipv6-born"),
    pytest.param(V2_IPV6_STORE, V2_IPV6_STORE_MESSAGE, id="v2-ipv6-store"),
]


@pytest.mark.parametrize(("data", "message"), HAND_BUILT)
def test_encode_hand_built(data: bytes, message: Message) -> None:
    assert encode_message(message) == data
    # BODYCRC left out is computed from the body
    assert encode_message(dataclasses.replace(message, body_crc=None)) == data


@pytest.mark.parametrize(("data", "message"), HAND_BUILT)
def test_decode_hand_built(data: bytes, message: Message) -> None:
    assert decode_message(b"\xff" * 9 + data, pos=9) == message


def test_hand_built_record_fields() -> None:
    m = decode_message(V1_IPV4)
    assert m.property_map() == {"TAGS": "tagA", "KEYS": "k1 k2"}
    assert body_crc(b"hello") == 0x3610A686
    assert body_crc(bytes.fromhex("ffffffff")) == 0xFFFFFFFF & 0x7FFFFFFF  # CRC32 of ff*4 is 0xffffffff


def test_encode_blank() -> None:
    assert encode_blank(64) == BLANK_64
    assert encode_blank(8) == bytes.fromhex("00000008cbd43194")
    with pytest.raises(StoreFormatError, match="needs 8 bytes"):
        encode_blank(7)


def test_record_length() -> None:
    assert MIN_RECORD_SIZE == 91  # empty body, topic and properties; v1; IPv4 hosts
    assert record_length(0, 0, 0, 0, v2=False) == 91
    assert record_length(0x10, 0, 0, 0, v2=False) == 103
    assert record_length(0x30, 0, 0, 0, v2=True) == 116
    assert record_length(0, 5, 6, 20, v2=False) == len(V1_IPV4)


def test_encode_rejects_what_the_layout_cannot_hold() -> None:
    with pytest.raises(StoreFormatError, match="v2 record layout"):
        encode_message(Message(topic="t" * 128))
    assert len(encode_message(Message(topic="t" * 127))) == 91 + 127
    with pytest.raises(StoreFormatError, match="int16 length"):
        encode_message(Message(topic="t", properties="p" * 0x8000))


def test_decode_errors_name_file_and_offset() -> None:
    data = bytes(16) + V1_IPV4
    with pytest.raises(StoreFormatError) as err:
        decode_message(data, pos=0, file="commitlog/x")
    assert (err.value.file, err.value.offset) == ("commitlog/x", 0)
    assert "bad magic" in str(err.value)
    grown = bytes(16) + struct.pack(">i", len(V1_IPV4) + 1) + V1_IPV4[4:] + b"\0"
    with pytest.raises(StoreFormatError, match="TOTALSIZE 123 but the fields add up to 122") as err:
        decode_message(grown, pos=16, file="commitlog/x")
    assert err.value.offset == 16


# --- properties ---------------------------------------------------------------------------------


def test_format_properties_4_9_8() -> None:
    # no separator after the last pair
    assert format_properties({"TAGS": "a", "KEYS": "k1 k2"}) == "TAGS\x01a\x02KEYS\x01k1 k2"
    assert format_properties([("WAIT", "false"), ("WAIT", "true")]) == "WAIT\x01false\x02WAIT\x01true"
    assert format_properties({}) == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TAGS\x01a\x02KEYS\x01k1 k2", {"TAGS": "a", "KEYS": "k1 k2"}),
        ("TAGS\x01a\x02", {"TAGS": "a"}),  # older brokers' trailing separator
        ("WAIT\x01true\x02CLUSTER\x01c\x02WAIT\x01false", {"WAIT": "false", "CLUSTER": "c"}),
        ("A\x01\x02B\x01b", {"B": "b"}),  # empty value skipped
        ("\x01a\x02B\x01b", {"B": "b"}),  # empty name skipped
        ("junk\x02B\x01b", {"B": "b"}),  # no separator skipped
        ("A\x01x\x01y", {"A": "x\x01y"}),  # the first \x01 splits
        ("", {}),
    ],
)
def test_parse_properties(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


prop_names = st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",)), max_size=8)
prop_values = st.text(st.characters(exclude_characters="\x02", exclude_categories=("Cs",)), max_size=12)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a loaded machine generates slowly
@given(st.dictionaries(prop_names.filter(bool), prop_values.filter(bool), max_size=8))
def test_properties_roundtrip(props: dict[str, str]) -> None:
    assert_roundtrip(format_properties, parse_properties, props)


@given(st.lists(st.tuples(prop_names, prop_values), max_size=10))
def test_parse_drops_empty_and_keeps_last_duplicate(pairs: list[tuple[str, str]]) -> None:
    expected = {}
    for name, value in pairs:
        if name and value:
            expected[name] = value
    assert parse_properties(format_properties(pairs)) == expected


# --- record round trips --------------------------------------------------------------------------

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
ports = st.integers(0, 65535)
ipv4_hosts = st.builds(lambda a, p: f"{ipaddress.IPv4Address(a)}:{p}", st.integers(0, 2**32 - 1), ports)
# the broker prints IPv6 hosts in Java's full form: 8 hex groups, no "::" compression
ipv6_hosts = st.builds(
    lambda groups, p: ":".join(f"{g:x}" for g in groups) + f":{p}",
    st.lists(st.integers(0, 0xFFFF), min_size=8, max_size=8),
    ports,
)
hosts = ipv4_hosts | ipv6_hosts
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
v1_topics = texts.filter(lambda t: len(t.encode()) <= 127)
v2_topics = st.text(st.characters(exclude_categories=("Cs",)), max_size=200)


@st.composite
def messages(draw: st.DrawFn, v2: bool | None = None, max_body: int = 64) -> Message:
    v2 = draw(st.booleans()) if v2 is None else v2
    born, store = draw(hosts), draw(hosts)
    v6 = (0x10 if born.count(":") > 1 else 0) | (0x20 if store.count(":") > 1 else 0)
    return Message(
        topic=draw(v2_topics if v2 else v1_topics),
        body=draw(st.binary(max_size=max_body)),
        properties=draw(texts),
        queue_id=draw(int32s),
        flag=draw(int32s),
        queue_offset=draw(int64s),
        physical_offset=draw(int64s),
        sys_flag=draw(int32s) & ~0x30 | v6,
        born_timestamp=draw(int64s),
        born_host=born,
        store_timestamp=draw(int64s),
        store_host=store,
        reconsume_times=draw(int32s),
        prepared_transaction_offset=draw(int64s),
        body_crc=draw(int32s),
        v2=v2,
    )


@given(messages())
def test_message_roundtrip(m: Message) -> None:
    assert_roundtrip(encode_message, decode_message, m)
    data = encode_message(m)
    total, magic = struct.unpack_from(">ii", data)
    assert total == len(data)
    assert magic == (-626843477 if m.v2 else -626843481)


# --- the segment scanner: every kind of segment end and damage --------------------------------

BASE = 3 * 131072  # the segment's start offset: every finding must be reported in commitlog offsets
FILE = "commitlog/00000000000000393216"
SIZE = 1024

M1 = msg("TopicA", {"TAGS": "a", "KEYS": "k1"}, body=b"first body", queue_id=1, store_timestamp=11)
M2 = msg("TopicB", {"UNIQ_KEY": "U2"}, body=b"second" * 5, queue_id=2, store_timestamp=12)
M3 = msg("TopicA", {}, body=b"", queue_id=1, queue_offset=1, store_timestamp=13)
R1, R2, R3 = (encode_segment([m])[0] for m in (M1, M2, M3))
L1, L2, L3 = len(R1), len(R2), len(R3)
BODY_AT = 88  # BODYLENGTH is at 84 in a v1 record with IPv4 hosts; the body follows


def patched(record: bytes, at: int, fmt: str, value: int) -> bytes:
    """``record`` with one field overwritten."""
    out = bytearray(record)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def flipped_body(record: bytes) -> bytes:
    """Every body byte XORed with 0xFF: the record still frames, its BODYCRC no longer matches."""
    n = struct.unpack_from(">i", record, 84)[0]
    body = bytes(b ^ 0xFF for b in record[BODY_AT : BODY_AT + n])
    return record[:BODY_AT] + body + record[BODY_AT + n :]


def grown(record: bytes, extra: int) -> bytes:
    """TOTALSIZE larger than the fields by ``extra``, with that many bytes appended."""
    return patched(record, 0, ">i", len(record) + extra) + b"\x07" * extra


def padded(data: bytes, size: int = SIZE) -> bytes:
    return data.ljust(size, b"\0")


def blank_ended(data: bytes, size: int = SIZE) -> bytes:
    return data + encode_blank(size - len(data))


@dataclasses.dataclass
class Case:
    """A segment (``data``, stream possibly shorter than ``size``) and what a scan of it must report."""

    data: bytes
    end: str
    end_at: int  # file position where valid records end
    records: list[int]  # file positions of the records handed out
    damage: list[tuple[str, int]] = dataclasses.field(default_factory=list)  # (kind, file position)
    size: int | None = None  # the segment's size, when the stream is shorter
    crc_ok: list[bool] | None = None


CASES = {
    "blank": Case(blank_ended(R1 + R2), END_BLANK, L1 + L2, [0, L1]),
    "minimal-blank": Case(R1 + R2 + encode_blank(8), END_BLANK, L1 + L2, [0, L1]),
    "zero-tail": Case(padded(R1 + R2), END_ZERO_TAIL, L1 + L2, [0, L1]),
    "zero-tail-under-8-bytes": Case(R1 + bytes(5), END_ZERO_TAIL, L1, [0]),
    "zero-magic": Case(padded(R1 + patched(R2, 4, ">i", 0)), END_ZERO_TAIL, L1, [0]),
    "eof": Case(R1 + R2 + R3, END_EOF, L1 + L2 + L3, [0, L1, L1 + L2]),
    "empty-file": Case(b"", END_EOF, 0, []),
    "torn-totalsize-past-end": Case((R1 + R2)[:-10], END_TORN, L1, [0]),
    "torn-file-short-in-record": Case(R1 + R2[:40], END_TORN, L1, [0], size=SIZE),
    "torn-file-short-in-header": Case(R1 + R2[:3], END_TORN, L1, [0], size=SIZE),
    "torn-file-short-at-record": Case(R1, END_TORN, L1, [0], size=SIZE),
    "torn-stray-bytes": Case(R1 + b"\x01\x02\x03", END_TORN, L1, [0]),
    "bad-magic": Case(padded(R1 + b"garbage!" * 8), END_BAD_MAGIC, L1, [0]),
    "bad-magic-first": Case(padded(b"\xca\xfe\xba\xbe" * 4 + R1), END_BAD_MAGIC, 0, []),
    "bad-magic-near-v2": Case(padded(R1 + patched(R2, 4, ">i", -626843478)), END_BAD_MAGIC, L1, [0]),
    "bad-size-below-minimum": Case(padded(R1 + patched(R2, 0, ">i", 90)), END_BAD_SIZE, L1, [0]),
    "bad-size-negative": Case(padded(R1 + patched(R2, 0, ">i", -5)), END_BAD_SIZE, L1, [0]),
    "bad-blank-short": Case(padded(R1 + encode_blank(64)), END_BAD_BLANK, L1, [0]),
    "bad-blank-long": Case(padded(R1 + patched(encode_blank(8), 0, ">i", SIZE), L1 + 100), END_BAD_BLANK, L1, [0]),
    "crc-mismatch": Case(
        blank_ended(R1 + flipped_body(R2) + R3),
        END_BLANK,
        L1 + L2 + L3,
        [0, L1, L1 + L2],
        [(DAMAGE_CRC, L1)],
        crc_ok=[True, False, True],
    ),
    "crc-mismatch-last": Case(
        R1 + flipped_body(R2), END_EOF, L1 + L2, [0, L1], [(DAMAGE_CRC, L1)], crc_ok=[True, False]
    ),
    "length-mismatch-total-too-big": Case(
        blank_ended(R1 + grown(R2, 4) + R3), END_BLANK, L1 + L2 + 4 + L3, [0, L1 + L2 + 4], [(DAMAGE_LENGTH, L1)]
    ),
    "length-mismatch-body-too-long": Case(
        padded(R1 + patched(R2, 84, ">i", 10_000) + R3),
        END_ZERO_TAIL,
        L1 + L2 + L3,
        [0, L1 + L2],
        [(DAMAGE_LENGTH, L1)],
    ),
    "length-mismatch-negative-body": Case(
        padded(R1 + patched(R2, 84, ">i", -1) + R3), END_ZERO_TAIL, L1 + L2 + L3, [0, L1 + L2], [(DAMAGE_LENGTH, L1)]
    ),
    "length-mismatch-topic-length": Case(
        R1 + patched(R2, BODY_AT + 30, ">b", -1) + R3, END_EOF, L1 + L2 + L3, [0, L1 + L2], [(DAMAGE_LENGTH, L1)]
    ),
    # a minimum-size record whose SYSFLAG claims IPv6 hosts: its fixed fields run past its end
    # (and here past the end of the file)
    "length-mismatch-ipv6-flags-at-eof": Case(
        R1 + patched(R3, 36, ">i", 0x30), END_EOF, L1 + L3, [0], [(DAMAGE_LENGTH, L1)]
    ),
    "two-damaged-records": Case(
        padded(flipped_body(R1) + grown(R2, 1) + R3),
        END_ZERO_TAIL,
        L1 + L2 + 1 + L3,
        [0, L1 + L2 + 1],
        [(DAMAGE_LENGTH, L1), (DAMAGE_CRC, 0)],
        crc_ok=[False, True],
    ),
}


@pytest.mark.parametrize("chunk_size", [1, 64, 8 << 20])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_scanner_segment_end_and_damage(case: Case, chunk_size: int) -> None:
    size = len(case.data) if case.size is None else case.size
    s = scan(case.data, FILE, BASE, size, chunk_size=chunk_size)
    assert (s.end.file, s.end.reason, s.end.offset) == (FILE, case.end, BASE + case.end_at)
    assert s.offsets() == [BASE + p for p in case.records]
    assert sorted(s.damage) == sorted((FILE, kind, BASE + p) for kind, p in case.damage)
    crc_ok = [r["crc_ok"] for r in s.rows()]
    assert crc_ok == (case.crc_ok or [True] * len(case.records))
    assert s.scanner.messages == len(case.records)
    assert s.end.clean == (case.end in (END_BLANK, END_ZERO_TAIL, END_EOF))


def test_crc_check_off_hands_out_damaged_bodies_without_damage() -> None:
    s = scan(blank_ended(R1 + flipped_body(R2)), FILE, BASE, check_crc=False)
    assert s.damage == []
    assert [r["crc_ok"] for r in s.rows()] == [True, True]
    assert s.end.reason == END_BLANK


def test_scanner_fields() -> None:
    """Every RecordBatch field of the hand-built records, placed back to back."""
    data = V1_IPV4 + V1_IPV6_BORN + V2_IPV6_STORE
    s = scan(data, FILE, BASE)
    rows = s.rows()
    assert [r["physical_offset"] for r in rows] == [BASE, BASE + 122, BASE + 226]
    assert [r["stored_physical_offset"] for r in rows] == [1024, 0, 655360]
    assert [r["total_size"] for r in rows] == [122, 104, 121]
    assert [r["body_length"] for r in rows] == [5, 0, 3]
    assert [r["topic"] for r in rows] == ["TopicA", "T", "T2"]
    assert [r["properties"] for r in rows] == [{"TAGS": "tagA", "KEYS": "k1 k2"}, {}, {"UNIQ_KEY": "ID1"}]
    assert [r["queue_id"] for r in rows] == [3, 0, 17]
    assert [r["flag"] for r in rows] == [1, 0, 0]
    assert [r["queue_offset"] for r in rows] == [7, 0, 5]
    assert [r["sys_flag"] for r in rows] == [0, 0x14, 0x28]
    assert [r["born_timestamp"] for r in rows] == [1700000000000, 1, 100]
    assert [r["store_timestamp"] for r in rows] == [1700000000005, 2, 200]
    assert [r["reconsume_times"] for r in rows] == [2, 0, 0]
    assert [r["prepared_transaction_offset"] for r in rows] == [0, 0, 4096]
    assert [r["body_crc"] for r in rows] == [0x3610A686, 0, 0x352441C2]
    assert [r["crc_ok"] for r in rows] == [True, True, True]
    assert (s.end.reason, s.scanner.last_store_timestamp) == (END_EOF, 200)


# --- chunk boundaries and memory -------------------------------------------------------------------

endings = st.sampled_from(["blank", "zero", "eof"])


def expected_row(m: Message, at: int) -> dict[str, object]:
    """What the scanner must report for message ``m`` stored at commitlog offset ``at``."""
    return {
        "physical_offset": at,
        "total_size": len(encode_message(m)),
        "body_crc": m.body_crc,
        "queue_id": m.queue_id,
        "flag": m.flag,
        "queue_offset": m.queue_offset,
        "stored_physical_offset": at,
        "sys_flag": m.sys_flag,
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "reconsume_times": m.reconsume_times,
        "prepared_transaction_offset": m.prepared_transaction_offset,
        "body_length": len(m.body),
        "crc_ok": m.body_crc == body_crc(m.body),
        "topic": m.topic,
        "properties": parse_properties(m.properties),
    }


@settings(deadline=None, max_examples=60)
@given(
    st.lists(messages(max_body=300), max_size=12),
    st.lists(st.booleans(), max_size=12),
    endings,
    st.integers(1, 300),
    st.integers(1, 5),
)
def test_chunk_size_does_not_change_what_is_scanned(
    msgs: list[Message], crc_right: list[bool], ending: str, chunk_size: int, batch_records: int
) -> None:
    # some records get their true BODYCRC, the rest keep a random one (usually a mismatch)
    msgs = [
        dataclasses.replace(m, body_crc=body_crc(m.body)) if i < len(crc_right) and crc_right[i] else m
        for i, m in enumerate(msgs)
    ]
    data, offsets = encode_segment(msgs, BASE)
    if ending != "eof":
        data, _ = encode_segment(msgs, BASE, size=len(data) + 64, blank=ending == "blank")
    small = scan(data, FILE, BASE, chunk_size=chunk_size, batch_records=batch_records)
    big = scan(data, FILE, BASE)
    assert small.rows() == big.rows() == [expected_row(m, at) for m, at in zip(msgs, offsets)]
    assert small.end == big.end
    assert small.damage == big.damage
    assert [kind for _, kind, _ in big.damage] == [DAMAGE_CRC] * sum(not r["crc_ok"] for r in big.rows())


class RecordingStream(io.RawIOBase):
    """A read-only stream that remembers every read() request and hands out at most ``trickle`` bytes."""

    def __init__(self, raw: io.BufferedIOBase, trickle: int | None = None) -> None:
        self.raw = raw
        self.trickle = trickle
        self.requests: list[int] = []
        self.delivered = 0

    def seekable(self) -> bool:
        return self.raw.seekable()

    def seek(self, pos: int, whence: int = 0) -> int:
        return self.raw.seek(pos, whence)

    def read(self, n: int = -1) -> bytes:
        self.requests.append(n)
        data = self.raw.read(n if self.trickle is None else min(n, self.trickle))
        self.delivered += len(data)
        return data


def test_short_reads_are_retried() -> None:
    data = blank_ended(R1 + flipped_body(R2) + R3)
    s = scan(RecordingStream(io.BytesIO(data), trickle=7), FILE, BASE, len(data), chunk_size=64)
    expected = scan(data, FILE, BASE)
    assert s.rows() == expected.rows()
    assert (s.end, s.damage) == (expected.end, expected.damage)


def test_memory_bound_on_a_large_sparse_segment(tmp_path) -> None:
    """A 1 GiB preallocated segment: the scan reads chunk by chunk and stops at the zero tail."""
    chunk = 4096
    body = bytes(range(256)) * 20  # 5120 bytes: records larger than a chunk
    head, offsets = encode_segment([msg("T", {"KEYS": f"k{i}"}, body=body[: i * 97 % 5121]) for i in range(200)])
    biggest = max(b - a for a, b in zip(offsets, [*offsets[1:], len(head)]))
    assert biggest > chunk
    path = tmp_path / "00000000000000000000"
    with path.open("wb") as f:
        f.write(head)
        f.truncate(1 << 30)  # sparse: costs no disk space
    with path.open("rb", buffering=0) as f:
        stream = RecordingStream(f)
        tracemalloc.start()
        s = scan(stream, FILE, 0, 1 << 30, chunk_size=chunk, batch_records=16)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert (s.end.reason, s.end.offset) == (END_ZERO_TAIL, len(head))
    assert len(s.offsets()) == 200
    assert max(stream.requests) <= chunk + biggest
    assert stream.delivered <= len(head) + chunk + biggest
    # everything kept (all batches and their properties) plus the scanner's working set
    assert peak < 4 * len(head) + 1_000_000, peak


def test_memory_stays_near_chunk_size_while_streaming(tmp_path) -> None:
    """Batches consumed one at a time: peak memory follows chunk_size, not the segment size."""
    chunk = 4096
    data, _ = encode_segment([msg("T", {"TAGS": "t"}, body=bytes(i % 300)) for i in range(3000)])
    assert len(data) > 100 * chunk
    path = tmp_path / "segment"
    path.write_bytes(data)
    with path.open("rb", buffering=0) as f:
        stream = RecordingStream(f)
        scanner = SegmentScanner(stream, FILE, 0, len(data), chunk_size=chunk, batch_records=64)
        tracemalloc.start()
        count = sum(len(batch) for batch in scanner)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert count == 3000
    assert max(stream.requests) <= chunk + 400
    assert peak < 16 * chunk + 100_000, peak
