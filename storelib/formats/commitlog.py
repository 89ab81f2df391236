"""CommitLog segments' message records: their layout and codec (the scanner that walks a segment:
storelib.formats.scanner).

Record layout (v1, IPv4 hosts): TOTALSIZE i32, MAGICCODE i32, BODYCRC i32, QUEUEID i32,
FLAG i32, QUEUEOFFSET i64, PHYSICALOFFSET i64, SYSFLAG i32, BORNTIMESTAMP i64,
BORNHOST 4+4 (16+4 if SYSFLAG & 0x10), STORETIMESTAMP i64, STOREHOST 4+4 (16+4 if
SYSFLAG & 0x20), RECONSUMETIMES i32, PREPARED TRANSACTION OFFSET i64, BODYLENGTH i32 +
BODY, TOPICLENGTH i8 (v1) / i16 (v2) + TOPIC, PROPERTIESLENGTH i16 + PROPERTIES.

"When a record does not fit in the space left (it needs its own length plus 8 spare
bytes), the broker writes a BLANK record there": TOTALSIZE = bytes left, MAGIC = BLANK.
"A TOTALSIZE of 0 or a zero magic means nothing written yet".
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import struct
import zlib

from storelib.constants import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    FLAG_BORNHOST_V6,
    FLAG_STOREHOST_V6,
    INT32_MAX,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
)
from storelib.errors import StoreFormatError

# Offsets of the fixed fields, valid up to BORNHOST.
OFF_TOTALSIZE = 0
OFF_MAGIC = 4
OFF_BODYCRC = 8
OFF_QUEUEID = 12
OFF_FLAG = 16
OFF_QUEUEOFFSET = 20
OFF_PHYSICALOFFSET = 28
OFF_SYSFLAG = 36
OFF_BORNTIMESTAMP = 40
OFF_BORNHOST = 48
#: bytes from BORNHOST's end to STOREHOST: STORETIMESTAMP
#: fields after STOREHOST: RECONSUMETIMES i32, PREPARED TRANSACTION OFFSET i64, BODYLENGTH i32
MIN_RECORD_SIZE = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2

_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP
HEAD_WORDS = struct.Struct(">ii")  # a record's TOTALSIZE and MAGICCODE (a DLedger entry's magic and size)


def host_length(sys_flag: int, flag_bit: int) -> int:
    """BORNHOST / STOREHOST length: 4-byte IPv4 + port, or 16-byte IPv6 + port."""
    return 20 if sys_flag & flag_bit else 8


def record_length(sys_flag: int, body_length: int, topic_length: int, properties_length: int, v2: bool) -> int:
    """``CommitLog.calMsgLength``: the TOTALSIZE implied by the variable parts."""
    return (
        4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + host_length(sys_flag, FLAG_BORNHOST_V6)
        + 8
        + host_length(sys_flag, FLAG_STOREHOST_V6)
        + 4
        + 8
        + 4
        + body_length
        + (2 if v2 else 1)
        + topic_length
        + 2
        + properties_length
    )


def body_crc(body: bytes) -> int:
    """BODYCRC: ``CRC32(body) & 0x7fffffff``."""
    return zlib.crc32(body) & INT32_MAX


# --- Properties ---------------------------------------------------------------------


def parse_properties(text: str) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties``: ``name\\x01value`` pieces split by ``\\x02``.

    Pieces without a separator, with an empty name or an empty value are skipped; a later
    duplicate name wins.
    """
    out: dict[str, str] = {}
    for piece in text.split(PROPERTY_SEPARATOR):
        name, _, value = piece.partition(NAME_VALUE_SEPARATOR)
        if name and value:
            out[name] = value
    return out


def format_properties(props: dict[str, str] | list[tuple[str, str]]) -> str:
    """4.9.8 ``messageProperties2String``: pairs joined by ``\\x02``, no separator after the last."""
    items = props.items() if isinstance(props, dict) else props
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in items)


# --- Hosts ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def encode_host(host: str) -> bytes:
    """``"10.0.0.1:10911"`` or ``"fd00::1:10911"`` (last colon splits the port) to address + port bytes."""
    addr, _, port = host.rpartition(":")
    return ipaddress.ip_address(addr.strip("[]")).packed + struct.pack(">i", int(port))


def decode_host(raw: bytes) -> str:
    addr = ipaddress.ip_address(raw[:-4])
    port = struct.unpack(">i", raw[-4:])[0]
    if addr.version == 6:
        # the broker prints IPv6 in Java's full form: 8 groups, no zero compression
        groups = struct.unpack(">8H", raw[:16])
        return ":".join(f"{g:x}" for g in groups) + f":{port}"
    return f"{addr}:{port}"


# --- One record -------------------------------------------------------------------------


@dataclasses.dataclass
class Message:
    """One message record, decoded; field names as in ``MessageExt``."""

    topic: str
    body: bytes = b""
    properties: str = ""
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    store_timestamp: int = 0
    store_host: str = "127.0.0.1:10911"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int | None = None  # None: computed from the body when encoding
    v2: bool = False

    def property_map(self) -> dict[str, str]:
        return parse_properties(self.properties)


@functools.lru_cache(maxsize=4096)
def _topic_field(topic: str, v2: bool) -> bytes:
    """TOPICLENGTH (i8, or i16 in v2) followed by the topic's UTF-8 bytes."""
    raw = topic.encode("utf-8")
    if not v2 and len(raw) > 127:
        raise StoreFormatError(f"topic of {len(raw)} bytes needs the v2 record layout")
    return struct.pack(">h" if v2 else ">b", len(raw)) + raw


_STORE_TS = struct.Struct(">q")
_MIDDLE = struct.Struct(">iqi")  # RECONSUMETIMES, PREPARED TRANSACTION OFFSET, BODYLENGTH
_PROPS_LEN = struct.Struct(">h")


def encode_message(m: Message) -> bytes:
    """The record bytes the broker writes for ``m`` (TOTALSIZE computed, BODYCRC if not given)."""
    topic = _topic_field(m.topic, m.v2)
    props = m.properties.encode("utf-8")
    born = encode_host(m.born_host)
    store = encode_host(m.store_host)
    sys_flag = (
        (m.sys_flag & ~(FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6))
        | (FLAG_BORNHOST_V6 if len(born) == 20 else 0)
        | (FLAG_STOREHOST_V6 if len(store) == 20 else 0)
    )
    if len(props) > 0x7FFF:
        raise StoreFormatError(f"properties of {len(props)} bytes exceed the int16 length field")
    topic_len = len(topic) - (2 if m.v2 else 1)
    total = record_length(sys_flag, len(m.body), topic_len, len(props), m.v2)
    crc = body_crc(m.body) if m.body_crc is None else m.body_crc
    magic = MESSAGE_MAGIC_CODE_V2 if m.v2 else MESSAGE_MAGIC_CODE
    head = _HEAD.pack(
        total, magic, crc, m.queue_id, m.flag, m.queue_offset, m.physical_offset, sys_flag, m.born_timestamp
    )
    middle = _MIDDLE.pack(m.reconsume_times, m.prepared_transaction_offset, len(m.body))
    return b"".join(
        (
            head,
            born,
            _STORE_TS.pack(m.store_timestamp),
            store,
            middle,
            m.body,
            topic,
            _PROPS_LEN.pack(len(props)),
            props,
        )
    )


def encode_blank(length: int) -> bytes:
    """A BLANK end-of-segment record: TOTALSIZE = ``length``, BLANK magic, then zeros."""
    if length < END_FILE_MIN_BLANK_LENGTH:
        raise StoreFormatError(f"a BLANK record needs 8 bytes, got {length}")
    return HEAD_WORDS.pack(length, BLANK_MAGIC_CODE) + bytes(length - 8)


def decode_message(buf: bytes | memoryview, pos: int = 0, file: str = "") -> Message:
    """Decode the record at ``pos``; raises StoreFormatError on a bad magic or length."""
    total, magic = HEAD_WORDS.unpack_from(buf, pos)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        raise StoreFormatError(f"bad magic code 0x{magic & 0xFFFFFFFF:08X}", file, pos)
    (_, _, crc, qid, flag, qoff, phys, sys_flag, born_ts) = _HEAD.unpack_from(buf, pos)
    p = pos + OFF_BORNHOST
    bl = host_length(sys_flag, FLAG_BORNHOST_V6)
    born = decode_host(bytes(buf[p : p + bl]))
    p += bl
    (store_ts,) = struct.unpack_from(">q", buf, p)
    p += 8
    sl = host_length(sys_flag, FLAG_STOREHOST_V6)
    store = decode_host(bytes(buf[p : p + sl]))
    p += sl
    reconsume, prepared, body_len = struct.unpack_from(">iqi", buf, p)
    p += 16
    body = bytes(buf[p : p + body_len])
    p += body_len
    v2 = magic == MESSAGE_MAGIC_CODE_V2
    (topic_len,) = struct.unpack_from(">h" if v2 else ">b", buf, p)
    p += 2 if v2 else 1
    topic = bytes(buf[p : p + topic_len]).decode("utf-8", "replace")
    p += topic_len
    (props_len,) = struct.unpack_from(">h", buf, p)
    p += 2
    props = bytes(buf[p : p + props_len]).decode("utf-8", "replace")
    p += props_len
    if p - pos != total:
        raise StoreFormatError(f"TOTALSIZE {total} but the fields add up to {p - pos}", file, pos)
    return Message(
        topic,
        body,
        props,
        qid,
        flag,
        qoff,
        phys,
        sys_flag,
        born_ts,
        born,
        store_ts,
        store,
        reconsume,
        prepared,
        crc,
        v2,
    )
